#pragma once

// Runs the built `dsv41` binary from tests (DSV41_BINARY is set by tests/CMakeLists.txt).

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace dsv41 {

struct RunResult {
  std::string out;     // stdout
  int exit_code = -1;  // -1 if the process did not exit normally
};

// Runs `command` through the shell; stderr goes to the test log.
inline RunResult RunCommand(const std::string& command) {
  RunResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline const std::string kDsv41Binary = DSV41_BINARY;

}  // namespace dsv41

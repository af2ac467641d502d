#pragma once

// Runs `dsv41 serve` on a model as a child process for end-to-end tests: --port 0, the port read
// from its "listening on" line, ready once /health answers 200. DSV41_BINARY is set by
// tests/CMakeLists.txt.

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/http_client.h"

namespace dsv41 {

class ServeProcess {
 public:
  // Starts `dsv41 serve MODEL_DIR --port 0 <args>`, behind `launcher` when given (e.g. mpirun
  // and its flags; its first word an absolute path); nullptr (with the log in `error`) when it
  // exits or is not ready within `timeout`.
  static std::unique_ptr<ServeProcess> Start(
      const std::string& model_dir, const std::vector<std::string>& args,
      const std::string& log_path, std::string* error,
      std::chrono::seconds timeout = std::chrono::seconds(120),
      const std::vector<std::string>& launcher = {}) {
    std::vector<std::string> argv = launcher;
    for (const char* a : {DSV41_BINARY, "serve"}) argv.push_back(a);
    for (const std::string& a : {model_dir, std::string("--port"), std::string("0")}) {
      argv.push_back(a);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    // A fresh log each time: the port is read from it.
    std::remove(log_path.c_str());
    auto p = std::unique_ptr<ServeProcess>(new ServeProcess(log_path));
    p->pid_ = fork();
    if (p->pid_ == 0) {
      FILE* log = std::freopen(log_path.c_str(), "w", stderr);
      (void)log;
      std::vector<char*> c_argv;
      for (std::string& a : argv) c_argv.push_back(a.data());
      c_argv.push_back(nullptr);
      execv(c_argv[0], c_argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
        p->pid_ = -1;
        *error = "dsv41 serve exited: " + p->log();
        return nullptr;
      }
      if (p->port_ == 0) {
        const std::string log = p->log();
        const std::string marker = "listening on http://127.0.0.1:";
        const size_t at = log.find(marker);
        if (at != std::string::npos) p->port_ = std::atoi(log.c_str() + at + marker.size());
      }
      if (p->port_ > 0) {
        HttpClient client("127.0.0.1", p->port_, std::chrono::seconds(5));
        Result<HttpResponse> health = client.Get("/health");
        if (health.ok() && health->status == 200) return p;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    *error = "dsv41 serve not ready in time: " + p->log();
    return nullptr;
  }

  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool running() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return false;
    }
    return true;
  }
  // Sends `sig` and waits up to `timeout` for the exit; the exit code, or -1 (killed by a signal,
  // or still running at the deadline, then killed).
  int Stop(int sig, std::chrono::seconds timeout) {
    if (!running()) return exit_code_;
    kill(pid_, sig);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!running()) return exit_code_;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  explicit ServeProcess(std::string log_path) : log_path_(std::move(log_path)) {}
  std::string log_path_;
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
};

}  // namespace dsv41

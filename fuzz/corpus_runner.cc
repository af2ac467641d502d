// Runs a libFuzzer target's LLVMFuzzerTestOneInput over every file of the corpus directories (or
// files) named on the command line, so a seed corpus runs as a plain CTest test without libFuzzer
// (e.g. under GCC). Exits 1 when an argument is missing or names no file; a crash is a failure.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "base/mapped_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <corpus dir or file>...\n", argv[0]);
    return 2;
  }
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg, ec)) {
      // increment(ec) instead of a range-for: the iterator's operator++ throws on errors.
      for (std::filesystem::directory_iterator it(arg, ec), end; !ec && it != end;
           it.increment(ec)) {
        if (it->is_regular_file(ec)) files.push_back(it->path().string());
      }
      if (ec) {
        std::fprintf(stderr, "%s: cannot list: %s\n", argv[i], ec.message().c_str());
        return 1;
      }
    } else if (std::filesystem::is_regular_file(arg, ec)) {
      files.push_back(arg.string());
    } else {
      std::fprintf(stderr, "%s: no such corpus file or directory\n", argv[i]);
      return 1;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "no corpus files found\n");
    return 1;
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    dsv41::Result<std::string> data = dsv41::ReadFileToString(file);
    if (!data.ok()) {
      std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
      return 1;
    }
    // A copy in its own allocation so ASan catches reads past the end, as under libFuzzer.
    std::vector<uint8_t> input(data->begin(), data->end());
    std::fprintf(stderr, "running %s (%zu B)\n", file.c_str(), input.size());
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::fprintf(stderr, "ran %zu corpus inputs\n", files.size());
  return 0;
}

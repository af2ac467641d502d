#pragma once

#include <chrono>
#include <string>

#include "base/progress.h"

namespace dsv41 {

// Draws a library ProgressFn on stderr once a stage has run for a second: one line per stage,
// redrawn at most ~10 times a second when stderr is a terminal, otherwise printed at each whole
// 10% step. Results stay on stdout.
class ProgressPrinter {
 public:
  ProgressPrinter();
  ProgressFn AsFn();
  // Ends the current line (call after the job).
  void Done();

 private:
  bool Draw(const Progress& progress);
  bool tty_;
  std::string stage_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool open_line_ = false;
  bool printed_ = false;  // this stage has shown a line
};

}  // namespace dsv41

#include "cli/progress_printer.h"

#include <unistd.h>

#include <cstdio>

namespace dsv41 {

ProgressPrinter::ProgressPrinter()
    : tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressFn ProgressPrinter::AsFn() {
  return [this](const Progress& p) { return Draw(p); };
}

bool ProgressPrinter::Draw(const Progress& p) {
  const auto now = std::chrono::steady_clock::now();
  if (p.stage != stage_) {
    Done();
    stage_ = std::string(p.stage);
    last_decile_ = -1;
    start_ = now;
    printed_ = false;
  }
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double fraction =
      p.total > 0 ? static_cast<double>(p.done) / static_cast<double>(p.total) : 0;
  const int decile = static_cast<int>(fraction * 10);
  const bool finished = p.total > 0 && p.done >= p.total;
  // Jobs shorter than a second stay quiet (STYLE.md §9: progress for what takes longer).
  if (seconds < 1.0 && !(finished && printed_)) return true;
  if (tty_) {
    if (!finished && now - last_draw_ < std::chrono::milliseconds(100)) return true;
    std::fprintf(stderr, "\r%s: %3.0f%% (%llu / %llu %.*s) %.1f s", stage_.c_str(), fraction * 100,
                 static_cast<unsigned long long>(p.done), static_cast<unsigned long long>(p.total),
                 static_cast<int>(p.unit.size()), p.unit.data(), seconds);
    open_line_ = true;
    printed_ = true;
  } else if (decile != last_decile_) {
    std::fprintf(stderr, "%s: %3.0f%% (%llu / %llu %.*s) %.1f s\n", stage_.c_str(), fraction * 100,
                 static_cast<unsigned long long>(p.done), static_cast<unsigned long long>(p.total),
                 static_cast<int>(p.unit.size()), p.unit.data(), seconds);
    printed_ = true;
  }
  last_decile_ = decile;
  last_draw_ = now;
  return true;
}

void ProgressPrinter::Done() {
  if (open_line_) std::fputc('\n', stderr);
  open_line_ = false;
}

}  // namespace dsv41

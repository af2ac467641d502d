#include "base/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "base/check.h"
#include "base/status.h"

namespace dsv41 {
namespace {
std::atomic<int> g_log_level{static_cast<int>(LogLevel::kWarn)};
const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}
}  // namespace

void SetLogLevel(LogLevel level) { g_log_level.store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_log_level.load()); }

void LogMessage(LogLevel level, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  const std::string msg = StrFormatV(fmt, args);
  va_end(args);
  std::fprintf(stderr, "dsv41 %s: %s\n", LevelName(level), msg.c_str());
}

void CheckFailed(const char* file, int line, const char* cond, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  const std::string msg = StrFormatV(fmt, args);
  va_end(args);
  std::fprintf(stderr, "%s:%d: check failed: %s %s\n", file, line, cond, msg.c_str());
  std::abort();
}

void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, cond);
  std::abort();
}

}  // namespace dsv41

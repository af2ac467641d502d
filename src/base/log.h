#pragma once

// Logging to stderr (results go to stdout). The level is set once in main.

namespace dsv41 {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
void LogMessage(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace dsv41

#define DSV41_LOG_AT(level, ...)                                               \
  do {                                                                         \
    if (static_cast<int>(level) <= static_cast<int>(::dsv41::GetLogLevel())) { \
      ::dsv41::LogMessage(level, __VA_ARGS__);                                 \
    }                                                                          \
  } while (false)
#define DSV41_LOG_ERROR(...) DSV41_LOG_AT(::dsv41::LogLevel::kError, __VA_ARGS__)
#define DSV41_LOG_WARN(...) DSV41_LOG_AT(::dsv41::LogLevel::kWarn, __VA_ARGS__)
#define DSV41_LOG_INFO(...) DSV41_LOG_AT(::dsv41::LogLevel::kInfo, __VA_ARGS__)
#define DSV41_LOG_DEBUG(...) DSV41_LOG_AT(::dsv41::LogLevel::kDebug, __VA_ARGS__)

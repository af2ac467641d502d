#pragma once

// Invariant checks: a failure is a bug in dsv41, never bad input (input errors return a Status).
// DSV41_CHECK is always on; DSV41_DCHECK only in debug and sanitizer builds (hot loops).

namespace dsv41 {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}  // namespace dsv41

#define DSV41_CHECK(cond, ...)                                                    \
  do {                                                                            \
    if (__builtin_expect(!(cond), 0)) {                                           \
      ::dsv41::CheckFailed(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                             \
  } while (false)

#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__)
#define DSV41_DCHECK(cond, ...) DSV41_CHECK(cond, __VA_ARGS__)
#else
#define DSV41_DCHECK(cond, ...) \
  do {                          \
  } while (false && (cond))
#endif

#pragma once

#include <cstdarg>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace dsv41 {

// Why an operation failed. Expected failures (bad input, missing file) are Statuses; bugs are
// DSV41_CHECK failures.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad config field, flag, request or value
  kNotFound,         // missing file, tensor or key
  kDataLoss,         // corrupt or truncated file
  kIoError,          // the OS refused (open, mmap, write)
  kOutOfRange,       // index or size beyond a limit
  kUnimplemented,
  kCancelled,  // a progress callback asked the job to stop
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

// The result of an operation that can fail. Cheap to return when ok.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <message>" (adds the file or tensor name).
  Status WithPrefix(std::string_view prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

// printf-style formatting into a std::string.
std::string StrFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string StrFormatV(const char* fmt, va_list args);

Status InvalidArgumentError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status NotFoundError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status DataLossError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status IoError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status OutOfRangeError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status UnimplementedError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status CancelledError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status InternalError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : storage_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : storage_(std::move(status)) {
    if (std::get<Status>(storage_).ok()) {
      storage_ = Status(StatusCode::kInternal, "Result constructed from an ok Status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(storage_); }
  // The error, or an ok Status when there is a value.
  Status status() const { return ok() ? Status() : std::get<Status>(storage_); }

  T& value() & { return std::get<T>(storage_); }
  const T& value() const& { return std::get<T>(storage_); }
  T&& value() && { return std::get<T>(std::move(storage_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> storage_;
};

}  // namespace dsv41

#define DSV41_STATUS_CONCAT_INNER(a, b) a##b
#define DSV41_STATUS_CONCAT(a, b) DSV41_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is an error.
#define DSV41_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::dsv41::Status dsv41_status_ = (expr);        \
    if (!dsv41_status_.ok()) return dsv41_status_; \
  } while (false)

// `DSV41_ASSIGN_OR_RETURN(Type name, ResultExpr);` declares `name` from the Result's value or
// returns its Status.
#define DSV41_ASSIGN_OR_RETURN(decl, expr) \
  DSV41_ASSIGN_OR_RETURN_IMPL(DSV41_STATUS_CONCAT(dsv41_result_, __LINE__), decl, expr)
#define DSV41_ASSIGN_OR_RETURN_IMPL(result, decl, expr) \
  auto result = (expr);                                 \
  if (!result.ok()) return result.status();             \
  decl = std::move(result).value()

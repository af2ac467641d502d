#include "base/status.h"

#include <cstdio>
#include <vector>

namespace dsv41 {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "Ok";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kOutOfRange:
      return "OutOfRange";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "Ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithPrefix(std::string_view prefix) const {
  if (ok()) return *this;
  return Status(code_, std::string(prefix) + ": " + message_);
}

std::string StrFormatV(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  const int size = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (size <= 0) return std::string();
  std::string out(static_cast<size_t>(size) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), fmt, args);
  out.resize(static_cast<size_t>(size));
  return out;
}

std::string StrFormat(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = StrFormatV(fmt, args);
  va_end(args);
  return out;
}

#define DSV41_DEFINE_ERROR(Name, Code)               \
  Status Name(const char* fmt, ...) {                \
    va_list args;                                    \
    va_start(args, fmt);                             \
    std::string msg = StrFormatV(fmt, args);         \
    va_end(args);                                    \
    return Status(StatusCode::Code, std::move(msg)); \
  }

DSV41_DEFINE_ERROR(InvalidArgumentError, kInvalidArgument)
DSV41_DEFINE_ERROR(NotFoundError, kNotFound)
DSV41_DEFINE_ERROR(DataLossError, kDataLoss)
DSV41_DEFINE_ERROR(IoError, kIoError)
DSV41_DEFINE_ERROR(OutOfRangeError, kOutOfRange)
DSV41_DEFINE_ERROR(UnimplementedError, kUnimplemented)
DSV41_DEFINE_ERROR(CancelledError, kCancelled)
DSV41_DEFINE_ERROR(InternalError, kInternal)
#undef DSV41_DEFINE_ERROR

}  // namespace dsv41

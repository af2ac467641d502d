#pragma once

// Plain byte messages between the ranks of one run (base/communicator.h): values appended in
// the sender's byte order (every rank of a run is the same build on the same kind of CPU, which
// start-up checks), read back in the same order. A short or malformed message is a DataLoss
// naming what was being read, never a crash.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// Appends to a byte vector (cleared by the caller when it is reused).
class WireWriter {
 public:
  explicit WireWriter(std::vector<std::byte>& out) : out_(out) {}

  template <typename T>
  void Put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &value, sizeof(T));
  }
  // A count, then the elements.
  template <typename T>
  void PutSpan(std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    Put<uint64_t>(values.size());
    const size_t at = out_.size();
    out_.resize(at + values.size_bytes());
    if (!values.empty()) std::memcpy(out_.data() + at, values.data(), values.size_bytes());
  }
  void PutString(const std::string& s) { PutSpan(std::span<const char>(s.data(), s.size())); }

 private:
  std::vector<std::byte>& out_;
};

// Reads what a WireWriter wrote. Each Get fails (DataLoss naming `what` and the message) once the
// message is too short; later Gets keep failing.
class WireReader {
 public:
  WireReader(std::span<const std::byte> in, std::string message)
      : in_(in), message_(std::move(message)) {}

  template <typename T>
  Status Get(T& value, const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (in_.size() - at_ < sizeof(T)) return Short(what);
    std::memcpy(&value, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return OkStatus();
  }
  template <typename T>
  Status GetVector(std::vector<T>& values, const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    uint64_t n = 0;
    DSV41_RETURN_IF_ERROR(Get(n, what));
    if (n > (in_.size() - at_) / sizeof(T)) return Short(what);
    values.resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(values.data(), in_.data() + at_, static_cast<size_t>(n) * sizeof(T));
    at_ += static_cast<size_t>(n) * sizeof(T);
    return OkStatus();
  }
  Status GetString(std::string& s, const char* what) {
    std::vector<char> chars;
    DSV41_RETURN_IF_ERROR(GetVector(chars, what));
    s.assign(chars.begin(), chars.end());
    return OkStatus();
  }
  // Ok when every byte was read.
  Status Finish() const {
    if (at_ == in_.size()) return OkStatus();
    return DataLossError("%s: %zu bytes left over", message_.c_str(), in_.size() - at_);
  }

 private:
  Status Short(const char* what) const {
    return DataLossError("%s: too short for its %s (%zu bytes)", message_.c_str(), what,
                         in_.size());
  }

  std::span<const std::byte> in_;
  std::string message_;
  size_t at_ = 0;
};

}  // namespace dsv41

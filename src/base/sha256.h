#pragma once

// SHA-256 (FIPS 180-4): the content hash of images (vision.md §12: prefix-cache keys of image
// spans) and the files' digests `dsv41 vision` reports.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace dsv41 {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hashing: Update any number of times, then Finish once. Thread-compatible.
class Sha256 {
 public:
  Sha256();
  void Update(std::span<const uint8_t> bytes);
  Sha256Digest Finish();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_ = {};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest Sha256Of(std::span<const uint8_t> bytes);
// Lower-case hex, 64 characters.
std::string Sha256Hex(const Sha256Digest& digest);

}  // namespace dsv41

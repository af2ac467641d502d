#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// A numpy .npy array (format 1.0/2.0/3.0, little-endian, C order): the goldens' container and the
// output of `dsv41 logits --out`. Element types: float32 '<f4', float64 '<f8', int32 '<i4',
// int64 '<i8', int8 '|i1', uint8 '|u1', bool '|b1'.
struct NpyArray {
  std::string descr;           // numpy dtype string, e.g. "<f4"
  std::vector<int64_t> shape;  // empty for a scalar
  std::vector<std::byte> data;

  int64_t num_elements() const;
  // Elements converted to float / int64 (any of the supported types). Bools give 0/1.
  std::vector<float> ToFloat() const;
  std::vector<int64_t> ToInt64() const;
};

// Parses .npy bytes; errors name `what` and the fault (bad magic, big-endian, Fortran order,
// unsupported dtype, size mismatch).
Result<NpyArray> ParseNpy(std::span<const std::byte> bytes, std::string_view what);
Result<NpyArray> ReadNpy(const std::string& path);

// Serialises a float32 / int64 / uint8 array of `shape` (format 1.0, C order, little-endian).
std::string SerializeNpyFloat32(std::span<const float> values, std::span<const int64_t> shape);
std::string SerializeNpyInt64(std::span<const int64_t> values, std::span<const int64_t> shape);
std::string SerializeNpyUint8(std::span<const uint8_t> values, std::span<const int64_t> shape);
Status WriteNpyFloat32(const std::string& path, std::span<const float> values,
                       std::span<const int64_t> shape);
Status WriteNpyInt64(const std::string& path, std::span<const int64_t> values,
                     std::span<const int64_t> shape);
Status WriteNpyUint8(const std::string& path, std::span<const uint8_t> values,
                     std::span<const int64_t> shape);

}  // namespace dsv41

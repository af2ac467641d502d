#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dsv41 {

// Element types of safetensors tensors (checkpoint.md §3). The checkpoint uses BF16, F32, F8_E4M3,
// F8_E8M0 and I8 (packed e2m1 pairs); the others are accepted so foreign files still parse.
enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E4M3,
  kF8E5M2,
  kF8E8M0,
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// The safetensors spelling ("BF16", "F8_E4M3", ...).
std::string_view DTypeName(DType dtype);
// Parses a safetensors dtype string; nullopt when unknown.
std::optional<DType> DTypeFromName(std::string_view name);

// Whether a `.scale` tensor of this dtype holds E8M0 exponent bytes: F8_E8M0, or U8 as some
// converters store them (checkpoint.md §4). The byte is an exponent either way, never a number.
constexpr bool IsE8m0ScaleDType(DType dtype) {
  return dtype == DType::kF8E8M0 || dtype == DType::kU8;
}

using Shape = std::vector<int64_t>;

// "[a, b, c]", for messages.
std::string ShapeString(const Shape& shape);

// Number of elements of `shape` (1 for a scalar); nullopt on overflow or a negative dimension.
std::optional<uint64_t> NumElements(const Shape& shape);

}  // namespace dsv41

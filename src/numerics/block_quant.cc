#include "numerics/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// The ue8m0 byte of the least power of two 2^k with amax <= limit·2^k, k clamped to
// [-127, 127]; byte 127 (2^0) for amax == 0. Exact: limit·2^k is computed by ldexp.
uint8_t ScaleByteFor(float amax, float limit) {
  if (amax == 0.0f) return 127;
  int k = 0;
  std::frexp(amax / limit, &k);  // amax/limit in [2^(k-1), 2^k) up to the division's rounding
  // Settle k exactly against the exact products limit·2^k (doubles: no overflow, no rounding).
  const double a = amax;
  while (k > -127 && a <= std::ldexp(static_cast<double>(limit), k - 1)) --k;
  while (k < 127 && a > std::ldexp(static_cast<double>(limit), k)) ++k;
  k = std::clamp(k, -127, 127);
  return static_cast<uint8_t>(k + 127);
}

Status CheckShape(const char* what, int64_t rows, int64_t cols, const float* w) {
  if (rows < 0 || cols < 0) {
    return InvalidArgumentError("%s: shape [%lld, %lld] has a negative dimension", what,
                                static_cast<long long>(rows), static_cast<long long>(cols));
  }
  if (rows > 0 && cols > 0 && w == nullptr) {
    return InvalidArgumentError("%s: no data for shape [%lld, %lld]", what,
                                static_cast<long long>(rows), static_cast<long long>(cols));
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(w[r * cols + c])) {
        return InvalidArgumentError("%s: value at [%lld, %lld] is not finite (%g)", what,
                                    static_cast<long long>(r), static_cast<long long>(c),
                                    static_cast<double>(w[r * cols + c]));
      }
    }
  }
  return OkStatus();
}

void CheckFp8Sizes(int64_t rows, int64_t cols, size_t weight, size_t scale) {
  DSV41_CHECK(rows >= 0 && cols >= 0, "shape [%lld, %lld]", static_cast<long long>(rows),
              static_cast<long long>(cols));
  DSV41_CHECK(weight == static_cast<size_t>(rows * cols) &&
                  scale == static_cast<size_t>(NumTiles(rows) * NumTiles(cols)),
              "fp8 [%lld, %lld]: %zu codes, %zu scales", static_cast<long long>(rows),
              static_cast<long long>(cols), weight, scale);
}

void CheckMxfp4Sizes(int64_t rows, int64_t cols, size_t weight, size_t scale) {
  DSV41_CHECK(rows >= 0 && cols >= 0 && cols % kMxfp4Block == 0, "shape [%lld, %lld]",
              static_cast<long long>(rows), static_cast<long long>(cols));
  DSV41_CHECK(weight == static_cast<size_t>(rows * cols / 2) &&
                  scale == static_cast<size_t>(rows * cols / kMxfp4Block),
              "mxfp4 [%lld, %lld]: %zu bytes, %zu scales", static_cast<long long>(rows),
              static_cast<long long>(cols), weight, scale);
}

}  // namespace

Result<Fp8BlockWeights> QuantizeFp8Blocks(int64_t rows, int64_t cols, const float* w) {
  DSV41_RETURN_IF_ERROR(CheckShape("fp8 block quantisation", rows, cols, w));
  Fp8BlockWeights q;
  q.rows = rows;
  q.cols = cols;
  q.weight.resize(static_cast<size_t>(rows * cols));
  const int64_t tile_rows = NumTiles(rows), tile_cols = NumTiles(cols);
  q.scale.resize(static_cast<size_t>(tile_rows * tile_cols));
  for (int64_t tr = 0; tr < tile_rows; ++tr) {
    const int64_t r0 = tr * kFp8Tile, r1 = std::min(rows, r0 + kFp8Tile);
    for (int64_t tc = 0; tc < tile_cols; ++tc) {
      const int64_t c0 = tc * kFp8Tile, c1 = std::min(cols, c0 + kFp8Tile);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      const uint8_t byte = ScaleByteFor(amax, kE4m3Max);
      q.scale[tr * tile_cols + tc] = byte;
      const float s = F32FromE8m0(byte);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          // w / s is exact unless it falls below 2^-126, far under e4m3's 2^-10 rounding
          // threshold; |w / s| <= 448 except when k was clamped at 127 (unreachable for floats).
          q.weight[r * cols + c] = E4m3FromF32(w[r * cols + c] / s);
        }
      }
    }
  }
  return q;
}

void DequantizeFp8Row(int64_t rows, int64_t cols, std::span<const uint8_t> weight,
                      std::span<const uint8_t> scale, int64_t row, std::span<float> out) {
  CheckFp8Sizes(rows, cols, weight.size(), scale.size());
  DSV41_CHECK(row >= 0 && row < rows && out.size() == static_cast<size_t>(cols),
              "row %lld of %lld into %zu", static_cast<long long>(row),
              static_cast<long long>(rows), out.size());
  const uint8_t* codes = weight.data() + row * cols;
  const uint8_t* tile_scales = scale.data() + (row / kFp8Tile) * NumTiles(cols);
  for (int64_t c = 0; c < cols; ++c) {
    out[c] = F32FromE4m3(codes[c]) * F32FromE8m0(tile_scales[c / kFp8Tile]);
  }
}

void DequantizeFp8Blocks(int64_t rows, int64_t cols, std::span<const uint8_t> weight,
                         std::span<const uint8_t> scale, std::span<float> out) {
  CheckFp8Sizes(rows, cols, weight.size(), scale.size());
  DSV41_CHECK(out.size() == weight.size(), "out %zu for %zu codes", out.size(), weight.size());
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeFp8Row(rows, cols, weight, scale, r, out.subspan(r * cols, cols));
  }
}

Result<Mxfp4Weights> QuantizeMxfp4(int64_t rows, int64_t cols, const float* w) {
  DSV41_RETURN_IF_ERROR(CheckShape("mxfp4 quantisation", rows, cols, w));
  if (cols % kMxfp4Block != 0) {
    return InvalidArgumentError("mxfp4 quantisation: %lld columns is not a multiple of 32",
                                static_cast<long long>(cols));
  }
  Mxfp4Weights q;
  q.rows = rows;
  q.cols = cols;
  q.weight.assign(static_cast<size_t>(rows * cols / 2), 0);
  q.scale.resize(static_cast<size_t>(rows * cols / kMxfp4Block));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    uint8_t* packed = q.weight.data() + r * cols / 2;
    for (int64_t c0 = 0; c0 < cols; c0 += kMxfp4Block) {
      float amax = 0.0f;
      for (int64_t c = c0; c < c0 + kMxfp4Block; ++c) amax = std::max(amax, std::fabs(row[c]));
      const uint8_t byte = ScaleByteFor(amax, 6.0f);
      q.scale[(r * cols + c0) / kMxfp4Block] = byte;
      const float s = F32FromE8m0(byte);
      for (int64_t c = c0; c < c0 + kMxfp4Block; c += 2) {
        packed[c / 2] = PackE2m1Pair(E2m1FromF32(row[c] / s), E2m1FromF32(row[c + 1] / s));
      }
    }
  }
  return q;
}

void DequantizeMxfp4Row(int64_t rows, int64_t cols, std::span<const uint8_t> weight,
                        std::span<const uint8_t> scale, int64_t row, std::span<float> out) {
  CheckMxfp4Sizes(rows, cols, weight.size(), scale.size());
  DSV41_CHECK(row >= 0 && row < rows && out.size() == static_cast<size_t>(cols),
              "row %lld of %lld into %zu", static_cast<long long>(row),
              static_cast<long long>(rows), out.size());
  const uint8_t* packed = weight.data() + row * cols / 2;
  const uint8_t* block_scales = scale.data() + row * cols / kMxfp4Block;
  for (int64_t c = 0; c < cols; ++c) {
    out[c] = F32FromE2m1(E2m1CodeAt(packed, c)) * F32FromE8m0(block_scales[c / kMxfp4Block]);
  }
}

void DequantizeMxfp4(int64_t rows, int64_t cols, std::span<const uint8_t> weight,
                     std::span<const uint8_t> scale, std::span<float> out) {
  CheckMxfp4Sizes(rows, cols, weight.size(), scale.size());
  DSV41_CHECK(out.size() == static_cast<size_t>(rows * cols), "out %zu for [%lld, %lld]",
              out.size(), static_cast<long long>(rows), static_cast<long long>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeMxfp4Row(rows, cols, weight, scale, r, out.subspan(r * cols, cols));
  }
}

}  // namespace dsv41

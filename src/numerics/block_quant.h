#pragma once

// Checkpoint weight encodings (checkpoint.md §4): FP8 e4m3 with one ue8m0 scale per 32x32 tile,
// and MXFP4 (packed e2m1 pairs, one ue8m0 scale per 32 inputs of a row). The quantisers feed the
// tiny-checkpoint writer; the dequantisers are the reference the matmul kernels are tested
// against. All functions are thread-safe and take row-major [rows, cols] weights.

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace dsv41 {

inline constexpr int64_t kFp8Tile = 32;
inline constexpr int64_t kMxfp4Block = 32;

// An FP8 block-quantised [rows, cols] matrix as stored: `weight` holds rows·cols e4m3 codes,
// `scale` holds ceil(rows/32)·ceil(cols/32) ue8m0 bytes, row-major over tiles.
struct Fp8BlockWeights {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> weight;
  std::vector<uint8_t> scale;
};

// An MXFP4 [rows, cols] matrix as stored: `weight` holds rows·cols/2 bytes (row r, byte k packs
// elements 2k in the low nibble and 2k+1 in the high nibble), `scale` holds rows·cols/32 ue8m0
// bytes.
struct Mxfp4Weights {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> weight;
  std::vector<uint8_t> scale;
};

// Number of 32-wide tiles covering `n` (partial edge tiles count).
inline int64_t NumTiles(int64_t n) { return (n + kFp8Tile - 1) / kFp8Tile; }

// Quantises w[rows·cols] to FP8 blocks. Each tile's scale is the least power of two 2^k with
// amax(tile) <= 448·2^k (so no value is clipped; an all-zero tile gets 2^0), k limited to the
// ue8m0 range [-127, 127]; codes are e4m3(w / 2^k), RNE. Every value exactly representable as
// e4m3 · 2^k for some k, tile-wide, dequantises back to itself. InvalidArgument for a negative
// dimension or a non-finite value (named by row and column).
Result<Fp8BlockWeights> QuantizeFp8Blocks(int64_t rows, int64_t cols, const float* w);

// out[r·cols + c] = e4m3(weight[r·cols + c]) · 2^(scale[(r/32)·ceil(cols/32) + c/32] − 127), exact.
// Sizes must match (checked). A 0xFF scale byte gives NaN (loaders reject such files).
void DequantizeFp8Blocks(int64_t rows, int64_t cols, std::span<const uint8_t> weight,
                         std::span<const uint8_t> scale, std::span<float> out);
// Row `row` of the same matrix into out[cols].
void DequantizeFp8Row(int64_t rows, int64_t cols, std::span<const uint8_t> weight,
                      std::span<const uint8_t> scale, int64_t row, std::span<float> out);

// Quantises w[rows·cols] to MXFP4; cols must be a multiple of 32. Each block's scale is the least
// power of two 2^k with amax(block) <= 6·2^k (no clipping; all-zero block: 2^0), k in [-127, 127];
// codes are e2m1(w / 2^k) with ties to the even code. (The OCP MX rule 2^(floor(log2 amax) − 2)
// may clip to 6; this one never does, and both recover exactly representable blocks.)
// InvalidArgument for a bad shape or a non-finite value.
Result<Mxfp4Weights> QuantizeMxfp4(int64_t rows, int64_t cols, const float* w);

// out[r·cols + c] = e2m1(nibble(r, c)) · 2^(scale[r·cols/32 + c/32] − 127), exact. Sizes checked.
void DequantizeMxfp4(int64_t rows, int64_t cols, std::span<const uint8_t> weight,
                     std::span<const uint8_t> scale, std::span<float> out);
// Row `row` of the same matrix into out[cols].
void DequantizeMxfp4Row(int64_t rows, int64_t cols, std::span<const uint8_t> weight,
                        std::span<const uint8_t> scale, int64_t row, std::span<float> out);

}  // namespace dsv41

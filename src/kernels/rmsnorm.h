#pragma once

// RMSNorm of bf16-valued rows (model.md §5, §12.8 ★ items), a scalar reference and a SIMD twin
// that returns the same bits:
//   ms = fp32((Σ fp32(x_d²)) / n) (exact sum, one rounding), r = CrRsqrt(ms + eps),
//   y_d = bf16(fp32(w_d · fp32(x_d · r))).

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsv41 {

// `rows` rows of x [rows, n] into y [rows, n] (y may alias x); weight: n bf16 values as stored
// (little-endian bytes, any alignment); eps: fp32(rms_norm_eps). n >= 1.
void RmsNormRowsRef(std::span<const float> x, int64_t rows, std::span<const std::byte> weight,
                    float eps, std::span<float> y);
void RmsNormRowsSimd(std::span<const float> x, int64_t rows, std::span<const std::byte> weight,
                     float eps, std::span<float> y);

}  // namespace dsv41

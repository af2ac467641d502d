#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/status.h"

namespace dsv41 {

class ModelWeights;

// A bf16 RMSNorm weight [n] as stored in the checkpoint (little-endian bytes, any alignment).
struct NormWeight {
  std::span<const std::byte> bf16;
  int64_t size() const { return static_cast<int64_t>(bf16.size() / 2); }
};

// The norm weight `name` (e.g. "layers.3.attn_norm.weight"): BF16 [n]; InvalidArgument naming the
// tensor otherwise, NotFound when absent.
Result<NormWeight> GetNormWeight(const ModelWeights& weights, std::string_view name, int64_t n);

// RMSNorm of one row of bf16 values held as fp32 (model.md §5, §12.8 ★ items):
//   ms = fp32((Σ fp32(x_d²)) / n)  (exact sum, one rounding), r = rsqrt(ms + eps) (correctly
//   rounded), y_d = bf16(fp32(w_d · fp32(x_d · r))).
// y holds bf16 values as fp32. x.size() == y.size() == weight.size() >= 1 (checked); y may alias x.
// eps is fp32(rms_norm_eps). Callers skip padding rows (model.md §5, §12.7).
// Thread-safe (pure).
void RmsNorm(std::span<const float> x, const NormWeight& weight, float eps, std::span<float> y);

// RmsNorm of each of `rows` rows of x [rows, n] into y [rows, n] (y may alias x).
void RmsNormRows(std::span<const float> x, int64_t rows, const NormWeight& weight, float eps,
                 std::span<float> y);

}  // namespace dsv41

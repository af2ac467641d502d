#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "base/status.h"
#include "kernels/linear.h"

namespace dsv41 {

class ModelWeights;

// The stored linear weight `<prefix>.weight` (with `<prefix>.scale` when present) as a kernels
// view, its format chosen from the dtypes as model.md §12.4's rule for unknown checkpoints says:
// F8_E4M3 + F8_E8M0 scale [ceil(out/32), ceil(in/32)] → kFp8Block, I8 (e2m1 pairs) + F8_E8M0 scale
// [out, in/32] → kMxfp4, BF16 → kBf16, F32 → kF32. Errors (missing tensor, a scale on a bf16/fp32
// weight, a quantised weight without a scale, wrong rank or scale shape) name the tensor. The view
// points into `weights`' mappings and lives as long as it.
Result<LinearWeight> GetLinear(const ModelWeights& weights, std::string_view prefix);

// The same, checking the logical shape [out, in] the config implies (InvalidArgument naming the
// tensor otherwise).
Result<LinearWeight> GetLinear(const ModelWeights& weights, std::string_view prefix, int64_t out,
                               int64_t in);

// The options of a product with `w` (model.md §12.3, §12.4): FP8 and FP4 weights quantise their
// input first. Every input of a weight product in this model holds bf16 values (RMSNorm outputs,
// rounded projections, rounded attention outputs and SwiGLU products, Engram rows), which lets
// the bf16 dot-product kernel compute them exactly.
inline LinearOptions LinearOptionsFor(const LinearWeight& w) {
  return LinearOptions{.quantize_activations =
                           w.format == WeightFormat::kFp8Block || w.format == WeightFormat::kMxfp4,
                       .bf16_inputs = true};
}

// y = W · x over `rows` rows with LinearOptionsFor(w), fp32 outputs (the "fp32" rows of §12.4).
void LinearProduct(const LinearWeight& w, std::span<const float> x, int64_t rows,
                   std::span<float> y, ExecContext& ctx);
// y = bf16(W · x): the "bf16" outputs of §12.4's per-weight table.
void LinearBf16(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
                ExecContext& ctx);

}  // namespace dsv41

#pragma once

#include <array>
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

// The products of one input that several parts of a layer read (the attention input feeds wq_a,
// the window wkv, the compressor's wkv and wgate and the indexer's weights_proj; qr feeds both
// wq_b), queued and then run in one parallel region: one fork-join instead of one per product,
// and one prepared copy of x per preparation (format, K, options, kernel) instead of one per
// weight. Each output has the bits its own LinearProduct / LinearBf16 call would give.
class ProductsOfInput {
 public:
  static constexpr int kMaxProducts = 8;

  // x: [rows, in] for every queued weight; it must stay alive and unchanged until Run.
  ProductsOfInput(std::span<const float> x, int64_t rows) : x_(x), rows_(rows) {}

  std::span<const float> x() const { return x_; }
  int64_t rows() const { return rows_; }

  // Queues y = W · x ([rows, w.out], fp32) or, when `round_bf16`, y = bf16(W · x); y is written
  // by Run. At most kMaxProducts per object (checked).
  void Add(const LinearWeight& w, std::span<float> y, bool round_bf16);

  // Runs every queued product (one RunLinearJobs); the prepared inputs come from ctx.arena and
  // are released before it returns. Empties the queue.
  void Run(ExecContext& ctx);

 private:
  struct Product {
    const LinearWeight* w = nullptr;
    std::span<float> y;
    bool round_bf16 = false;
  };
  std::span<const float> x_;
  int64_t rows_ = 0;
  std::array<Product, kMaxProducts> products_{};
  int num_products_ = 0;
};

}  // namespace dsv41

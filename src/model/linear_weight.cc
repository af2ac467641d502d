#include "model/linear_weight.h"

#include <optional>
#include <string>

#include "base/check.h"
#include "checkpoint/dtype.h"
#include "config/tensor_inventory.h"  // ShapeString
#include "model/weights.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Result<LinearWeight> GetLinear(const ModelWeights& weights, std::string_view prefix) {
  const std::string weight_name = std::string(prefix) + ".weight";
  const std::string scale_name = std::string(prefix) + ".scale";
  DSV41_ASSIGN_OR_RETURN(TensorView w, weights.Get(weight_name));
  std::optional<TensorView> scale = weights.checkpoint().Find(scale_name);
  if (w.shape.size() != 2 || w.shape[0] <= 0 || w.shape[1] <= 0) {
    return InvalidArgumentError("'%s': shape %s, want a non-empty [out, in] matrix",
                                weight_name.c_str(), ShapeString(w.shape).c_str());
  }
  LinearWeight out;
  out.out = w.shape[0];
  out.weight = w.bytes;
  Shape want_scale;
  switch (w.dtype) {
    case DType::kBF16:
    case DType::kF32:
      if (scale.has_value()) {
        return InvalidArgumentError("'%s': %s weight with a '%s' companion", weight_name.c_str(),
                                    std::string(DTypeName(w.dtype)).c_str(), scale_name.c_str());
      }
      out.format = w.dtype == DType::kBF16 ? WeightFormat::kBf16 : WeightFormat::kF32;
      out.in = w.shape[1];
      return out;
    case DType::kF8E4M3:
      out.format = WeightFormat::kFp8Block;
      out.in = w.shape[1];
      want_scale = {CeilDiv(out.out, 32), CeilDiv(out.in, 32)};
      break;
    case DType::kI8:
      out.format = WeightFormat::kMxfp4;
      out.in = w.shape[1] * 2;  // two e2m1 values per byte
      if (out.in % 32 != 0) {
        return InvalidArgumentError(
            "'%s': MXFP4 shape %s, want an input size that is a multiple "
            "of 32 (got %lld)",
            weight_name.c_str(), ShapeString(w.shape).c_str(), static_cast<long long>(out.in));
      }
      want_scale = {out.out, out.in / 32};
      break;
    default:
      return InvalidArgumentError("'%s': dtype %s is not a linear weight format",
                                  weight_name.c_str(), std::string(DTypeName(w.dtype)).c_str());
  }
  if (!scale.has_value()) {
    return InvalidArgumentError("'%s': %s weight without '%s'", weight_name.c_str(),
                                std::string(DTypeName(w.dtype)).c_str(), scale_name.c_str());
  }
  if (!IsE8m0ScaleDType(scale->dtype) || scale->shape != want_scale) {
    return InvalidArgumentError("'%s': %s %s, want F8_E8M0 (or U8) %s", scale_name.c_str(),
                                std::string(DTypeName(scale->dtype)).c_str(),
                                ShapeString(scale->shape).c_str(), ShapeString(want_scale).c_str());
  }
  out.scale = scale->bytes;
  return out;
}

Result<LinearWeight> GetLinear(const ModelWeights& weights, std::string_view prefix, int64_t out,
                               int64_t in) {
  DSV41_ASSIGN_OR_RETURN(LinearWeight w, GetLinear(weights, prefix));
  if (w.out != out || w.in != in) {
    return InvalidArgumentError("'%.*s.weight': shape [%lld, %lld], want [%lld, %lld]",
                                static_cast<int>(prefix.size()), prefix.data(),
                                static_cast<long long>(w.out), static_cast<long long>(w.in),
                                static_cast<long long>(out), static_cast<long long>(in));
  }
  return w;
}

void LinearProduct(const LinearWeight& w, std::span<const float> x, int64_t rows,
                   std::span<float> y, ExecContext& ctx) {
  Linear(w, x, rows, y, LinearOptionsFor(w), ctx);
}

void LinearBf16(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
                ExecContext& ctx) {
  LinearProduct(w, x, rows, y, ctx);
  for (float& v : y) v = Bf16Round(v);
}

void ProductsOfInput::Add(const LinearWeight& w, std::span<float> y, bool round_bf16) {
  DSV41_CHECK(num_products_ < kMaxProducts, "more than %d products of one input", kMaxProducts);
  DSV41_CHECK(static_cast<int64_t>(x_.size()) == rows_ * w.in &&
                  static_cast<int64_t>(y.size()) == rows_ * w.out,
              "x %zu, y %zu for %lld rows of a [%lld, %lld] weight", x_.size(), y.size(),
              static_cast<long long>(rows_), static_cast<long long>(w.out),
              static_cast<long long>(w.in));
  products_[num_products_++] = Product{&w, y, round_bf16};
}

void ProductsOfInput::Run(ExecContext& ctx) {
  const int count = num_products_;
  num_products_ = 0;
  if (rows_ == 0 || count == 0) return;
  ArenaScope scope(ctx.arena);
  std::array<LinearJob, kMaxProducts> jobs;
  std::array<GemmKernel, kMaxProducts> kernels;
  for (int k = 0; k < count; ++k) {
    const LinearWeight& w = *products_[k].w;
    const LinearOptions options = LinearOptionsFor(w);
    kernels[k] = SelectGemmKernel(w, options, ctx.numerics);
    // A product prepared like an earlier one (LinearOptionsFor depends on the format only)
    // shares its prepared input.
    int same = 0;
    while (same < k && !(products_[same].w->format == w.format && products_[same].w->in == w.in &&
                         kernels[same] == kernels[k])) {
      ++same;
    }
    jobs[k] = same < k ? LinearJob{&w, jobs[same].x, products_[k].y.data(), w.out}
                       : PrepareLinearJob(w, x_, rows_, products_[k].y, options, ctx);
  }
  RunLinearJobs(std::span<const LinearJob>(jobs.data(), count), ctx);
  for (int k = 0; k < count; ++k) {
    if (!products_[k].round_bf16) continue;
    for (float& v : products_[k].y) v = Bf16Round(v);
  }
}

}  // namespace dsv41

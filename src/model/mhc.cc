#include "model/mhc.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "config/config.h"
#include "kernels/exact_sum.h"
#include "kernels/sinkhorn.h"
#include "kernels/stream_mix.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

float LoadF32(std::span<const std::byte> bytes, size_t idx) {
  float value;
  std::memcpy(&value, bytes.data() + idx * sizeof(float), sizeof(value));
  return value;
}

Result<std::span<const std::byte>> GetF32(const ModelWeights& weights, const std::string& name,
                                          const Shape& shape) {
  DSV41_ASSIGN_OR_RETURN(TensorView view, weights.Get(name));
  if (view.dtype != DType::kF32 || view.shape != shape) {
    std::string want, got;
    for (int64_t d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
    for (int64_t d : view.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
    return InvalidArgumentError("mHC tensor '%s': want F32 [%s], got %.*s [%s]", name.c_str(),
                                want.c_str(), static_cast<int>(DTypeName(view.dtype).size()),
                                DTypeName(view.dtype).data(), got.c_str());
  }
  return view.bytes;
}

}  // namespace

float MixDot(std::span<const std::byte> fn, std::span<const float> x) {
  DSV41_CHECK(fn.size() == x.size() * sizeof(float), "MixDot: %zu fn bytes for %zu values",
              fn.size(), x.size());
  return ExactDotUnalignedSimd(fn, x);
}

MhcDims MhcDimsFromConfig(const ModelConfig& config) {
  DSV41_CHECK(config.hc_mult >= 1 && config.hc_mult <= kMaxHcMult, "hc_mult %d", config.hc_mult);
  MhcDims dims;
  dims.hc_mult = config.hc_mult;
  dims.hidden_size = config.hidden_size;
  dims.sinkhorn_iters = config.hc_sinkhorn_iters;
  dims.norm_eps = static_cast<float>(config.rms_norm_eps);
  dims.hc_eps = static_cast<float>(config.hc_eps);
  return dims;
}

Result<MhcWeights> GetMhcWeights(const ModelWeights& weights, std::string_view prefix,
                                 const MhcDims& dims) {
  const std::string p(prefix);
  MhcWeights site;
  DSV41_ASSIGN_OR_RETURN(site.fn,
                         GetF32(weights, p + "_fn", {dims.mix_rows(), dims.stream_values()}));
  DSV41_ASSIGN_OR_RETURN(site.base, GetF32(weights, p + "_base", {dims.mix_rows()}));
  DSV41_ASSIGN_OR_RETURN(site.scale, GetF32(weights, p + "_scale", {3}));
  return site;
}

MhcMix InitialPreMix(int32_t hc_mult) {
  DSV41_CHECK(hc_mult >= 1 && hc_mult <= kMaxHcMult, "hc_mult %d", hc_mult);
  MhcMix mix;
  mix.hc_mult = hc_mult;
  mix.pre[0] = 1.0f;
  return mix;
}

static_assert(kMaxHcMult <= kSinkhornMaxN, "the Sinkhorn kernel takes every hc_mult");

void SinkhornNormalize(std::span<float> c, int32_t n, int32_t iters, float eps) {
  DSV41_CHECK(n >= 1 && c.size() == static_cast<size_t>(n) * n && iters >= 1,
              "Sinkhorn of %zu values as %d x %d, %d iterations", c.size(), n, n, iters);
  SinkhornSimd(c, n, iters, eps);
}

namespace {

// Steps 2–9 of model.md §4.2 from the raw dot products fn[r]·x (dots [mix_rows]) and x; without
// `sinkhorn`, comb holds the affine logits of step 6 (the caller normalises them).
MhcMix FinishMix(std::span<const float> x, std::span<const float> dots, const MhcWeights& weights,
                 const MhcDims& dims, bool sinkhorn = true) {
  const int32_t hc = dims.hc_mult;
  const float rho = CrRsqrt(ExactMeanSquareSimd(x) + dims.norm_eps);
  std::array<float, (2 + kMaxHcMult) * kMaxHcMult> m{};
  for (int32_t r = 0; r < dims.mix_rows(); ++r) m[r] = dots[r] * rho;  // ρ after the dot (§4.2)
  const float scale_pre = LoadF32(weights.scale, 0);
  const float scale_post = LoadF32(weights.scale, 1);
  const float scale_comb = LoadF32(weights.scale, 2);
  MhcMix mix;
  mix.hc_mult = hc;
  for (int32_t j = 0; j < hc; ++j) {
    const float pre_logit = m[j] * scale_pre + LoadF32(weights.base, j);
    mix.pre[j] = Sigmoid(pre_logit) + dims.hc_eps;
    const float post_logit = m[hc + j] * scale_post + LoadF32(weights.base, hc + j);
    mix.post[j] = 2.0f * Sigmoid(post_logit);
  }
  for (int32_t idx = 0; idx < hc * hc; ++idx) {
    mix.comb[idx] = m[2 * hc + idx] * scale_comb + LoadF32(weights.base, 2 * hc + idx);
  }
  if (sinkhorn) {
    SinkhornNormalize(std::span<float>(mix.comb.data(), static_cast<size_t>(hc) * hc), hc,
                      dims.sinkhorn_iters, dims.hc_eps);
  }
  return mix;
}

void CheckMixShapes(size_t x_size, const MhcWeights& weights, const MhcDims& dims) {
  const size_t width = static_cast<size_t>(dims.stream_values());
  const size_t rows = static_cast<size_t>(dims.mix_rows());
  DSV41_CHECK(
      dims.hc_mult >= 1 && dims.hc_mult <= kMaxHcMult && x_size == width &&
          weights.fn.size() == rows * width * sizeof(float) &&
          weights.base.size() == rows * sizeof(float) && weights.scale.size() == 3 * sizeof(float),
      "mHC mix: %zu stream values, want %zu; fn %zu bytes", x_size, width, weights.fn.size());
}

}  // namespace

MhcMix ComputeMix(std::span<const float> x, const MhcWeights& weights, const MhcDims& dims) {
  CheckMixShapes(x.size(), weights, dims);
  const size_t width = x.size();
  std::array<float, (2 + kMaxHcMult) * kMaxHcMult> dots{};
  for (int32_t r = 0; r < dims.mix_rows(); ++r) {
    // §4.2 step 3: the dot product accumulated exactly and rounded once.
    dots[r] = MixDot(weights.fn.subspan(r * width * sizeof(float), width * sizeof(float)), x);
  }
  return FinishMix(x, std::span<const float>(dots.data(), dims.mix_rows()), weights, dims);
}

void ComputeMixRows(std::span<const float> streams, int64_t rows, const MhcWeights& weights,
                    const MhcDims& dims, std::span<MhcMix> mixes, ExecContext& ctx) {
  const size_t width = static_cast<size_t>(dims.stream_values());
  const int64_t mix_rows = dims.mix_rows();
  DSV41_CHECK(
      rows >= 0 && streams.size() == rows * width && mixes.size() == static_cast<size_t>(rows),
      "ComputeMixRows: %lld rows, %zu stream values, %zu mixes", static_cast<long long>(rows),
      streams.size(), mixes.size());
  if (rows == 0) return;
  CheckMixShapes(width, weights, dims);
  ArenaScope scope(ctx.arena);
  ctx.stats.weight_bytes += weights.fn.size();
  std::span<float> dots = ctx.arena.Alloc<float>(rows * mix_rows);
  // An item: a group of mix rows against a pair of tokens' streams, the group's rows sharing each
  // pass over a token and the tokens each pass over the rows (each dot MixDot's exact value); six
  // items for a decode token's 24 rows.
  constexpr int64_t kRowsPerItem = 4, kTokensPerItem = 2;
  const int64_t groups = (mix_rows + kRowsPerItem - 1) / kRowsPerItem;
  const int64_t token_groups = (rows + kTokensPerItem - 1) / kTokensPerItem;
  const auto dot_items = [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / groups * kTokensPerItem;
      const int64_t tokens = std::min(kTokensPerItem, rows - t);
      const int64_t first = item % groups * kRowsPerItem;
      const int64_t count = std::min(kRowsPerItem, mix_rows - first);
      ExactDotsOfTokensUnalignedSimd(
          weights.fn.subspan(first * width * sizeof(float), count * width * sizeof(float)), count,
          streams.subspan(t * width, tokens * width), tokens,
          dots.subspan(t * mix_rows + first, (tokens - 1) * mix_rows + count), mix_rows);
    }
  };
  // Per chunk: steps 2–6 per token, then the Sinkhorn of up to kSinkhornTokens tokens at once
  // (the kernel vectorises across tokens).
  const auto finish = [&](int64_t begin, int64_t end, int) {
    constexpr int64_t kSinkhornTokens = 16;
    const int64_t hh = static_cast<int64_t>(dims.hc_mult) * dims.hc_mult;
    std::array<float, kSinkhornTokens * kMaxHcMult * kMaxHcMult> comb;
    for (int64_t first = begin; first < end; first += kSinkhornTokens) {
      const int64_t count = std::min(kSinkhornTokens, end - first);
      for (int64_t t = first; t < first + count; ++t) {
        mixes[t] = FinishMix(streams.subspan(t * width, width),
                             std::span<const float>(&dots[t * mix_rows], mix_rows), weights, dims,
                             /*sinkhorn=*/false);
        std::copy_n(mixes[t].comb.data(), hh, comb.data() + (t - first) * hh);
      }
      SinkhornSimd(std::span<float>(comb.data(), count * hh), dims.hc_mult, dims.sinkhorn_iters,
                   dims.hc_eps);
      for (int64_t t = first; t < first + count; ++t) {
        std::copy_n(comb.data() + (t - first) * hh, hh, mixes[t].comb.data());
      }
    }
  };
  ctx.pool.ParallelFor(token_groups * groups, 1, dot_items);
  ctx.pool.ParallelFor(rows, 1, finish);
}

void HcPreRows(std::span<const float> x, std::span<const float> pre, int64_t rows,
               std::span<float> out) {
  DSV41_CHECK(rows >= 0, "HcPreRows: %lld rows", static_cast<long long>(rows));
  if (rows == 0) return;
  DSV41_CHECK(pre.size() % rows == 0 && out.size() % rows == 0, "HcPreRows: pre %zu, out %zu",
              pre.size(), out.size());
  const size_t hc = pre.size() / rows;
  const size_t dim = out.size() / rows;
  DSV41_CHECK(x.size() == rows * hc * dim, "HcPreRows: %zu stream values", x.size());
  for (int64_t t = 0; t < rows; ++t) {
    HcPre(x.subspan(t * hc * dim, hc * dim), pre.subspan(t * hc, hc), out.subspan(t * dim, dim));
  }
}

void HcPre(std::span<const float> x, std::span<const float> pi, std::span<float> out) {
  HcPreSimd(x, pi, out);
}

void HcPost(std::span<const float> y, std::span<const float> r, const MhcMix& mix,
            std::span<float> out) {
  const size_t hc = static_cast<size_t>(mix.hc_mult);
  HcPostSimd(y, r, std::span<const float>(mix.comb.data(), hc * hc),
             std::span<const float>(mix.post.data(), hc), out);
}

}  // namespace dsv41

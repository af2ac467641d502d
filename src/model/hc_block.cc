#include "model/hc_block.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace dsv41 {

Result<HcBlockWeights> GetHcBlockWeights(const ModelWeights& weights, std::string_view prefix,
                                         const MhcDims& dims) {
  const std::string p(prefix);
  HcBlockWeights block;
  DSV41_ASSIGN_OR_RETURN(block.hc_attn, GetMhcWeights(weights, p + ".hc_attn", dims));
  DSV41_ASSIGN_OR_RETURN(block.hc_ffn, GetMhcWeights(weights, p + ".hc_ffn", dims));
  DSV41_ASSIGN_OR_RETURN(block.attn_norm,
                         GetNormWeight(weights, p + ".attn_norm.weight", dims.hidden_size));
  DSV41_ASSIGN_OR_RETURN(block.ffn_norm,
                         GetNormWeight(weights, p + ".ffn_norm.weight", dims.hidden_size));
  return block;
}

void SublayerInput(std::span<const float> x, std::span<const float> pre, int64_t rows,
                   const MhcWeights& site, const NormWeight& norm, const MhcDims& dims,
                   std::span<MhcMix> mixes, std::span<float> in, ExecContext& ctx) {
  ComputeMixRows(x, rows, site, dims, mixes, ctx);
  HcPreRows(x, pre, rows, in);
  RmsNormRows(in, rows, norm, dims.norm_eps, in);
}

void SublayerOutput(std::span<const float> out, std::span<const MhcMix> mixes, int64_t rows,
                    const MhcDims& dims, std::span<float> x, std::span<float> next_pre) {
  const size_t hc = static_cast<size_t>(dims.hc_mult);
  const size_t dim = static_cast<size_t>(dims.hidden_size);
  const size_t stream = hc * dim;
  DSV41_CHECK(rows >= 0 && out.size() == rows * dim && x.size() == rows * stream &&
                  next_pre.size() == rows * hc && mixes.size() >= static_cast<size_t>(rows),
              "SublayerOutput: %lld rows, out %zu, x %zu, pre %zu", static_cast<long long>(rows),
              out.size(), x.size(), next_pre.size());
  for (int64_t t = 0; t < rows; ++t) {
    const std::span<float> xt = x.subspan(t * stream, stream);
    HcPost(out.subspan(t * dim, dim), xt, mixes[t], xt);
    std::copy_n(mixes[t].pre.begin(), hc, next_pre.begin() + t * hc);
  }
}

}  // namespace dsv41

#pragma once

// The residual-stream side of a hyper-connected block (model.md §4.4), shared by the backbone
// layers and the DSpark stages: around each sublayer, the site's mix coefficients and the
// sublayer input collapsed from the streams, then the sublayer output expanded back into them.
// Per block, with pi the incoming pre-mix:
//   SublayerInput(x, pi, hc_attn, attn_norm → mix_a, in);   a = ATTN(in)
//   SublayerOutput(a, mix_a → x, pre);                       (pre = mix_a.pre)
//   SublayerInput(x, pre, hc_ffn, ffn_norm → mix_f, in);     f = MOE(in)
//   SublayerOutput(f, mix_f → x, pi);                        (pi = mix_f.pre, the next block's)

#include <cstdint>
#include <span>
#include <string_view>

#include "base/exec_context.h"
#include "base/status.h"
#include "model/mhc.h"
#include "model/norm.h"

namespace dsv41 {

class ModelWeights;

// The mHC sites and norms of one block (checkpoint.md §6.5): `<prefix>.hc_{attn,ffn}_*` and
// `<prefix>.{attn,ffn}_norm.weight`, views into the ModelWeights.
struct HcBlockWeights {
  MhcWeights hc_attn;
  MhcWeights hc_ffn;
  NormWeight attn_norm;
  NormWeight ffn_norm;
};

// The block `prefix` ("layers.3", "mtp.0"); errors name the tensor.
Result<HcBlockWeights> GetHcBlockWeights(const ModelWeights& weights, std::string_view prefix,
                                         const MhcDims& dims);

// For each of `rows` tokens: mixes[t] = MIX(x[t], site) and in[t] = RMSNorm(norm, hc_pre(x[t],
// pre[t])) (eps = dims.norm_eps). x [rows, hc_mult, hidden] streams, pre [rows, hc_mult], in
// [rows, hidden]. The mix products are spread over ctx.pool without changing a bit.
void SublayerInput(std::span<const float> x, std::span<const float> pre, int64_t rows,
                   const MhcWeights& site, const NormWeight& norm, const MhcDims& dims,
                   std::span<MhcMix> mixes, std::span<float> in, ExecContext& ctx);

// For each of `rows` tokens: x[t] = hc_post(out[t], x[t], mixes[t]) (the streams that entered the
// sublayer, updated in place) and next_pre[t] = mixes[t].pre. out [rows, hidden].
void SublayerOutput(std::span<const float> out, std::span<const MhcMix> mixes, int64_t rows,
                    const MhcDims& dims, std::span<float> x, std::span<float> next_pre);

}  // namespace dsv41

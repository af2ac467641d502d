#pragma once

// mHC, the manifold-constrained hyper-connections of model.md §4: the per-token mix coefficients
// (MIX with its Sinkhorn normalisation), the collapse of the streams into a sublayer input
// (hc_pre) and the expansion of a sublayer output back into the streams (hc_post). Streams are
// [hc_mult, hidden_size] bf16 values held as fp32, stream-major (index k·hidden_size + d).
//
// The forward wires a block with lagged pre-mixes (§4.4), per token:
//   R = X;  mix_a = ComputeMix(X, hc_attn);  a = ATTN(RmsNorm(attn_norm, HcPre(X, pi_in)))
//   X = HcPost(a, R, mix_a);  R = X;  mix_f = ComputeMix(X, hc_ffn)
//   f = MOE(RmsNorm(ffn_norm, HcPre(X, mix_a.pre)));  X = HcPost(f, R, mix_f)
//   next pi_in = mix_f.pre   (layer 0 gets InitialPreMix(); the head collapses with the last one)
// Every function here is pure and thread-safe.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/exec_context.h"
#include "base/status.h"

namespace dsv41 {

class ModelWeights;
struct ModelConfig;

// The largest hc_mult these fixed-size coefficient arrays hold (the release uses 4).
inline constexpr int32_t kMaxHcMult = 8;

// The config constants mHC uses, converted to fp32 once (model.md §12.8 item 5).
struct MhcDims {
  int32_t hc_mult = 4;
  int32_t hidden_size = 0;
  int32_t sinkhorn_iters = 20;
  float norm_eps = 0.0f;  // fp32(rms_norm_eps), the statistic's eps
  float hc_eps = 0.0f;    // fp32(hc_eps)

  int32_t mix_rows() const { return (2 + hc_mult) * hc_mult; }
  int64_t stream_values() const { return static_cast<int64_t>(hc_mult) * hidden_size; }
};
// From a validated config; hc_mult must be in [1, kMaxHcMult] (checked).
MhcDims MhcDimsFromConfig(const ModelConfig& config);

// One mHC site's parameters (model.md §4.1), fp32 little-endian bytes of any alignment, viewing
// the checkpoint: fn [mix_rows, hc_mult·hidden_size], base [mix_rows], scale [3].
struct MhcWeights {
  std::span<const std::byte> fn;
  std::span<const std::byte> base;
  std::span<const std::byte> scale;
};

// The site `prefix` ("layers.3.hc_attn" or "layers.3.hc_ffn"): tensors prefix_fn, prefix_base,
// prefix_scale, each F32 with the shape above; NotFound / InvalidArgument naming the tensor.
Result<MhcWeights> GetMhcWeights(const ModelWeights& weights, std::string_view prefix,
                                 const MhcDims& dims);

// The mix coefficients of one token, all fp32 (model.md §4.2 output).
struct MhcMix {
  int32_t hc_mult = 0;
  std::array<float, kMaxHcMult> pre{};                // collapse weights (+ hc_eps)
  std::array<float, kMaxHcMult> post{};               // expansion weights, 2·sigmoid
  std::array<float, kMaxHcMult * kMaxHcMult> comb{};  // C[i][k] at i·hc_mult + k (Sinkhorn)

  float C(int32_t i, int32_t k) const { return comb[i * hc_mult + k]; }
  std::span<const float> pre_span() const { return {pre.data(), static_cast<size_t>(hc_mult)}; }
};

// The incoming pre-mix of layer 0: one-hot on stream 0 (model.md §3). Size hc_mult.
MhcMix InitialPreMix(int32_t hc_mult);

// MIX(X, fn, base, scale) of model.md §4.2 for one token: x = the token's streams
// [hc_mult·hidden_size] (bf16 values). ρ = rsqrt(ExactMeanSquare(x) + norm_eps); m[r] =
// ExactDot(fn[r], x)·ρ; pre/post by sigmoid; C by row softmax and Sinkhorn (SinkhornNormalize).
MhcMix ComputeMix(std::span<const float> x, const MhcWeights& weights, const MhcDims& dims);

// ComputeMix for each of `rows` tokens: streams [rows, hc_mult·hidden_size] → mixes [rows]. The
// rows × mix_rows dot products are spread over ctx.pool; every value is computed as ComputeMix
// does, so any thread count gives the same bits.
void ComputeMixRows(std::span<const float> streams, int64_t rows, const MhcWeights& weights,
                    const MhcDims& dims, std::span<MhcMix> mixes, ExecContext& ctx);

// Steps 7–9 of model.md §4.2 on c [n, n] (row-major, the affine logits on input): row softmax
// (exp of c − row max, seq-sum denominator) + eps, column normalise, then iters − 1 rounds of row
// then column normalisation, each dividing by (seq sum + eps). iters >= 1.
void SinkhornNormalize(std::span<float> c, int32_t n, int32_t iters, float eps);

// fp32(Σ_d fn[d]·x[d]) with the products and the sum exact and one rounding: the value of
// ExactDot (model.md §4.2 step 3) over fn given as fp32 little-endian bytes at any address
// (fn.size() == 4·x.size()), through the vector tiers of ExactDotUnalignedSimd.
float MixDot(std::span<const std::byte> fn, std::span<const float> x);

// HcPre of each of `rows` tokens with its own weights pre [rows, hc_mult] (the incoming pi or an
// MhcMix's pre): x [rows, hc_mult·dim] → out [rows, dim].
void HcPreRows(std::span<const float> x, std::span<const float> pre, int64_t rows,
               std::span<float> out);

// hc_pre (model.md §4.3): out[d] = bf16(((pi[0]·x[0][d] + pi[1]·x[1][d]) + ...) ) — fp32
// products summed sequentially in stream order, one bf16 rounding. x [pi.size(), out.size()].
void HcPre(std::span<const float> x, std::span<const float> pi, std::span<float> out);

// hc_post (model.md §4.3): out[k][d] = bf16(fp32(post[k]·y[d]) + mix_k[d]) with
// mix_k[d] = ((C[0][k]·r[0][d] + C[1][k]·r[1][d]) + ...) summed in fp32 over the first index.
// y: sublayer output [hidden]; r: the streams that entered the sublayer [hc_mult, hidden];
// out [hc_mult, hidden] may alias r.
void HcPost(std::span<const float> y, std::span<const float> r, const MhcMix& mix,
            std::span<float> out);

}  // namespace dsv41

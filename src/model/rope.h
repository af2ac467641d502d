#pragma once

// Rotary position embedding (model.md §6): the two frequency tables (`main`: plain theta;
// `compress`: theta with YaRN, no mscale) and the interleaved rotation of a vector's trailing
// `rope_dim` dims, with its inverse. Everything is evaluated in the fp32 operation order the spec
// gives (§6.2, §12.8 items 4–5), because the last bit of the table moves the fixtures' logits.

#include <cstdint>
#include <span>
#include <vector>

#include "config/config.h"
#include "config/layer_plan.h"

namespace dsv41 {

// The inverse frequencies inv_freq[i], i < rope_dim / 2, of model.md §6.2:
//   e[i] = fp32(2i) / fp32(rope_dim); inv_base[i] = fp32(1 / CrPow(fp32(theta), e[i]));
// and, when yarn.original_max_position_embeddings > 0 (the `compress` table), the YaRN blend
//   inv_freq[i] = fp32(fp32(inv_base/factor) · fp32(1 − keep)) + fp32(inv_base · keep)
// with keep = fp32(1 − ramp[i]) and the ramp between the double-precision correction dims `low`
// and `high` (YarnRampBounds). rope_dim must be even and > 0 (checked).
std::vector<float> RopeInvFreq(int32_t rope_dim, double theta, const YarnConfig& yarn);

// YaRN's ramp bounds (model.md §6.2), computed in double: low = max(floor(corr(beta_fast)), 0),
// high = min(ceil(corr(beta_slow)), rope_dim − 1), corr(n) = d·ln(orig / (n·2π)) / (2·ln theta).
struct YarnRampBounds {
  double low = 0;
  double high = 0;
};
YarnRampBounds ComputeYarnRampBounds(int32_t rope_dim, double theta, const YarnConfig& yarn);

// One RoPE table and the rotations that use it. Immutable after construction; thread-safe.
class Rope {
 public:
  Rope(int32_t rope_dim, double theta, const YarnConfig& yarn);

  // The layer plan's table of `config`: kMain = rope_theta without YaRN; kCompress =
  // compress_rope_theta with config.compress_yarn.
  static Rope ForTable(const ModelConfig& config, RopeTable table);

  int32_t rope_dim() const { return rope_dim_; }
  std::span<const float> inv_freq() const { return inv_freq_; }

  // cos / sin of the angles of position `pos`: angle[i] = fp32(fp32(pos) · inv_freq[i]), then the
  // correctly rounded CrCos / CrSin of that fp32 angle (§6.2 "Angle precision").
  // cos_out.size() == sin_out.size() == rope_dim / 2.
  void Angles(int32_t pos, std::span<float> cos_out, std::span<float> sin_out) const;

  // Rotates the trailing rope_dim dims of `v` (v.size() >= rope_dim) as adjacent pairs by the
  // angles of Angles (§6.1): a' = bf16(fp32(a·cos) − fp32(b·sin)), b' = bf16(fp32(a·sin) +
  // fp32(b·cos)). `inverse` negates sin (undoes the rotation of the attention output, §7.7). The
  // leading dims are untouched (callers give bf16 values; the rotated dims come out bf16). One row
  // of RopeRotateRowsSimd (kernels/rope.h), which rotates many rows and heads at once.
  static void RotateWith(std::span<float> v, std::span<const float> cos, std::span<const float> sin,
                         bool inverse);

  // Angles(pos) then RotateWith for one vector.
  void Rotate(std::span<float> v, int32_t pos, bool inverse) const;

 private:
  int32_t rope_dim_;
  std::vector<float> inv_freq_;
};

}  // namespace dsv41

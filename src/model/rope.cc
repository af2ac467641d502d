#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "base/check.h"
#include "kernels/rope.h"
#include "numerics/arith.h"

namespace dsv41 {

YarnRampBounds ComputeYarnRampBounds(int32_t rope_dim, double theta, const YarnConfig& yarn) {
  const double dim = rope_dim;
  const double orig = static_cast<double>(yarn.original_max_position_embeddings);
  // model.md §6.2 corr(n), evaluated left to right in double as the reference's Python does.
  // std::log is allowed here: the bounds are integers derived in double, not fp32 model values.
  auto corr = [&](double num_rotations) {
    return dim * std::log(orig / (num_rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  YarnRampBounds bounds;
  bounds.low = std::max(std::floor(corr(yarn.beta_fast)), 0.0);
  bounds.high = std::min(std::ceil(corr(yarn.beta_slow)), dim - 1);
  return bounds;
}

std::vector<float> RopeInvFreq(int32_t rope_dim, double theta, const YarnConfig& yarn) {
  DSV41_CHECK(rope_dim > 0 && rope_dim % 2 == 0, "rope_dim %d", rope_dim);
  const int32_t half = rope_dim / 2;
  const float theta_f = static_cast<float>(theta);
  const float dim_f = static_cast<float>(rope_dim);
  std::vector<float> inv_freq(half);
  for (int32_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / dim_f;
    inv_freq[i] = 1.0f / CrPow(theta_f, static_cast<double>(e));
  }
  if (yarn.original_max_position_embeddings <= 0) return inv_freq;

  const YarnRampBounds bounds = ComputeYarnRampBounds(rope_dim, theta, yarn);
  // The reference adds 0.001 to `high` when the bounds coincide; max(high − low, 0.001) is the
  // same denominator for integer bounds.
  const float span = static_cast<float>(std::max(bounds.high - bounds.low, 0.001));
  const float low_f = static_cast<float>(bounds.low);
  const float factor_f = static_cast<float>(yarn.factor);
  for (int32_t i = 0; i < half; ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;
    const float base = inv_freq[i];
    const float scaled = (base / factor_f) * (1.0f - keep);
    const float kept = base * keep;
    inv_freq[i] = scaled + kept;
  }
  return inv_freq;
}

Rope::Rope(int32_t rope_dim, double theta, const YarnConfig& yarn)
    : rope_dim_(rope_dim), inv_freq_(RopeInvFreq(rope_dim, theta, yarn)) {}

Rope Rope::ForTable(const ModelConfig& config, RopeTable table) {
  if (table == RopeTable::kCompress) {
    return Rope(config.qk_rope_head_dim, config.compress_rope_theta, config.compress_yarn);
  }
  return Rope(config.qk_rope_head_dim, config.rope_theta, YarnConfig{});
}

void Rope::Angles(int32_t pos, std::span<float> cos_out, std::span<float> sin_out) const {
  const size_t half = inv_freq_.size();
  DSV41_CHECK(cos_out.size() == half && sin_out.size() == half, "angles of %zu pairs", half);
  const float pos_f = static_cast<float>(pos);
  for (size_t i = 0; i < half; ++i) {
    const float angle = pos_f * inv_freq_[i];
    cos_out[i] = CrCos(angle);
    sin_out[i] = CrSin(angle);
  }
}

void Rope::RotateWith(std::span<float> v, std::span<const float> cos, std::span<const float> sin,
                      bool inverse) {
  DSV41_CHECK(sin.size() == cos.size() && v.size() >= 2 * cos.size(),
              "rotate %zu dims by %zu pairs", v.size(), cos.size());
  RopeRotateRowsSimd(v, 1, 1, cos, sin, inverse);
}

void Rope::Rotate(std::span<float> v, int32_t pos, bool inverse) const {
  const size_t half = inv_freq_.size();
  std::vector<float> cos(half);
  std::vector<float> sin(half);
  Angles(pos, cos, sin);
  RotateWith(v, cos, sin, inverse);
}

}  // namespace dsv41

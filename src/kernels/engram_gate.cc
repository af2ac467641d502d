// Engram gate pieces: scalar references and their Highway twins (engram_gate.h).
#ifndef DSV41_KERNELS_ENGRAM_GATE_CC_ONCE
#define DSV41_KERNELS_ENGRAM_GATE_CC_ONCE

#include "kernels/engram_gate.h"

#include "base/check.h"
#include "kernels/exact_sum.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

#endif  // DSV41_KERNELS_ENGRAM_GATE_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/engram_gate.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

void Terms(const float* h, const float* w, const float* k, size_t n, float* out) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  size_t d = 0;
  for (; d + lanes <= n; d += lanes) {
    const VF hw = hn::Mul(hn::LoadU(df, h + d), hn::LoadU(df, w + d));
    hn::StoreU(hn::Mul(hw, hn::LoadU(df, k + d)), df, out + d);
  }
  for (; d < n; ++d) out[d] = h[d] * w[d] * k[d];
}

void AddGated(float* h, float g, const float* v, size_t n) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const size_t lanes = hn::Lanes(df);
  const VF gv = hn::Set(df, g);
  const auto high = hn::Set(du, 0xFFFF0000u);
  size_t d = 0;
  for (; d + lanes <= n; d += lanes) {
    const VF sum = hn::Add(hn::LoadU(df, h + d), hn::Mul(gv, hn::LoadU(df, v + d)));
    // Bf16Round: to nearest even, a NaN quieted and truncated.
    const auto bits = hn::BitCast(du, sum);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    const auto rounded = hn::And(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)), high);
    const auto nan = hn::Or(hn::And(bits, high), hn::Set(du, 0x00400000u));
    hn::StoreU(hn::BitCast(df, hn::IfThenElse(hn::RebindMask(du, hn::Ne(sum, sum)), nan, rounded)),
               df, h + d);
  }
  for (; d < n; ++d) h[d] = Bf16Round(h[d] + g * v[d]);
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(Terms);
HWY_EXPORT(AddGated);

float EngramGateDotRef(std::span<const float> h, std::span<const float> w,
                       std::span<const float> k) {
  DSV41_CHECK(w.size() == h.size() && k.size() == h.size(), "gate dot of %zu, %zu, %zu", h.size(),
              w.size(), k.size());
  ExactAccumulator sum;
  for (size_t d = 0; d < h.size(); ++d) sum.Add(h[d] * w[d] * k[d]);
  return sum.Round();
}

float EngramGateDotSimd(std::span<const float> h, std::span<const float> w,
                        std::span<const float> k, std::span<float> scratch) {
  DSV41_CHECK(w.size() == h.size() && k.size() == h.size() && scratch.size() >= h.size(),
              "gate dot of %zu, %zu, %zu with %zu scratch", h.size(), w.size(), k.size(),
              scratch.size());
  HWY_DYNAMIC_DISPATCH(Terms)(h.data(), w.data(), k.data(), h.size(), scratch.data());
  return ExactSumSimd(scratch.first(h.size()));
}

void AddGatedRef(std::span<float> h, float g, std::span<const float> v) {
  DSV41_CHECK(v.size() == h.size(), "gated add of %zu into %zu", v.size(), h.size());
  for (size_t d = 0; d < h.size(); ++d) h[d] = Bf16Round(h[d] + g * v[d]);
}

void AddGatedSimd(std::span<float> h, float g, std::span<const float> v) {
  DSV41_CHECK(v.size() == h.size(), "gated add of %zu into %zu", v.size(), h.size());
  HWY_DYNAMIC_DISPATCH(AddGated)(h.data(), g, v.data(), h.size());
}

}  // namespace dsv41
#endif  // HWY_ONCE

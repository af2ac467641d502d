// Activations: scalar references and their Highway twins (activation.h).
#ifndef DSV41_KERNELS_ACTIVATION_CC_ONCE
#define DSV41_KERNELS_ACTIVATION_CC_ONCE

#include "kernels/activation.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "base/check.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

#endif  // DSV41_KERNELS_ACTIVATION_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/activation.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h, per target (its include guard toggles like the rest of Highway's -inl files).
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DD = hn::ScalableTag<double>;
using DF = hn::Rebind<float, DD>;  // as many floats as a double vector has lanes
using VF = hn::Vec<DF>;

// CrExp of a vector: the double exp of Highway (within 1 ulp of e^x, as glibc's within 1 ulp)
// rounded to fp32 where r·(1 ± 2^-50) round alike — then so does glibc's double, which CrExp
// rounds; other lanes (and inputs outside the vector exp's range) through CrExp.
HWY_INLINE VF ExpVector(VF x) {
  const DD dd;
  const DF df;
  const auto xd = hn::PromoteTo(dd, x);
  const auto r = hn::Exp(dd, xd);
  const auto lo = hn::DemoteTo(df, hn::Mul(r, hn::Set(dd, 1.0 - 0x1p-50)));
  const auto hi = hn::DemoteTo(df, hn::Mul(r, hn::Set(dd, 1.0 + 0x1p-50)));
  const auto in_range = hn::And(hn::Ge(x, hn::Set(df, -103.0f)), hn::Le(x, hn::Set(df, 88.0f)));
  const auto same = hn::Eq(hn::BitCast(hn::RebindToUnsigned<DF>(), lo),
                           hn::BitCast(hn::RebindToUnsigned<DF>(), hi));
  VF out = hn::DemoteTo(df, r);
  if (HWY_UNLIKELY(!hn::AllTrue(df, hn::And(in_range, hn::RebindMask(df, same))))) {
    HWY_ALIGN float xs[hn::MaxLanes(DF())];
    HWY_ALIGN float os[hn::MaxLanes(DF())];
    hn::Store(x, df, xs);
    hn::Store(out, df, os);
    HWY_ALIGN float los[hn::MaxLanes(DF())];
    HWY_ALIGN float his[hn::MaxLanes(DF())];
    hn::Store(lo, df, los);
    hn::Store(hi, df, his);
    for (size_t l = 0; l < hn::Lanes(df); ++l) {
      const bool decided = xs[l] >= -103.0f && xs[l] <= 88.0f &&
                           std::bit_cast<uint32_t>(los[l]) == std::bit_cast<uint32_t>(his[l]);
      if (!decided) os[l] = CrExp(xs[l]);
    }
    out = hn::Load(df, os);
  }
  return out;
}

void ExpRows(const float* x, float* out, size_t n) {
  const DF df;
  const size_t nf = hn::Lanes(df);
  size_t i = 0;
  for (; i + nf <= n; i += nf) hn::StoreU(ExpVector(hn::LoadU(df, x + i)), df, out + i);
  for (; i < n; ++i) out[i] = CrExp(x[i]);
}

// bf16 rounding of fp32 lanes as Bf16Round: to nearest even, a NaN quieted and truncated.
HWY_INLINE VF Bf16RoundVector(VF v) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, v);
  const auto high = hn::Set(du, 0xFFFF0000u);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::And(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)), high);
  const auto quiet_nan = hn::Or(hn::And(bits, high), hn::Set(du, 0x00400000u));
  return hn::BitCast(df, hn::IfThenElse(hn::RebindMask(du, hn::Ne(v, v)), quiet_nan, rounded));
}

void SwigluRows(float* g, const float* u, int64_t rows, int64_t n, const float* weights,
                float limit) {
  const DF df;
  const int64_t nf = static_cast<int64_t>(hn::Lanes(df));
  const VF one = hn::Set(df, 1.0f);
  const VF lim = hn::Set(df, limit);
  for (int64_t r = 0; r < rows; ++r) {
    const float weight = weights == nullptr ? 1.0f : weights[r];
    const VF w = hn::Set(df, weight);
    float* gr = g + r * n;
    const float* ur = u + r * n;
    int64_t j = 0;
    for (; j + nf <= n; j += nf) {
      VF gv = Bf16RoundVector(hn::LoadU(df, gr + j));
      VF uv = Bf16RoundVector(hn::LoadU(df, ur + j));
      if (limit > 0.0f) {
        uv = hn::Min(hn::Max(uv, hn::Neg(lim)), lim);
        gv = hn::Min(gv, lim);
      }
      const VF e = ExpVector(hn::Neg(gv));
      const VF silu = hn::Div(gv, hn::Add(one, e));
      hn::StoreU(Bf16RoundVector(hn::Mul(w, hn::Mul(silu, uv))), df, gr + j);
    }
    for (; j < n; ++j) {
      gr[j] = Bf16Round(SwigluActivation(Bf16Round(gr[j]), Bf16Round(ur[j]), limit, weight));
    }
  }
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(ExpRows);
HWY_EXPORT(SwigluRows);

void CrExpSimd(std::span<const float> x, std::span<float> out) {
  DSV41_CHECK(x.size() == out.size(), "CrExp of %zu values into %zu", x.size(), out.size());
  HWY_DYNAMIC_DISPATCH(ExpRows)(x.data(), out.data(), x.size());
}

void CrExpRef(std::span<const float> x, std::span<float> out) {
  DSV41_CHECK(x.size() == out.size(), "CrExp of %zu values into %zu", x.size(), out.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = CrExp(x[i]);
}

float SwigluActivation(float g, float u, float limit, float weight) {
  if (limit > 0.0f) {
    u = std::min(std::max(u, -limit), limit);
    g = std::min(g, limit);
  }
  const float a = Silu(g) * u;
  return weight * a;
}

namespace {
void CheckSwiglu(std::span<float> g, std::span<const float> u, int64_t rows, int64_t n,
                 std::span<const float> weights) {
  DSV41_CHECK(rows >= 0 && n >= 0 && g.size() == static_cast<size_t>(rows * n) &&
                  u.size() == g.size() &&
                  (weights.empty() || weights.size() == static_cast<size_t>(rows)),
              "SwiGLU: %lld rows of %lld, g %zu, u %zu, %zu weights", static_cast<long long>(rows),
              static_cast<long long>(n), g.size(), u.size(), weights.size());
}
}  // namespace

void SwigluRowsSimd(std::span<float> g, std::span<const float> u, int64_t rows, int64_t n,
                    std::span<const float> weights, float limit) {
  CheckSwiglu(g, u, rows, n, weights);
  HWY_DYNAMIC_DISPATCH(SwigluRows)
  (g.data(), u.data(), rows, n, weights.empty() ? nullptr : weights.data(), limit);
}

void SwigluRowsRef(std::span<float> g, std::span<const float> u, int64_t rows, int64_t n,
                   std::span<const float> weights, float limit) {
  CheckSwiglu(g, u, rows, n, weights);
  for (int64_t r = 0; r < rows; ++r) {
    const float weight = weights.empty() ? 1.0f : weights[r];
    for (int64_t j = 0; j < n; ++j) {
      const size_t i = static_cast<size_t>(r * n + j);
      g[i] = Bf16Round(SwigluActivation(Bf16Round(g[i]), Bf16Round(u[i]), limit, weight));
    }
  }
}

}  // namespace dsv41
#endif  // HWY_ONCE

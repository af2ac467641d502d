// Per-target vector helpers shared by the kernels (include after hwy/highway.h, inside the
// foreach_target part of a kernel .cc): the bf16 rounding of codecs.h and CrExp of arith.h on
// vectors, with the scalar functions' bits.

// Highway's per-target include guard: toggles with HWY_TARGET_TOGGLE, once per target.
#if defined(DSV41_KERNELS_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef DSV41_KERNELS_SIMD_INL_H_
#undef DSV41_KERNELS_SIMD_INL_H_
#else
#define DSV41_KERNELS_SIMD_INL_H_
#endif

#include <bit>
#include <cstdint>

#include "hwy/highway.h"
#include "numerics/arith.h"
// After highway.h, per target (its include guard toggles like this file's).
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Bf16Round of every fp32 lane: to nearest even, a NaN quieted and truncated.
template <class DF>
HWY_INLINE hn::Vec<DF> Bf16RoundLanes(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, v);
  const auto high = hn::Set(du, 0xFFFF0000u);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::And(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)), high);
  const auto quiet_nan = hn::Or(hn::And(bits, high), hn::Set(du, 0x00400000u));
  return hn::BitCast(df, hn::IfThenElse(hn::RebindMask(du, hn::Ne(v, v)), quiet_nan, rounded));
}

// The float vectors CrExpLanes works on: as many lanes as a double vector.
using ExpDD = hn::ScalableTag<double>;
using ExpDF = hn::Rebind<float, ExpDD>;

// CrExp of every lane: the double exp of Highway (within 1 ulp of e^x, as glibc's within 1 ulp)
// rounded to fp32 where r·(1 ± 2^-50) round alike — then so does glibc's double, which CrExp
// rounds; other lanes (and inputs outside the vector exp's range) through CrExp itself.
HWY_INLINE hn::Vec<ExpDF> CrExpLanes(hn::Vec<ExpDF> x) {
  const ExpDD dd;
  const ExpDF df;
  const auto xd = hn::PromoteTo(dd, x);
  const auto r = hn::Exp(dd, xd);
  const auto lo = hn::DemoteTo(df, hn::Mul(r, hn::Set(dd, 1.0 - 0x1p-50)));
  const auto hi = hn::DemoteTo(df, hn::Mul(r, hn::Set(dd, 1.0 + 0x1p-50)));
  const auto in_range = hn::And(hn::Ge(x, hn::Set(df, -103.0f)), hn::Le(x, hn::Set(df, 88.0f)));
  const auto same = hn::Eq(hn::BitCast(hn::RebindToUnsigned<ExpDF>(), lo),
                           hn::BitCast(hn::RebindToUnsigned<ExpDF>(), hi));
  auto out = hn::DemoteTo(df, r);
  if (HWY_UNLIKELY(!hn::AllTrue(df, hn::And(in_range, hn::RebindMask(df, same))))) {
    HWY_ALIGN float xs[hn::MaxLanes(ExpDF())];
    HWY_ALIGN float os[hn::MaxLanes(ExpDF())];
    HWY_ALIGN float los[hn::MaxLanes(ExpDF())];
    HWY_ALIGN float his[hn::MaxLanes(ExpDF())];
    hn::Store(x, df, xs);
    hn::Store(out, df, os);
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

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // DSV41_KERNELS_SIMD_INL_H_ toggle

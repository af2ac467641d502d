// RMSNorm: the scalar reference and its Highway twin (rmsnorm.h).
#ifndef DSV41_KERNELS_RMSNORM_CC_ONCE
#define DSV41_KERNELS_RMSNORM_CC_ONCE

#include "kernels/rmsnorm.h"

#include <cstring>

#include "base/check.h"
#include "kernels/exact_sum.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41::rmsnorm_internal {
inline void CheckShapes(std::span<const float> x, int64_t rows, std::span<const std::byte> weight,
                        std::span<float> y) {
  const size_t n = weight.size() / 2;
  DSV41_CHECK(
      n >= 1 && rows >= 0 && x.size() == static_cast<size_t>(rows) * n && y.size() == x.size(),
      "RmsNorm: %lld rows of %zu, x %zu, y %zu", static_cast<long long>(rows), n, x.size(),
      y.size());
}
}  // namespace dsv41::rmsnorm_internal

#endif  // DSV41_KERNELS_RMSNORM_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rmsnorm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// y = bf16(w · (x · r)) over n values; w: n bf16 values at 2-byte aligned `w16`.
void ScaleRow(const float* x, const uint16_t* w16, float r, size_t n, float* y) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> d16;
  const size_t nf = hn::Lanes(df);
  const VF rv = hn::Set(df, r);
  const auto high = hn::Set(du, 0xFFFF0000u);
  size_t d = 0;
  for (; d + nf <= n; d += nf) {
    const VF w = hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, w16 + d))));
    const VF v = hn::Mul(w, hn::Mul(hn::LoadU(df, x + d), rv));
    // Bf16Round: to nearest even; a NaN quieted and truncated.
    const auto bits = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    const auto rounded = hn::And(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)), high);
    const auto nan = hn::Or(hn::And(bits, high), hn::Set(du, 0x00400000u));
    hn::StoreU(hn::BitCast(df, hn::IfThenElse(hn::RebindMask(du, hn::Ne(v, v)), nan, rounded)), df,
               y + d);
  }
  for (; d < n; ++d) y[d] = Bf16Round(F32FromBf16(w16[d]) * (x[d] * r));
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(ScaleRow);

void RmsNormRowsRef(std::span<const float> x, int64_t rows, std::span<const std::byte> weight,
                    float eps, std::span<float> y) {
  rmsnorm_internal::CheckShapes(x, rows, weight, y);
  const size_t n = weight.size() / 2;
  for (int64_t row = 0; row < rows; ++row) {
    const std::span<const float> xr = x.subspan(row * n, n);
    const float r = CrRsqrt(ExactMeanSquare(xr) + eps);
    for (size_t d = 0; d < n; ++d) {
      uint16_t w_bits;
      std::memcpy(&w_bits, weight.data() + 2 * d, sizeof(w_bits));
      const float scaled = xr[d] * r;  // model.md §5: x·r first, then the weight
      y[row * n + d] = Bf16Round(F32FromBf16(w_bits) * scaled);
    }
  }
}

void RmsNormRowsSimd(std::span<const float> x, int64_t rows, std::span<const std::byte> weight,
                     float eps, std::span<float> y) {
  rmsnorm_internal::CheckShapes(x, rows, weight, y);
  if (reinterpret_cast<uintptr_t>(weight.data()) % alignof(uint16_t) != 0) {
    RmsNormRowsRef(x, rows, weight, eps, y);  // a misaligned mapping: the scalar loads
    return;
  }
  const size_t n = weight.size() / 2;
  const auto* w16 = reinterpret_cast<const uint16_t*>(weight.data());
  for (int64_t row = 0; row < rows; ++row) {
    const std::span<const float> xr = x.subspan(row * n, n);
    const float r = CrRsqrt(ExactMeanSquareSimd(xr) + eps);
    HWY_DYNAMIC_DISPATCH(ScaleRow)(xr.data(), w16, r, n, y.data() + row * n);
  }
}

}  // namespace dsv41
#endif  // HWY_ONCE

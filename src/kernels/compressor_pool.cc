// Compressor pooling: the scalar reference and its Highway twin (compressor_pool.h).
#ifndef DSV41_KERNELS_COMPRESSOR_POOL_CC_ONCE
#define DSV41_KERNELS_COMPRESSOR_POOL_CC_ONCE

#include "kernels/compressor_pool.h"

#include <algorithm>
#include <vector>

#include "base/check.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41::compressor_pool_internal {
inline void CheckShapes(std::span<const float* const> values, std::span<const float* const> gates) {
  DSV41_CHECK(!values.empty() && gates.size() == values.size(), "pool of %zu values, %zu gates",
              values.size(), gates.size());
}

// One channel, as compressor_pool.h writes it; e and terms hold r floats.
inline float PoolChannel(std::span<const float* const> values, std::span<const float* const> gates,
                         size_t c, std::span<float> e, std::span<float> terms) {
  const size_t r = values.size();
  float mx = gates[0][c];
  for (size_t m = 1; m < r; ++m) mx = std::max(mx, gates[m][c]);
  for (size_t m = 0; m < r; ++m) e[m] = CrExp(gates[m][c] - mx);
  const float den = SeqSum(e);
  for (size_t m = 0; m < r; ++m) terms[m] = (e[m] / den) * values[m][c];
  return Bf16Round(SeqSum(terms));
}
}  // namespace dsv41::compressor_pool_internal

#endif  // DSV41_KERNELS_COMPRESSOR_POOL_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/compressor_pool.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Channels in vectors of ExpDF lanes, each lane keeping the reference's member order; the
// exponentials of a block wait in scratch[m · dim + c] for the denominator. The last partial
// block goes through the scalar channel (its e and terms in scratch[0 .. 2r)).
void CompressorPoolChannels(const float* const* values, const float* const* gates, size_t r,
                            size_t dim, float* out, float* scratch) {
  const ExpDF df;
  const size_t nf = hn::Lanes(df);
  size_t c = 0;
  for (; c + nf <= dim; c += nf) {
    auto mx = hn::LoadU(df, gates[0] + c);
    for (size_t m = 1; m < r; ++m) {
      const auto g = hn::LoadU(df, gates[m] + c);
      mx = hn::IfThenElse(hn::Lt(mx, g), g, mx);  // std::max(mx, g)
    }
    auto den = hn::Zero(df);
    for (size_t m = 0; m < r; ++m) {
      const auto e = CrExpLanes(hn::Sub(hn::LoadU(df, gates[m] + c), mx));
      hn::StoreU(e, df, scratch + m * dim + c);
      den = m == 0 ? e : hn::Add(den, e);
    }
    auto sum = hn::Zero(df);
    for (size_t m = 0; m < r; ++m) {
      const auto w = hn::Div(hn::LoadU(df, scratch + m * dim + c), den);
      const auto term = hn::Mul(w, hn::LoadU(df, values[m] + c));
      sum = m == 0 ? term : hn::Add(sum, term);
    }
    hn::StoreU(Bf16RoundLanes(df, sum), df, out + c);
  }
  if (c < dim) {
    const std::span<const float* const> v(values, r);
    const std::span<const float* const> g(gates, r);
    const std::span<float> e(scratch, r);
    const std::span<float> terms(scratch + r, r);
    for (; c < dim; ++c) out[c] = compressor_pool_internal::PoolChannel(v, g, c, e, terms);
  }
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(CompressorPoolChannels);

void CompressorPoolRef(std::span<const float* const> values, std::span<const float* const> gates,
                       std::span<float> out) {
  compressor_pool_internal::CheckShapes(values, gates);
  std::vector<float> e(values.size());
  std::vector<float> terms(values.size());
  for (size_t c = 0; c < out.size(); ++c) {
    out[c] = compressor_pool_internal::PoolChannel(values, gates, c, e, terms);
  }
}

void CompressorPoolSimd(std::span<const float* const> values, std::span<const float* const> gates,
                        std::span<float> out, std::span<float> scratch) {
  compressor_pool_internal::CheckShapes(values, gates);
  DSV41_CHECK(scratch.size() >= values.size() * std::max<size_t>(out.size(), 2),
              "pool of %zu x %zu: scratch %zu", values.size(), out.size(), scratch.size());
  if (out.empty()) return;
  HWY_DYNAMIC_DISPATCH(CompressorPoolChannels)
  (values.data(), gates.data(), values.size(), out.size(), out.data(), scratch.data());
}

}  // namespace dsv41
#endif  // HWY_ONCE

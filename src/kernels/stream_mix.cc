// Stream combinations: scalar references and their Highway twins (stream_mix.h).
#ifndef DSV41_KERNELS_STREAM_MIX_CC_ONCE
#define DSV41_KERNELS_STREAM_MIX_CC_ONCE

#include "kernels/stream_mix.h"

#include <array>

#include "base/check.h"
#include "numerics/codecs.h"

namespace dsv41::stream_mix_internal {
inline constexpr size_t kMaxStreams = 8;
inline size_t CheckPre(std::span<const float> x, std::span<const float> pi, std::span<float> out) {
  const size_t hc = pi.size();
  DSV41_CHECK(hc >= 1 && hc <= kMaxStreams && x.size() == hc * out.size(),
              "HcPre: %zu values for %zu streams of %zu", x.size(), hc, out.size());
  return hc;
}
inline size_t CheckPost(std::span<const float> y, std::span<const float> r,
                        std::span<const float> comb, std::span<const float> post,
                        std::span<float> out) {
  const size_t hc = post.size();
  DSV41_CHECK(hc >= 1 && hc <= kMaxStreams && comb.size() == hc * hc && r.size() == hc * y.size() &&
                  out.size() == r.size(),
              "HcPost: %zu stream values, %zu outputs for %zu streams of %zu", r.size(), out.size(),
              hc, y.size());
  return hc;
}
}  // namespace dsv41::stream_mix_internal

#endif  // DSV41_KERNELS_STREAM_MIX_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/stream_mix.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Bf16Round of every lane: to nearest even, a NaN quieted and truncated.
HWY_INLINE VF Bf16RoundVector(VF v) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const auto bits = hn::BitCast(du, v);
  const auto high = hn::Set(du, 0xFFFF0000u);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::And(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)), high);
  const auto nan = hn::Or(hn::And(bits, high), hn::Set(du, 0x00400000u));
  return hn::BitCast(df, hn::IfThenElse(hn::RebindMask(du, hn::Ne(v, v)), nan, rounded));
}

void Pre(const float* x, const float* pi, size_t hc, size_t dim, float* out) {
  const DF df;
  const size_t n = hn::Lanes(df);
  size_t d = 0;
  for (; d + n <= dim; d += n) {
    VF sum = hn::Mul(hn::Set(df, pi[0]), hn::LoadU(df, x + d));
    for (size_t k = 1; k < hc; ++k) {
      sum = hn::Add(sum, hn::Mul(hn::Set(df, pi[k]), hn::LoadU(df, x + k * dim + d)));
    }
    hn::StoreU(Bf16RoundVector(sum), df, out + d);
  }
  for (; d < dim; ++d) {
    float sum = pi[0] * x[d];
    for (size_t k = 1; k < hc; ++k) sum = sum + pi[k] * x[k * dim + d];
    out[d] = Bf16Round(sum);
  }
}

void Post(const float* y, const float* r, const float* comb, const float* post, size_t hc,
          size_t dim, float* out) {
  const DF df;
  const size_t n = hn::Lanes(df);
  size_t d = 0;
  for (; d + n <= dim; d += n) {
    VF column[stream_mix_internal::kMaxStreams];
    for (size_t i = 0; i < hc; ++i) column[i] = hn::LoadU(df, r + i * dim + d);  // out may alias
    const VF yd = hn::LoadU(df, y + d);
    for (size_t k = 0; k < hc; ++k) {
      VF mix = hn::Mul(hn::Set(df, comb[k]), column[0]);
      for (size_t i = 1; i < hc; ++i)
        mix = hn::Add(mix, hn::Mul(hn::Set(df, comb[i * hc + k]), column[i]));
      hn::StoreU(Bf16RoundVector(hn::Add(hn::Mul(hn::Set(df, post[k]), yd), mix)), df,
                 out + k * dim + d);
    }
  }
  for (; d < dim; ++d) {
    float column[stream_mix_internal::kMaxStreams];
    for (size_t i = 0; i < hc; ++i) column[i] = r[i * dim + d];
    for (size_t k = 0; k < hc; ++k) {
      float mix = comb[k] * column[0];
      for (size_t i = 1; i < hc; ++i) mix = mix + comb[i * hc + k] * column[i];
      out[k * dim + d] = Bf16Round(post[k] * y[d] + mix);
    }
  }
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(Pre);
HWY_EXPORT(Post);

void HcPreRef(std::span<const float> x, std::span<const float> pi, std::span<float> out) {
  const size_t hc = stream_mix_internal::CheckPre(x, pi, out);
  const size_t dim = out.size();
  for (size_t d = 0; d < dim; ++d) {
    float sum = pi[0] * x[d];
    for (size_t k = 1; k < hc; ++k) {
      const float product = pi[k] * x[k * dim + d];
      sum = sum + product;
    }
    out[d] = Bf16Round(sum);
  }
}

void HcPreSimd(std::span<const float> x, std::span<const float> pi, std::span<float> out) {
  const size_t hc = stream_mix_internal::CheckPre(x, pi, out);
  HWY_DYNAMIC_DISPATCH(Pre)(x.data(), pi.data(), hc, out.size(), out.data());
}

void HcPostRef(std::span<const float> y, std::span<const float> r, std::span<const float> comb,
               std::span<const float> post, std::span<float> out) {
  const size_t hc = stream_mix_internal::CheckPost(y, r, comb, post, out);
  const size_t dim = y.size();
  std::array<float, stream_mix_internal::kMaxStreams> column{};
  for (size_t d = 0; d < dim; ++d) {
    for (size_t i = 0; i < hc; ++i) column[i] = r[i * dim + d];  // out may alias r
    for (size_t k = 0; k < hc; ++k) {
      float mix_k = comb[k] * column[0];
      for (size_t i = 1; i < hc; ++i) {
        const float product = comb[i * hc + k] * column[i];
        mix_k = mix_k + product;
      }
      const float scaled = post[k] * y[d];
      out[k * dim + d] = Bf16Round(scaled + mix_k);
    }
  }
}

void HcPostSimd(std::span<const float> y, std::span<const float> r, std::span<const float> comb,
                std::span<const float> post, std::span<float> out) {
  const size_t hc = stream_mix_internal::CheckPost(y, r, comb, post, out);
  HWY_DYNAMIC_DISPATCH(Post)
  (y.data(), r.data(), comb.data(), post.data(), hc, y.size(), out.data());
}

}  // namespace dsv41
#endif  // HWY_ONCE

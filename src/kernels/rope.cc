// RoPE rotation: the scalar reference and its Highway twin (rope.h).
#ifndef DSV41_KERNELS_ROPE_CC_ONCE
#define DSV41_KERNELS_ROPE_CC_ONCE

#include "kernels/rope.h"

#include "base/check.h"
#include "numerics/codecs.h"

namespace dsv41::rope_internal {
struct Shape {
  size_t half = 0;
  size_t head_dim = 0;
};
// The shape of a call; half == 0 for no rows.
inline Shape CheckShape(std::span<float> x, int64_t rows, int64_t heads, std::span<const float> cos,
                        std::span<const float> sin) {
  if (rows == 0) {
    DSV41_CHECK(x.empty() && cos.empty() && sin.empty(), "RoPE of no rows: %zu values", x.size());
    return Shape{};
  }
  DSV41_CHECK(rows >= 1 && heads >= 1 && cos.size() == sin.size() && cos.size() % rows == 0 &&
                  x.size() % (rows * heads) == 0,
              "RoPE: %zu values as %lld rows of %lld heads, %zu angles", x.size(),
              static_cast<long long>(rows), static_cast<long long>(heads), cos.size());
  Shape s{.half = cos.size() / rows, .head_dim = x.size() / (rows * heads)};
  DSV41_CHECK(s.half >= 1 && s.head_dim >= 2 * s.half, "RoPE: %zu pairs in heads of %zu", s.half,
              s.head_dim);
  return s;
}

// One pair, in the order of rope.h (s already negated for the inverse).
inline void RotatePair(float* pair, float c, float s) {
  const float a = pair[0];
  const float b = pair[1];
  const float ac = a * c;
  const float bs = b * s;
  const float as = a * s;
  const float bc = b * c;
  pair[0] = Bf16Round(ac - bs);
  pair[1] = Bf16Round(as + bc);
}
}  // namespace dsv41::rope_internal

#endif  // DSV41_KERNELS_ROPE_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rope.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vectorised along the pairs: LoadInterleaved2 splits a head's tail into its a and b lanes.
void RopeRotateHeads(float* x, int64_t rows, int64_t heads, size_t head_dim, const float* cos,
                     const float* sin, size_t half, bool inverse) {
  const hn::ScalableTag<float> df;
  const size_t nf = hn::Lanes(df);
  for (int64_t t = 0; t < rows; ++t) {
    const float* c_row = cos + t * half;
    const float* s_row = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      float* tail = x + (t * heads + h) * head_dim + (head_dim - 2 * half);
      size_t i = 0;
      for (; i + nf <= half; i += nf) {
        hn::Vec<decltype(df)> a, b;
        hn::LoadInterleaved2(df, tail + 2 * i, a, b);
        const auto c = hn::LoadU(df, c_row + i);
        auto s = hn::LoadU(df, s_row + i);
        if (inverse) s = hn::Neg(s);
        const auto ac = hn::Mul(a, c);
        const auto bs = hn::Mul(b, s);
        const auto as = hn::Mul(a, s);
        const auto bc = hn::Mul(b, c);
        hn::StoreInterleaved2(Bf16RoundLanes(df, hn::Sub(ac, bs)),
                              Bf16RoundLanes(df, hn::Add(as, bc)), df, tail + 2 * i);
      }
      for (; i < half; ++i) {
        rope_internal::RotatePair(tail + 2 * i, c_row[i], inverse ? -s_row[i] : s_row[i]);
      }
    }
  }
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(RopeRotateHeads);

void RopeRotateRowsRef(std::span<float> x, int64_t rows, int64_t heads, std::span<const float> cos,
                       std::span<const float> sin, bool inverse) {
  const rope_internal::Shape s = rope_internal::CheckShape(x, rows, heads, cos, sin);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      float* tail = x.data() + (t * heads + h) * s.head_dim + (s.head_dim - 2 * s.half);
      for (size_t i = 0; i < s.half; ++i) {
        const float c = cos[t * s.half + i];
        const float sn = inverse ? -sin[t * s.half + i] : sin[t * s.half + i];
        rope_internal::RotatePair(tail + 2 * i, c, sn);
      }
    }
  }
}

void RopeRotateRowsSimd(std::span<float> x, int64_t rows, int64_t heads, std::span<const float> cos,
                        std::span<const float> sin, bool inverse) {
  const rope_internal::Shape s = rope_internal::CheckShape(x, rows, heads, cos, sin);
  if (s.half == 0) return;
  HWY_DYNAMIC_DISPATCH(RopeRotateHeads)
  (x.data(), rows, heads, s.head_dim, cos.data(), sin.data(), s.half, inverse);
}

}  // namespace dsv41
#endif  // HWY_ONCE

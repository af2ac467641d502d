// Sinkhorn normalisation: the scalar reference and its Highway twin (sinkhorn.h).
#ifndef DSV41_KERNELS_SINKHORN_CC_ONCE
#define DSV41_KERNELS_SINKHORN_CC_ONCE

#include "kernels/sinkhorn.h"

#include <algorithm>

#include "base/check.h"
#include "numerics/arith.h"

namespace dsv41::sinkhorn_internal {
inline size_t CheckShape(std::span<float> c, int32_t n, int32_t iters) {
  DSV41_CHECK(n >= 1 && n <= kSinkhornMaxN && iters >= 1 && c.size() % (n * n) == 0,
              "Sinkhorn of %zu values as %d x %d matrices, %d iterations", c.size(), n, n, iters);
  return c.size() / (n * n);
}
}  // namespace dsv41::sinkhorn_internal

#endif  // DSV41_KERNELS_SINKHORN_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/sinkhorn.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Divides the n values at m[first + j·step] (j < n), vectors of lanes, by fp32(their sequential
// sum + eps).
HWY_INLINE void SinkhornNormalizeLine(float* m, size_t first, size_t step, size_t n,
                                      hn::Vec<ExpDF> eps) {
  const ExpDF df;
  const size_t nf = hn::Lanes(df);
  auto sum = hn::Load(df, m + first * nf);
  for (size_t j = 1; j < n; ++j) sum = hn::Add(sum, hn::Load(df, m + (first + j * step) * nf));
  const auto denom = hn::Add(sum, eps);
  for (size_t j = 0; j < n; ++j) {
    float* p = m + (first + j * step) * nf;
    hn::Store(hn::Div(hn::Load(df, p), denom), df, p);
  }
}

// Matrices in groups of ExpDF lanes, transposed into m[value · lanes + lane]; a partial group is
// padded with copies of its last matrix (computed, not written back).
void SinkhornMatrices(float* c, size_t count, size_t n, int32_t iters, float eps) {
  const ExpDF df;
  const size_t nf = hn::Lanes(df);
  const size_t nn = n * n;
  HWY_ALIGN float m[kSinkhornMaxN * kSinkhornMaxN * hn::MaxLanes(ExpDF())];
  const auto eps_v = hn::Set(df, eps);
  for (size_t first = 0; first < count; first += nf) {
    const size_t lanes = std::min(nf, count - first);
    for (size_t l = 0; l < nf; ++l) {
      const float* src = c + (first + std::min(l, lanes - 1)) * nn;
      for (size_t v = 0; v < nn; ++v) m[v * nf + l] = src[v];
    }
    for (size_t i = 0; i < n; ++i) {
      float* row = m + i * n * nf;
      auto row_max = hn::Load(df, row);
      for (size_t k = 1; k < n; ++k) {
        const auto x = hn::Load(df, row + k * nf);
        row_max = hn::IfThenElse(hn::Gt(x, row_max), x, row_max);
      }
      auto sum = hn::Zero(df);
      for (size_t k = 0; k < n; ++k) {
        const auto e = CrExpLanes(hn::Sub(hn::Load(df, row + k * nf), row_max));
        hn::Store(e, df, row + k * nf);
        sum = k == 0 ? e : hn::Add(sum, e);
      }
      for (size_t k = 0; k < n; ++k) {
        hn::Store(hn::Add(hn::Div(hn::Load(df, row + k * nf), sum), eps_v), df, row + k * nf);
      }
    }
    for (size_t k = 0; k < n; ++k) SinkhornNormalizeLine(m, k, n, n, eps_v);
    for (int32_t iter = 1; iter < iters; ++iter) {
      for (size_t i = 0; i < n; ++i) SinkhornNormalizeLine(m, i * n, 1, n, eps_v);
      for (size_t k = 0; k < n; ++k) SinkhornNormalizeLine(m, k, n, n, eps_v);
    }
    for (size_t l = 0; l < lanes; ++l) {
      float* dst = c + (first + l) * nn;
      for (size_t v = 0; v < nn; ++v) dst[v] = m[v * nf + l];
    }
  }
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(SinkhornMatrices);

namespace {
// Divides the n values at c[first + j·step] by fp32(their sequential sum + eps).
void NormalizeLine(float* c, int32_t first, int32_t step, int32_t n, float eps) {
  float sum = c[first];
  for (int32_t j = 1; j < n; ++j) sum = sum + c[first + j * step];
  const float denom = sum + eps;
  for (int32_t j = 0; j < n; ++j) c[first + j * step] = c[first + j * step] / denom;
}
}  // namespace

void SinkhornRef(std::span<float> c, int32_t n, int32_t iters, float eps) {
  const size_t count = sinkhorn_internal::CheckShape(c, n, iters);
  for (size_t t = 0; t < count; ++t) {
    float* mat = c.data() + t * n * n;
    for (int32_t i = 0; i < n; ++i) {
      float* row = mat + i * n;
      float row_max = row[0];
      for (int32_t k = 1; k < n; ++k) row_max = row[k] > row_max ? row[k] : row_max;
      for (int32_t k = 0; k < n; ++k) row[k] = CrExp(row[k] - row_max);
      const float sum = SeqSum(std::span<const float>(row, n));
      for (int32_t k = 0; k < n; ++k) row[k] = row[k] / sum + eps;
    }
    for (int32_t k = 0; k < n; ++k) NormalizeLine(mat, k, n, n, eps);  // columns
    for (int32_t iter = 1; iter < iters; ++iter) {
      for (int32_t i = 0; i < n; ++i) NormalizeLine(mat, i * n, 1, n, eps);  // rows
      for (int32_t k = 0; k < n; ++k) NormalizeLine(mat, k, n, n, eps);
    }
  }
}

void SinkhornSimd(std::span<float> c, int32_t n, int32_t iters, float eps) {
  const size_t count = sinkhorn_internal::CheckShape(c, n, iters);
  if (count == 0) return;
  HWY_DYNAMIC_DISPATCH(SinkhornMatrices)(c.data(), count, n, iters, eps);
}

}  // namespace dsv41
#endif  // HWY_ONCE

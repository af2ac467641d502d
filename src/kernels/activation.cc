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
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DD = hn::ScalableTag<double>;
using DF = hn::Rebind<float, DD>;  // as many floats as a double vector has lanes
using VF = hn::Vec<DF>;

void ExpRows(const float* x, float* out, size_t n) {
  const DF df;
  const size_t nf = hn::Lanes(df);
  size_t i = 0;
  for (; i + nf <= n; i += nf) hn::StoreU(CrExpLanes(hn::LoadU(df, x + i)), df, out + i);
  for (; i < n; ++i) out[i] = CrExp(x[i]);
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
      VF gv = Bf16RoundLanes(df, hn::LoadU(df, gr + j));
      VF uv = Bf16RoundLanes(df, hn::LoadU(df, ur + j));
      if (limit > 0.0f) {
        uv = hn::Min(hn::Max(uv, hn::Neg(lim)), lim);
        gv = hn::Min(gv, lim);
      }
      const VF e = CrExpLanes(hn::Neg(gv));
      const VF silu = hn::Div(gv, hn::Add(one, e));
      hn::StoreU(Bf16RoundLanes(df, hn::Mul(w, hn::Mul(silu, uv))), df, gr + j);
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

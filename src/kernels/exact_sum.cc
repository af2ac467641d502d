// SIMD exact sums: double lane accumulators with an error bound; where the bound cannot decide, an
// error-free (TwoSum) accumulation that proves the double sum exact; the scalar twin otherwise
// (exact_sum.h).
#ifndef DSV41_KERNELS_EXACT_SUM_CC_ONCE
#define DSV41_KERNELS_EXACT_SUM_CC_ONCE

#include "kernels/exact_sum.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/check.h"
#include "numerics/arith.h"

namespace dsv41::exact_sum_internal {

// The fp32 rounding of the exact sum E when the double S is within `bound` of E and that decides
// it: both ends of [S − bound, S + bound] (widened by two double ulps of S for their own rounding)
// round to the same non-zero fp32 value. False otherwise (also for non-finite S or bound).
inline bool Decide(double s, double bound, float* out) {
  if (!std::isfinite(s) || !std::isfinite(bound)) return false;
  const double slack = bound + 0x1p-52 * std::fabs(s);
  const float lo = static_cast<float>(s - slack);
  const float hi = static_cast<float>(s + slack);
  if (std::bit_cast<uint32_t>(lo) != std::bit_cast<uint32_t>(hi) || lo == 0.0f) return false;
  *out = lo;
  return true;
}

// The bound on |S − E| for terms added into `lanes` chains of at most `steps` additions each (one
// rounding per addition, each at most 2^-53 of a partial sum bounded by Σ|terms| = t), then the
// lanes summed: k · 2^-53 · t with k = steps + lanes + 2, widened by (1 + k · 2^-52) because the
// computed t may itself fall short of Σ|terms| by that much.
inline double Bound(int64_t steps, int64_t lanes, double t) {
  const double k = static_cast<double>(steps + lanes + 2);
  return k * 0x1p-53 * t * (1.0 + k * 0x1p-52);
}

}  // namespace dsv41::exact_sum_internal

#endif  // DSV41_KERNELS_EXACT_SUM_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/exact_sum.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using exact_sum_internal::Bound;
using exact_sum_internal::Decide;

using DD = hn::ScalableTag<double>;
using VD = hn::Vec<DD>;
using DFH = hn::Rebind<float, DD>;  // as many floats as a double vector has lanes

// The kind of term: a·b, x, or fp32(x·x).
enum class Term { kProduct, kValue, kSquare };

template <Term kTerm>
HWY_INLINE void Accumulate(const float* a, const float* b, VD& s, VD& t) {
  const DD dd;
  const DFH df;
  if constexpr (kTerm == Term::kProduct) {
    const VD va = hn::PromoteTo(dd, hn::LoadU(df, a));
    const VD vb = hn::PromoteTo(dd, hn::LoadU(df, b));
    s = hn::MulAdd(va, vb, s);  // the product is exact: one rounding, in the sum
    t = hn::MulAdd(hn::Abs(va), hn::Abs(vb), t);
  } else if constexpr (kTerm == Term::kValue) {
    const VD va = hn::PromoteTo(dd, hn::LoadU(df, a));
    s = hn::Add(s, va);
    t = hn::Add(t, hn::Abs(va));
  } else {
    const auto x = hn::LoadU(df, a);
    const VD sq = hn::PromoteTo(dd, hn::Mul(x, x));  // fp32(x²), as the scalar twin
    s = hn::Add(s, sq);
    t = hn::Add(t, sq);
  }
}

// Σ terms over n elements in two accumulator pairs of N lanes (b is read for products only);
// returns S and, in *t_out, Σ|terms|; *steps_out: additions per lane at most; *lanes_out: lanes.
template <Term kTerm>
double SumTerms(const float* a, const float* b, size_t n, double* t_out, int64_t* steps_out,
                int64_t* lanes_out) {
  const DD dd;
  const size_t nd = hn::Lanes(dd);
  VD s0 = hn::Zero(dd), s1 = hn::Zero(dd), t0 = hn::Zero(dd), t1 = hn::Zero(dd);
  size_t i = 0;
  for (; i + 2 * nd <= n; i += 2 * nd) {
    Accumulate<kTerm>(a + i, b + i, s0, t0);
    Accumulate<kTerm>(a + i + nd, b + i + nd, s1, t1);
  }
  if (i < n) {  // the tail, zero padded (zero terms change neither sum)
    HWY_ALIGN float ta[2 * hn::MaxLanes(DD())] = {};
    HWY_ALIGN float tb[2 * hn::MaxLanes(DD())] = {};
    std::memcpy(ta, a + i, (n - i) * sizeof(float));
    if (kTerm == Term::kProduct) std::memcpy(tb, b + i, (n - i) * sizeof(float));
    Accumulate<kTerm>(ta, tb, s0, t0);
    Accumulate<kTerm>(ta + nd, tb + nd, s1, t1);
  }
  *t_out = hn::GetLane(hn::SumOfLanes(dd, hn::Add(t0, t1)));
  *steps_out = static_cast<int64_t>((n + 2 * nd - 1) / (2 * nd)) + 1;
  *lanes_out = static_cast<int64_t>(2 * nd);
  return hn::GetLane(hn::SumOfLanes(dd, hn::Add(s0, s1)));
}

// The terms added with Knuth's TwoSum in N lanes, then the lanes in order: returns true and the
// sum in *out when no addition rounded (the double sum is then the exact sum: its fp32 rounding
// is the answer even when it sits on an fp32 midpoint, which the bound of the first tier can never
// decide), false otherwise.
template <Term kTerm>
bool ExactInDouble(const float* a, const float* b, size_t n, double* out) {
  const DD dd;
  const DFH df;
  const size_t nd = hn::Lanes(dd);
  VD s = hn::Zero(dd), err = hn::Zero(dd);
  const auto step = [&](const float* pa, const float* pb) {
    VD term;
    if constexpr (kTerm == Term::kProduct) {
      term = hn::Mul(hn::PromoteTo(dd, hn::LoadU(df, pa)), hn::PromoteTo(dd, hn::LoadU(df, pb)));
    } else if constexpr (kTerm == Term::kValue) {
      term = hn::PromoteTo(dd, hn::LoadU(df, pa));
    } else {
      const auto x = hn::LoadU(df, pa);
      term = hn::PromoteTo(dd, hn::Mul(x, x));
    }
    const VD next = hn::Add(s, term);
    const VD part = hn::Sub(next, s);
    const VD e = hn::Add(hn::Sub(s, hn::Sub(next, part)), hn::Sub(term, part));
    err = hn::Or(err, e);  // any non-zero error bit pattern survives
    s = next;
  };
  size_t i = 0;
  for (; i + nd <= n; i += nd) step(a + i, b + i);
  if (i < n) {
    HWY_ALIGN float ta[hn::MaxLanes(DD())] = {};
    HWY_ALIGN float tb[hn::MaxLanes(DD())] = {};
    std::memcpy(ta, a + i, (n - i) * sizeof(float));
    if (kTerm == Term::kProduct) std::memcpy(tb, b + i, (n - i) * sizeof(float));
    step(ta, tb);
  }
  HWY_ALIGN double lanes[hn::MaxLanes(DD())];
  HWY_ALIGN double errs[hn::MaxLanes(DD())];
  hn::Store(s, dd, lanes);
  hn::Store(err, dd, errs);
  double sum = 0.0;
  for (size_t l = 0; l < nd; ++l) {
    if (errs[l] != 0.0 || !std::isfinite(lanes[l])) return false;  // NaN errors compare unequal
    const double next = sum + lanes[l];
    const double part = next - sum;
    if ((sum - (next - part)) + (lanes[l] - part) != 0.0) return false;
    sum = next;
  }
  *out = sum;
  return true;
}

// The fp32 rounding of an exact double sum; false for zero (its sign needs the terms).
inline bool RoundExact(double sum, float* out) {
  if (sum == 0.0) return false;
  *out = static_cast<float>(sum);
  return true;
}

// The two vector tiers of the exact dot: true and the answer in *out when one decides. Reads `a`
// and `b` only through unaligned vector loads and byte copies, so `a` may sit at any address.
bool DotTiers(const float* a, const float* b, size_t n, float* out) {
  if (n == 0) return false;
  double t;
  int64_t steps, lanes;
  const double s = SumTerms<Term::kProduct>(a, b, n, &t, &steps, &lanes);
  if (Decide(s, Bound(steps, lanes, t), out)) return true;
  double exact;
  return ExactInDouble<Term::kProduct>(a, b, n, &exact) && RoundExact(exact, out);
}

// The first tier of the kTokens × kRows dots of the tokens b[t] with the rows a[r] at once: each
// operand's conversion to double and its magnitudes are shared by the dots that use it, each dot
// has its own accumulator pair (independent chains, enough to cover the FMA latency; a dot's
// arithmetic is the same whatever the tile). decided[t * stride + r]: whether dot (t, r)'s bound
// decided it (out[t * stride + r] then holds the answer). Reads the rows and the tokens only
// through unaligned vector loads and byte copies.
template <size_t kRows, size_t kTokens>
void DotTileFirstTier(const float* const* a, const float* const* b, size_t n, float* out,
                      bool* decided, size_t stride) {
  const DD dd;
  const DFH df;
  const size_t nd = hn::Lanes(dd);
  VD s[kTokens][kRows], t[kTokens][kRows];
  for (size_t k = 0; k < kTokens; ++k) {
    for (size_t r = 0; r < kRows; ++r) s[k][r] = t[k][r] = hn::Zero(dd);
  }
  const auto step = [&](const float* const* pa, const float* const* pb) {
    VD vb[kTokens], abs_b[kTokens];
    for (size_t k = 0; k < kTokens; ++k) {
      vb[k] = hn::PromoteTo(dd, hn::LoadU(df, pb[k]));
      abs_b[k] = hn::Abs(vb[k]);
    }
    for (size_t r = 0; r < kRows; ++r) {
      const VD va = hn::PromoteTo(dd, hn::LoadU(df, pa[r]));
      const VD abs_a = hn::Abs(va);
      for (size_t k = 0; k < kTokens; ++k) {
        s[k][r] = hn::MulAdd(va, vb[k], s[k][r]);  // the product is exact: one rounding, in the sum
        t[k][r] = hn::MulAdd(abs_a, abs_b[k], t[k][r]);
      }
    }
  };
  size_t i = 0;
  const float* pa[kRows];
  const float* pb[kTokens];
  for (; i + nd <= n; i += nd) {
    for (size_t r = 0; r < kRows; ++r) pa[r] = a[r] + i;
    for (size_t k = 0; k < kTokens; ++k) pb[k] = b[k] + i;
    step(pa, pb);
  }
  if (i < n) {  // the tail, zero padded (zero terms change neither sum)
    HWY_ALIGN float ta[kRows][hn::MaxLanes(DD())] = {};
    HWY_ALIGN float tb[kTokens][hn::MaxLanes(DD())] = {};
    for (size_t r = 0; r < kRows; ++r) {
      std::memcpy(ta[r], a[r] + i, (n - i) * sizeof(float));
      pa[r] = ta[r];
    }
    for (size_t k = 0; k < kTokens; ++k) {
      std::memcpy(tb[k], b[k] + i, (n - i) * sizeof(float));
      pb[k] = tb[k];
    }
    step(pa, pb);
  }
  // A term's way to S: its lane's chain (at most one addition per vector step), then the lanes.
  const auto steps = static_cast<int64_t>((n + nd - 1) / nd) + 1;
  const auto lanes = static_cast<int64_t>(nd);
  for (size_t k = 0; k < kTokens; ++k) {
    for (size_t r = 0; r < kRows; ++r) {
      const double sum = hn::GetLane(hn::SumOfLanes(dd, s[k][r]));
      const double magnitude = hn::GetLane(hn::SumOfLanes(dd, t[k][r]));
      decided[k * stride + r] =
          n > 0 && Decide(sum, Bound(steps, lanes, magnitude), &out[k * stride + r]);
    }
  }
}

// Two tokens at a time where the registers hold the tile's 16 accumulators (AVX-512's 32).
#if HWY_TARGET <= HWY_AVX3
constexpr size_t kTileTokens = 2;
#else
constexpr size_t kTileTokens = 1;
#endif

// The first tier for every (token, row): kTileTokens tokens and four rows at a time; out and
// decided as DotTileFirstTier's.
void DotRowsTiers(const float* const* a, size_t num_rows, const float* const* b, size_t num_tokens,
                  size_t n, float* out, bool* decided, size_t stride) {
  size_t k = 0;
  const auto rows = [&]<size_t kTokens>(std::integral_constant<size_t, kTokens>) {
    float* o = out + k * stride;
    bool* d = decided + k * stride;
    size_t r = 0;
    for (; r + 4 <= num_rows; r += 4) {
      DotTileFirstTier<4, kTokens>(a + r, b + k, n, o + r, d + r, stride);
    }
    for (; r + 2 <= num_rows; r += 2) {
      DotTileFirstTier<2, kTokens>(a + r, b + k, n, o + r, d + r, stride);
    }
    for (; r < num_rows; ++r) DotTileFirstTier<1, kTokens>(a + r, b + k, n, o + r, d + r, stride);
  };
  for (; k + kTileTokens <= num_tokens; k += kTileTokens) {
    rows(std::integral_constant<size_t, kTileTokens>());
  }
  for (; k < num_tokens; ++k) rows(std::integral_constant<size_t, 1>());
}

float DotSimd(const float* a, const float* b, size_t n) {
  float out;
  if (DotTiers(a, b, n, &out)) return out;
  return ExactDot(std::span<const float>(a, n), std::span<const float>(b, n));
}

float SumSimd(const float* x, size_t n) {
  double t;
  int64_t steps, lanes;
  const double s = SumTerms<Term::kValue>(x, x, n, &t, &steps, &lanes);
  float out;
  if (n > 0 && Decide(s, Bound(steps, lanes, t), &out)) return out;
  double exact;
  if (n > 0 && ExactInDouble<Term::kValue>(x, x, n, &exact) && RoundExact(exact, &out)) return out;
  return ExactSum(std::span<const float>(x, n));
}

float MeanSquareSimd(const float* x, size_t n) {
  double t;
  int64_t steps, lanes;
  const double s = SumTerms<Term::kSquare>(x, x, n, &t, &steps, &lanes);
  // The quotient rounds once more: within 2^-53 of itself.
  const double q = s / static_cast<double>(n);
  const double bound = Bound(steps, lanes, t) / static_cast<double>(n) + 0x1p-53 * std::fabs(q);
  float out;
  if (Decide(q, bound, &out)) return out;
  return ExactMeanSquare(std::span<const float>(x, n));
}

// Columns [d, d + N) of the rows, each lane its own exact dot over the rows.
void ColumnsSimd(const float* w, const float* const* rows, size_t n, size_t dim, float* out) {
  const DD dd;
  const DFH df;
  const size_t nd = hn::Lanes(dd);
  size_t d = 0;
  for (; d + nd <= dim; d += nd) {
    VD s = hn::Zero(dd), t = hn::Zero(dd);
    for (size_t i = 0; i < n; ++i) {
      const VD wi = hn::Set(dd, static_cast<double>(w[i]));
      const VD v = hn::PromoteTo(dd, hn::LoadU(df, rows[i] + d));
      s = hn::MulAdd(wi, v, s);
      t = hn::MulAdd(hn::Abs(wi), hn::Abs(v), t);
    }
    HWY_ALIGN double sv[hn::MaxLanes(DD())];
    HWY_ALIGN double tv[hn::MaxLanes(DD())];
    hn::Store(s, dd, sv);
    hn::Store(t, dd, tv);
    bool undecided = false;
    for (size_t l = 0; l < nd; ++l) {
      undecided |= n == 0 || !Decide(sv[l], Bound(static_cast<int64_t>(n), 1, tv[l]), &out[d + l]);
    }
    if (!undecided) continue;
    // The second tier for the block: TwoSum over the rows proves a lane's double sum exact.
    VD exact = hn::Zero(dd), err = hn::Zero(dd);
    for (size_t i = 0; i < n; ++i) {
      const VD term = hn::Mul(hn::Set(dd, static_cast<double>(w[i])),
                              hn::PromoteTo(dd, hn::LoadU(df, rows[i] + d)));
      const VD next = hn::Add(exact, term);
      const VD part = hn::Sub(next, exact);
      err = hn::Or(err, hn::Add(hn::Sub(exact, hn::Sub(next, part)), hn::Sub(term, part)));
      exact = next;
    }
    HWY_ALIGN double ev[hn::MaxLanes(DD())];
    hn::Store(exact, dd, sv);
    hn::Store(err, dd, ev);
    for (size_t l = 0; l < nd; ++l) {
      if (n > 0 && Decide(sv[l], Bound(static_cast<int64_t>(n), 1, tv[l]), &out[d + l])) continue;
      if (n > 0 && ev[l] == 0.0 && std::isfinite(sv[l]) && sv[l] != 0.0) {
        out[d + l] = static_cast<float>(sv[l]);
        continue;
      }
      out[d + l] = ExactDotColumn(std::span<const float>(w, n),
                                  std::span<const float* const>(rows, n), d + l);
    }
  }
  for (; d < dim; ++d) {
    out[d] =
        ExactDotColumn(std::span<const float>(w, n), std::span<const float* const>(rows, n), d);
  }
}

// Fp32Dot of `a` with each of kRows rows at once (out[r] for b[r]): on targets with fused
// multiply-adds, a row's 16 chains are 16 / N vectors of N lanes (chain l is lane l % N of vector
// l / N); the tail and the fixed tree as in the scalar twin. The rows' accumulators are
// independent, so several rows keep the FMA pipes busy where one row waits on its own latency; each
// row's arithmetic is the same whatever kRows is.
template <size_t kRows>
void Fp32DotRows(const float* a, const float* const* b, size_t n, float* out) {
#if HWY_NATIVE_FMA
  const hn::CappedTag<float, 16> df;
  constexpr size_t kChains = 16;
  const size_t nf = hn::Lanes(df);
  using VF = hn::Vec<decltype(df)>;
  const size_t num_vectors = kChains / nf;
  VF acc[kRows][kChains];
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t v = 0; v < num_vectors; ++v) acc[r][v] = hn::Zero(df);
  }
  size_t i = 0;
  for (; i + kChains <= n; i += kChains) {
    for (size_t v = 0; v < num_vectors; ++v) {
      const VF av = hn::LoadU(df, a + i + v * nf);
      for (size_t r = 0; r < kRows; ++r) {
        acc[r][v] = hn::MulAdd(av, hn::LoadU(df, b[r] + i + v * nf), acc[r][v]);
      }
    }
  }
  for (size_t r = 0; r < kRows; ++r) {
    HWY_ALIGN float chains[kChains];
    for (size_t v = 0; v < num_vectors; ++v) hn::Store(acc[r][v], df, chains + v * nf);
    for (size_t j = i; j < n; ++j)
      chains[j % kChains] = std::fma(a[j], b[r][j], chains[j % kChains]);
    for (size_t half = kChains / 2; half >= 1; half /= 2) {
      for (size_t l = 0; l < half; ++l) chains[l] = chains[l] + chains[l + half];
    }
    out[r] = chains[0];
  }
#else
  for (size_t r = 0; r < kRows; ++r) {
    out[r] = Fp32Dot(std::span<const float>(a, n), std::span<const float>(b[r], n));
  }
#endif
}

float Fp32DotLanes(const float* a, const float* b, size_t n) {
  float out;
  Fp32DotRows<1>(a, &b, n, &out);
  return out;
}

// out[k] = Fp32Dot(a, rows[k]) for k < num_rows, four rows at a time.
void Fp32DotsLanes(const float* a, const float* const* rows, size_t num_rows, size_t n,
                   float* out) {
  size_t k = 0;
  for (; k + 4 <= num_rows; k += 4) Fp32DotRows<4>(a, rows + k, n, out + k);
  for (; k < num_rows; ++k) Fp32DotRows<1>(a, rows + k, n, out + k);
}

// Fp32DotColumn for columns [0, dim): lanes are columns, each its own chain over the rows; four
// vectors of columns share a pass over the rows (independent chains, the same arithmetic).
void Fp32ColumnsLanes(const float* w, const float* const* rows, size_t n, size_t dim, float* out) {
  size_t d = 0;
#if HWY_NATIVE_FMA
  const hn::ScalableTag<float> df;
  const size_t nf = hn::Lanes(df);
  using VF = hn::Vec<decltype(df)>;
  constexpr size_t kVectors = 4;
  for (; d + kVectors * nf <= dim; d += kVectors * nf) {
    VF acc[kVectors];
    for (size_t v = 0; v < kVectors; ++v) acc[v] = hn::Zero(df);
    for (size_t i = 0; i < n; ++i) {
      const VF wi = hn::Set(df, w[i]);
      for (size_t v = 0; v < kVectors; ++v) {
        acc[v] = hn::MulAdd(wi, hn::LoadU(df, rows[i] + d + v * nf), acc[v]);
      }
    }
    for (size_t v = 0; v < kVectors; ++v) hn::StoreU(acc[v], df, out + d + v * nf);
  }
  for (; d + nf <= dim; d += nf) {
    auto acc = hn::Zero(df);
    for (size_t i = 0; i < n; ++i)
      acc = hn::MulAdd(hn::Set(df, w[i]), hn::LoadU(df, rows[i] + d), acc);
    hn::StoreU(acc, df, out + d);
  }
#endif
  for (; d < dim; ++d) {
    out[d] = Fp32DotColumn(std::span<const float>(w, n), std::span<const float* const>(rows, n), d);
  }
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(DotSimd);
HWY_EXPORT(DotTiers);
HWY_EXPORT(DotRowsTiers);
HWY_EXPORT(SumSimd);
HWY_EXPORT(MeanSquareSimd);
HWY_EXPORT(ColumnsSimd);
HWY_EXPORT(Fp32DotLanes);
HWY_EXPORT(Fp32DotsLanes);
HWY_EXPORT(Fp32ColumnsLanes);

float Fp32DotSimd(std::span<const float> a, std::span<const float> b) {
  DSV41_CHECK(a.size() == b.size(), "dot of %zu and %zu values", a.size(), b.size());
  return HWY_DYNAMIC_DISPATCH(Fp32DotLanes)(a.data(), b.data(), a.size());
}

void Fp32DotsSimd(std::span<const float> a, std::span<const float* const> rows,
                  std::span<float> out) {
  DSV41_CHECK(rows.size() == out.size(), "%zu rows, %zu results", rows.size(), out.size());
  HWY_DYNAMIC_DISPATCH(Fp32DotsLanes)(a.data(), rows.data(), rows.size(), a.size(), out.data());
}

void Fp32DotColumnsSimd(std::span<const float> w, std::span<const float* const> rows,
                        std::span<float> out) {
  DSV41_CHECK(w.size() == rows.size(), "dot of %zu values and %zu rows", w.size(), rows.size());
  HWY_DYNAMIC_DISPATCH(Fp32ColumnsLanes)(w.data(), rows.data(), w.size(), out.size(), out.data());
}

float ExactDotSimd(std::span<const float> a, std::span<const float> b) {
  DSV41_CHECK(a.size() == b.size(), "dot of %zu and %zu values", a.size(), b.size());
  return HWY_DYNAMIC_DISPATCH(DotSimd)(a.data(), b.data(), a.size());
}

float ExactDotUnalignedSimd(std::span<const std::byte> a, std::span<const float> b) {
  DSV41_CHECK(a.size() == b.size() * sizeof(float), "dot of %zu bytes and %zu values", a.size(),
              b.size());
  float out;
  // The vector tiers read `a` through unaligned loads only; the exact accumulator by copies.
  if (HWY_DYNAMIC_DISPATCH(DotTiers)(reinterpret_cast<const float*>(a.data()), b.data(), b.size(),
                                     &out)) {
    return out;
  }
  ExactAccumulator acc;
  for (size_t i = 0; i < b.size(); ++i) {
    float value;
    std::memcpy(&value, a.data() + i * sizeof(float), sizeof(value));
    acc.AddProduct(value, b[i]);
  }
  return acc.Round();
}

void ExactDotsUnalignedSimd(std::span<const std::byte> rows, std::span<const float> b,
                            std::span<float> out) {
  ExactDotsOfTokensUnalignedSimd(rows, out.size(), b, 1, out, out.size());
}

void ExactDotsOfTokensUnalignedSimd(std::span<const std::byte> rows, size_t num_rows,
                                    std::span<const float> tokens, size_t num_tokens,
                                    std::span<float> out, size_t out_stride) {
  const size_t width = num_tokens == 0 ? 0 : tokens.size() / num_tokens;
  const size_t row_bytes = width * sizeof(float);
  DSV41_CHECK(tokens.size() == num_tokens * width && rows.size() == num_rows * row_bytes &&
                  num_rows <= out_stride &&
                  (num_tokens == 0 || out.size() >= (num_tokens - 1) * out_stride + num_rows),
              "%zu row bytes for %zu rows, %zu values for %zu tokens, %zu results (stride %zu)",
              rows.size(), num_rows, tokens.size(), num_tokens, out.size(), out_stride);
  constexpr size_t kRowsPerPass = 32, kTokensPerPass = 4;
  const float* row_starts[kRowsPerPass];
  const float* token_starts[kTokensPerPass];
  float results[kTokensPerPass * kRowsPerPass];
  bool decided[kTokensPerPass * kRowsPerPass];
  for (size_t t0 = 0; t0 < num_tokens; t0 += kTokensPerPass) {
    const size_t tokens_now = std::min(kTokensPerPass, num_tokens - t0);
    for (size_t k = 0; k < tokens_now; ++k) token_starts[k] = tokens.data() + (t0 + k) * width;
    for (size_t first = 0; first < num_rows; first += kRowsPerPass) {
      const size_t count = std::min(kRowsPerPass, num_rows - first);
      for (size_t r = 0; r < count; ++r) {
        row_starts[r] = reinterpret_cast<const float*>(rows.data() + (first + r) * row_bytes);
      }
      HWY_DYNAMIC_DISPATCH(DotRowsTiers)
      (row_starts, count, token_starts, tokens_now, width, results, decided, kRowsPerPass);
      for (size_t k = 0; k < tokens_now; ++k) {
        float* o = out.data() + (t0 + k) * out_stride + first;
        for (size_t r = 0; r < count; ++r) {
          const size_t at = k * kRowsPerPass + r;
          // Rare: the next tiers, one dot at a time.
          o[r] = decided[at]
                     ? results[at]
                     : ExactDotUnalignedSimd(rows.subspan((first + r) * row_bytes, row_bytes),
                                             tokens.subspan((t0 + k) * width, width));
        }
      }
    }
  }
}

void ExactDotColumnsSimd(std::span<const float> w, std::span<const float* const> rows,
                         std::span<float> out) {
  DSV41_CHECK(w.size() == rows.size(), "dot of %zu values and %zu rows", w.size(), rows.size());
  HWY_DYNAMIC_DISPATCH(ColumnsSimd)(w.data(), rows.data(), w.size(), out.size(), out.data());
}

float ExactSumSimd(std::span<const float> x) {
  return HWY_DYNAMIC_DISPATCH(SumSimd)(x.data(), x.size());
}

float ExactMeanSquareSimd(std::span<const float> x) {
  DSV41_CHECK(!x.empty(), "mean square of no values");
  return HWY_DYNAMIC_DISPATCH(MeanSquareSimd)(x.data(), x.size());
}

}  // namespace dsv41
#endif  // HWY_ONCE

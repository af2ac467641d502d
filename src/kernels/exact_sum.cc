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

// The first tier of kRows dots of `b` with the rows a[r] at once: b's conversion to double and its
// magnitudes are shared, each row has its own accumulator pair (the pairs are independent chains,
// enough to cover the FMA latency). decided[r]: whether row r's bound decided it (out[r] then
// holds the answer). Reads the rows only through unaligned vector loads and byte copies.
template <size_t kRows>
void DotRowsFirstTier(const float* const* a, const float* b, size_t n, float* out, bool* decided) {
  const DD dd;
  const DFH df;
  const size_t nd = hn::Lanes(dd);
  VD s[kRows], t[kRows];
  for (size_t r = 0; r < kRows; ++r) s[r] = t[r] = hn::Zero(dd);
  const auto step = [&](const float* const* pa, const float* pb) {
    const VD vb = hn::PromoteTo(dd, hn::LoadU(df, pb));
    const VD abs_b = hn::Abs(vb);
    for (size_t r = 0; r < kRows; ++r) {
      const VD va = hn::PromoteTo(dd, hn::LoadU(df, pa[r]));
      s[r] = hn::MulAdd(va, vb, s[r]);  // the product is exact: one rounding, in the sum
      t[r] = hn::MulAdd(hn::Abs(va), abs_b, t[r]);
    }
  };
  size_t i = 0;
  const float* pa[kRows];
  for (; i + nd <= n; i += nd) {
    for (size_t r = 0; r < kRows; ++r) pa[r] = a[r] + i;
    step(pa, b + i);
  }
  if (i < n) {  // the tail, zero padded (zero terms change neither sum)
    HWY_ALIGN float ta[kRows][hn::MaxLanes(DD())] = {};
    HWY_ALIGN float tb[hn::MaxLanes(DD())] = {};
    for (size_t r = 0; r < kRows; ++r) {
      std::memcpy(ta[r], a[r] + i, (n - i) * sizeof(float));
      pa[r] = ta[r];
    }
    std::memcpy(tb, b + i, (n - i) * sizeof(float));
    step(pa, tb);
  }
  // A term's way to S: its lane's chain (at most one addition per vector step), then the lanes.
  const auto steps = static_cast<int64_t>((n + nd - 1) / nd) + 1;
  const auto lanes = static_cast<int64_t>(nd);
  for (size_t r = 0; r < kRows; ++r) {
    const double sum = hn::GetLane(hn::SumOfLanes(dd, s[r]));
    const double magnitude = hn::GetLane(hn::SumOfLanes(dd, t[r]));
    decided[r] = n > 0 && Decide(sum, Bound(steps, lanes, magnitude), &out[r]);
  }
}

// The first tier for every row, four rows at a time; decided[r] as above.
void DotRowsTiers(const float* const* a, size_t num_rows, const float* b, size_t n, float* out,
                  bool* decided) {
  size_t r = 0;
  for (; r + 4 <= num_rows; r += 4) DotRowsFirstTier<4>(a + r, b, n, out + r, decided + r);
  for (; r + 2 <= num_rows; r += 2) DotRowsFirstTier<2>(a + r, b, n, out + r, decided + r);
  for (; r < num_rows; ++r) DotRowsFirstTier<1>(a + r, b, n, out + r, decided + r);
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
  const size_t row_bytes = b.size() * sizeof(float);
  DSV41_CHECK(rows.size() == out.size() * row_bytes, "%zu row bytes for %zu dots of %zu values",
              rows.size(), out.size(), b.size());
  constexpr size_t kRowsPerPass = 32;
  const float* row_starts[kRowsPerPass];
  bool decided[kRowsPerPass];
  for (size_t first = 0; first < out.size(); first += kRowsPerPass) {
    const size_t count = std::min(kRowsPerPass, out.size() - first);
    for (size_t r = 0; r < count; ++r) {
      row_starts[r] = reinterpret_cast<const float*>(rows.data() + (first + r) * row_bytes);
    }
    HWY_DYNAMIC_DISPATCH(DotRowsTiers)
    (row_starts, count, b.data(), b.size(), out.data() + first, decided);
    for (size_t r = 0; r < count; ++r) {  // rare: the next tiers, one row at a time
      if (!decided[r]) {
        out[first + r] = ExactDotUnalignedSimd(rows.subspan((first + r) * row_bytes, row_bytes), b);
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

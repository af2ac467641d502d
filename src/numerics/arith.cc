#include "numerics/arith.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/check.h"

namespace dsv41 {
namespace {

constexpr int64_t kDigitBase = int64_t{1} << 32;
constexpr uint64_t kDigitMask = 0xFFFFFFFFu;
// Between two normalisations every cell moves by less than 2^32 per Add; 2^30 Adds keep
// |cell| < 2^62.
constexpr uint32_t kNormalizeEvery = uint32_t{1} << 30;

// Unsigned magnitude of a fixed-point number: digit i weighs 2^(lsb_exp + 32 i).
struct Magnitude {
  static constexpr int kMaxDigits = ExactAccumulator::kNumDigits + 2;
  uint32_t digit[kMaxDigits] = {};
  int num_digits = 0;
  int lsb_exp = 0;

  bool Bit(int pos) const {
    return pos >= 0 && pos < 32 * num_digits && ((digit[pos / 32] >> (pos % 32)) & 1u);
  }
  // Bits [lo, lo + count) as an integer; 0 <= lo < 32 · num_digits, 1 <= count <= 32.
  uint64_t Bits(int lo, int count) const {
    const int idx = lo / 32;
    uint64_t window = digit[idx];
    if (idx + 1 < num_digits) window |= static_cast<uint64_t>(digit[idx + 1]) << 32;
    return (window >> (lo % 32)) & ((uint64_t{1} << count) - 1);
  }
  // True when any bit below `pos` is set.
  bool AnyBitBelow(int pos) const {
    if (pos <= 0) return false;
    if (pos >= 32 * num_digits) return TopBit() >= 0;
    const int full = pos / 32;
    for (int i = 0; i < full; ++i) {
      if (digit[i] != 0) return true;
    }
    const int rest = pos % 32;
    return rest != 0 && (digit[full] & ((1u << rest) - 1u)) != 0;
  }
  // Index of the highest set bit, or -1 for zero.
  int TopBit() const {
    for (int i = num_digits - 1; i >= 0; --i) {
      if (digit[i] != 0) return i * 32 + 31 - std::countl_zero(digit[i]);
    }
    return -1;
  }
};

// Rounds (m + sticky·tiny) · 2^m.lsb_exp, m nonzero, to fp32, to nearest even. `sticky` says
// the true magnitude exceeds m by a positive amount smaller than one unit of m's lowest digit.
float RoundMagnitude(const Magnitude& m, bool sticky, bool negative) {
  const int top = m.TopBit();
  DSV41_DCHECK(top >= 0, "rounding a zero magnitude");
  const int top_exp = top + m.lsb_exp;
  // fp32 keeps 24 bits below a normal top bit; subnormals keep bits down to 2^-149.
  const int kept_lsb_exp = std::max(top_exp - 23, -149);
  const int t = kept_lsb_exp - m.lsb_exp;  // bit index of the lowest kept bit
  uint64_t kept;
  if (t <= 0) {
    // Every bit is kept (the guard bit is 0, so a sticky remainder rounds down: truncation).
    kept = m.Bits(0, top + 1) << -t;
  } else {
    // Below half the smallest subnormal every bit is under the kept range (kept = 0).
    kept = top >= t ? m.Bits(t, top - t + 1) : 0;
    const bool guard = m.Bit(t - 1);
    const bool below = sticky || m.AnyBitBelow(t - 1);
    if (guard && (below || (kept & 1u))) ++kept;
  }
  // kept <= 2^24 is exact in fp32 and the scaling is exact unless it overflows to inf.
  const float magnitude = std::ldexp(static_cast<float>(kept), kept_lsb_exp);
  return negative ? -magnitude : magnitude;
}

}  // namespace

void ExactAccumulator::AddDouble(double x) {
  any_term_ = true;
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const bool negative = (bits >> 63) != 0;
  int exp_field = static_cast<int>((bits >> 52) & 0x7FF);
  uint64_t sig = bits & ((uint64_t{1} << 52) - 1);
  if (exp_field == 0x7FF) {
    all_negative_zero_ = false;
    if (sig != 0) {
      any_nan_ = true;
    } else if (negative) {
      any_neg_inf_ = true;
    } else {
      any_pos_inf_ = true;
    }
    return;
  }
  if (!(negative && exp_field == 0 && sig == 0)) all_negative_zero_ = false;
  if (exp_field != 0) {
    sig |= uint64_t{1} << 52;
  } else {
    exp_field = 1;
  }
  if (sig == 0) return;
  int offset = exp_field - 1075 - kLsbExp;  // x = sig · 2^(kLsbExp + offset)
  if (offset < 0) {
    // Only trailing zeros may drop: the caller promises a multiple of 2^kLsbExp.
    DSV41_DCHECK(-offset < 64 && (sig & ((uint64_t{1} << -offset) - 1)) == 0,
                 "term %a below the accumulator's resolution", x);
    sig >>= -offset;
    offset = 0;
  }
  const int idx = offset / 32;
  const int shift = offset % 32;
  DSV41_DCHECK(idx + 2 < kNumDigits, "term %a beyond the accumulator's range", x);
  // sig · 2^shift < 2^85 spans three 32-bit digits.
  const uint64_t low = (sig << shift) & kDigitMask;
  const uint64_t upper = shift == 0 ? sig >> 32 : sig >> (32 - shift);  // bits 32.. of sig·2^shift
  const uint64_t mid = upper & kDigitMask;
  const uint64_t high = upper >> 32;
  if (negative) {
    digits_[idx] -= static_cast<int64_t>(low);
    digits_[idx + 1] -= static_cast<int64_t>(mid);
    digits_[idx + 2] -= static_cast<int64_t>(high);
  } else {
    digits_[idx] += static_cast<int64_t>(low);
    digits_[idx + 1] += static_cast<int64_t>(mid);
    digits_[idx + 2] += static_cast<int64_t>(high);
  }
  if (++adds_since_normalize_ == kNormalizeEvery) Normalize();
}

void ExactAccumulator::Normalize() {
  // Moves carries up so digits 0..n-2 lie in [0, 2^32); the top cell keeps the sign.
  for (int i = 0; i + 1 < kNumDigits; ++i) {
    const int64_t carry = digits_[i] >> 32;  // floor division by 2^32
    digits_[i] -= carry * kDigitBase;
    digits_[i + 1] += carry;
  }
  adds_since_normalize_ = 0;
}

float ExactAccumulator::Round() const { return RoundDividedBy(1); }

float ExactAccumulator::RoundDividedBy(uint64_t n) const {
  DSV41_CHECK(n >= 1 && n <= kDigitMask, "divisor %llu", static_cast<unsigned long long>(n));
  if (any_nan_ || (any_pos_inf_ && any_neg_inf_)) return std::numeric_limits<float>::quiet_NaN();
  if (any_pos_inf_) return std::numeric_limits<float>::infinity();
  if (any_neg_inf_) return -std::numeric_limits<float>::infinity();

  ExactAccumulator acc = *this;
  acc.Normalize();
  const bool negative = acc.digits_[kNumDigits - 1] < 0;
  if (negative) {
    for (int64_t& d : acc.digits_) d = -d;
    acc.Normalize();
  }
  // The dividend gets two zero digits below (64 fraction bits), so the quotient keeps far more
  // than the 25 bits rounding needs and the remainder only feeds the sticky bit.
  const int extra = n == 1 ? 0 : 2;
  Magnitude m;
  m.num_digits = kNumDigits + extra;
  m.lsb_exp = kLsbExp - 32 * extra;
  for (int i = 0; i < kNumDigits; ++i) m.digit[i + extra] = static_cast<uint32_t>(acc.digits_[i]);
  uint64_t remainder = 0;
  if (n != 1) {
    for (int i = m.num_digits - 1; i >= 0; --i) {
      const uint64_t current = (remainder << 32) | m.digit[i];
      m.digit[i] = static_cast<uint32_t>(current / n);
      remainder = current % n;
    }
  }
  if (m.TopBit() < 0) {
    // An exact zero (a zero dividend: the remainder is then zero too).
    return all_negative_zero_ && any_term_ ? -0.0f : 0.0f;
  }
  return RoundMagnitude(m, remainder != 0, negative);
}

namespace {
// Σ term(i) for i < n exactly, one rounding; term(i) is a double that is exact (an fp32 value or
// the product of two). The double running sum is checked at every step with Knuth's TwoSum. When
// no step rounded, the double sum is the exact sum and one conversion rounds it correctly;
// otherwise (or on a non-finite term, whose TwoSum error is NaN) `exact_fallback` recomputes it
// with the ExactAccumulator. Starting from −0 keeps the signed-zero rule: −0 only when every (of
// at least one) term is −0.
template <typename TermFn, typename FallbackFn>
float CheckedExactSum(size_t n, const TermFn& term, const FallbackFn& exact_fallback) {
  if (n == 0) return 0.0f;  // the empty sum is +0
  double sum = -0.0;
  bool exact = true;
  for (size_t i = 0; i < n; ++i) {
    const double t = term(i);
    const double next = sum + t;
    const double t_part = next - sum;
    const double err = (sum - (next - t_part)) + (t - t_part);
    exact = exact && err == 0.0;
    sum = next;
  }
  if (exact) return static_cast<float>(sum);
  ExactAccumulator acc;
  for (size_t i = 0; i < n; ++i) exact_fallback(acc, i);
  return acc.Round();
}
}  // namespace

float ExactSum(std::span<const float> x) {
  return CheckedExactSum(
      x.size(), [&](size_t i) { return static_cast<double>(x[i]); },
      [&](ExactAccumulator& acc, size_t i) { acc.Add(x[i]); });
}

float ExactDot(std::span<const float> a, std::span<const float> b) {
  DSV41_CHECK(a.size() == b.size(), "dot of %zu and %zu values", a.size(), b.size());
  return CheckedExactSum(
      a.size(), [&](size_t i) { return static_cast<double>(a[i]) * static_cast<double>(b[i]); },
      [&](ExactAccumulator& acc, size_t i) { acc.AddProduct(a[i], b[i]); });
}

float ExactDotColumn(std::span<const float> a, std::span<const float* const> rows, size_t column) {
  DSV41_CHECK(a.size() == rows.size(), "dot of %zu values and %zu rows", a.size(), rows.size());
  return CheckedExactSum(
      a.size(),
      [&](size_t i) { return static_cast<double>(a[i]) * static_cast<double>(rows[i][column]); },
      [&](ExactAccumulator& acc, size_t i) { acc.AddProduct(a[i], rows[i][column]); });
}

float Fp32Dot(std::span<const float> a, std::span<const float> b) {
  DSV41_CHECK(a.size() == b.size(), "dot of %zu and %zu values", a.size(), b.size());
  float chains[16] = {};
  for (size_t i = 0; i < a.size(); ++i) chains[i % 16] = std::fma(a[i], b[i], chains[i % 16]);
  for (size_t half = 8; half >= 1; half /= 2) {
    for (size_t l = 0; l < half; ++l) chains[l] = chains[l] + chains[l + half];
  }
  return chains[0];
}

float Fp32DotColumn(std::span<const float> a, std::span<const float* const> rows, size_t column) {
  DSV41_CHECK(a.size() == rows.size(), "dot of %zu values and %zu rows", a.size(), rows.size());
  float sum = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) sum = std::fma(a[i], rows[i][column], sum);
  return sum;
}

float ExactMeanSquare(std::span<const float> x) {
  DSV41_CHECK(!x.empty(), "mean square of no values");
  ExactAccumulator acc;
  for (const float v : x) {
    const float square = v * v;  // fp32(x²): rounded to fp32 before the exact sum
    acc.Add(square);
  }
  return acc.RoundDividedBy(x.size());
}

float SeqSum(std::span<const float> x) {
  if (x.empty()) return 0.0f;
  float sum = x[0];
  for (size_t i = 1; i < x.size(); ++i) sum = sum + x[i];
  return sum;
}

float CrExp(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }

float CrRsqrt(float v) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(v))); }

float CrSqrt(float v) { return static_cast<float>(std::sqrt(static_cast<double>(v))); }

float CrSin(float x) { return static_cast<float>(std::sin(static_cast<double>(x))); }

float CrCos(float x) { return static_cast<float>(std::cos(static_cast<double>(x))); }

float CrPow(float base, double exponent) {
  return static_cast<float>(std::pow(static_cast<double>(base), exponent));
}

float CrSoftplus(float z) {
  if (z > 20.0f) return z;
  return static_cast<float>(std::log1p(std::exp(static_cast<double>(z))));
}

float CrGelu(float x) {
  // 1 + erf(t) = erfc(−t): the same function, without the cancellation of 1 + erf for x < 0.
  const double v = static_cast<double>(x);
  return static_cast<float>(0.5 * v * std::erfc(-v / std::sqrt(2.0)));
}

float Sigmoid(float t) {
  const float e = CrExp(-t);
  const float denominator = 1.0f + e;
  return 1.0f / denominator;
}

float Silu(float g) {
  const float e = CrExp(-g);
  const float denominator = 1.0f + e;
  return g / denominator;
}

}  // namespace dsv41

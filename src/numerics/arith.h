#pragma once

// The canonical elementary arithmetic of model.md §12.8, in one place (STYLE.md §8): model/,
// kernels/ and engram/ call these instead of std::exp, sqrtf, plain float loops, ... Everything is
// bit-exact by definition; compile callers with -ffp-contract=off (the project default).
// All functions are pure and thread-safe.

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsv41 {

// ---- Exact sums (§12.8 item 2) -------------------------------------------------------------
//
// "Accumulate in double (or exactly) and round once" is implemented EXACTLY: the terms go into a
// fixed-point long accumulator (a Kulisch accumulator with 32-bit digits in int64 cells, carries
// resolved lazily) that holds any sum of products of two fp32 values without error, and the
// exact result is rounded once to fp32, to nearest even. Plain double accumulation agrees with
// this almost always, but not always (cancellation, or terms spanning more than 53 bits); the
// exact form is the reference value and is independent of the summation order.
//
// Special values follow IEEE: any NaN term, or +inf with -inf, gives NaN; otherwise an infinite
// term gives that infinity; an exactly-zero sum is +0 unless every term is -0 (then -0); a
// nonzero sum that rounds to zero keeps its sign; overflow gives ±inf.
//
// A 176-byte value type (thread-compatible: one per thread). Add is a few integer operations;
// Round scans the digits once.
class ExactAccumulator {
 public:
  // Adds x exactly.
  void Add(float x) { AddDouble(static_cast<double>(x)); }
  // Adds a·b exactly (the product of two fp32 values is exact in double).
  void AddProduct(float a, float b) { AddDouble(static_cast<double>(a) * static_cast<double>(b)); }
  // The sum so far, correctly rounded to fp32.
  float Round() const;
  // The sum so far divided by n (1 <= n < 2^32), correctly rounded to fp32 (one rounding).
  float RoundDividedBy(uint64_t n) const;
  // Forgets every term.
  void Reset() { *this = ExactAccumulator(); }

  // Fixed-point layout: digit i has weight 2^(kLsbExp + 32 i). Products of fp32 values are
  // multiples of 2^-298 below 2^256; the top digits give 2^64 terms of headroom.
  static constexpr int kLsbExp = -300;
  static constexpr int kNumDigits = 20;

 private:
  // Adds a double that is a multiple of 2^kLsbExp with |x| < 2^256, or a NaN / infinity.
  void AddDouble(double x);
  void Normalize();

  int64_t digits_[kNumDigits] = {};
  uint32_t adds_since_normalize_ = 0;
  bool any_nan_ = false;
  bool any_pos_inf_ = false;
  bool any_neg_inf_ = false;
  bool all_negative_zero_ = true;  // every term so far was -0 (false once a term is not)
  bool any_term_ = false;
};

// fp32(Σ x), exact accumulation, one rounding. Empty: +0.
float ExactSum(std::span<const float> x);
// fp32(Σ a[i]·b[i]), products and sum exact, one rounding. a.size() == b.size() (checked).
float ExactDot(std::span<const float> a, std::span<const float> b);
// ExactDot of `a` with column `column` of the rows `rows[i]` (Σ a[i]·rows[i][column]): the value
// product of attention over cached rows, without gathering the column.
float ExactDotColumn(std::span<const float> a, std::span<const float* const> rows, size_t column);

// ---- Fast-numerics fp32 sums (issue 19: attention q·k and PV under --numerics fast) ----------
// Not exact, but in one fixed order that depends only on the length, so every caller (any batch,
// chunking, thread count or SIMD width) gets the same bits.
// Fp32Dot: 16 chains, chain l accumulates a[i]·b[i] for i ≡ l (mod 16) in increasing i with
// fused multiply-adds from +0; then chain l += chain l + 8 (l < 8), l += l + 4, l += l + 2, and
// chain 0 + chain 1 is the result. a.size() == b.size() (checked).
float Fp32Dot(std::span<const float> a, std::span<const float> b);
// Fp32DotColumn: Σ_i a[i]·rows[i][column] in increasing i, fused multiply-adds from +0.
float Fp32DotColumn(std::span<const float> a, std::span<const float* const> rows, size_t column);

// The mean of squares of RMSNorm and the other norm statistics (§12.8 item 2):
// fp32( (Σ fp32(x[i]·x[i])) / n ) — each square is rounded to fp32, the sum of those and the
// division by n are exact, and the quotient is rounded once. x must not be empty (checked).
float ExactMeanSquare(std::span<const float> x);

// ---- Seq sums (§12.8 item 3) ---------------------------------------------------------------
// Sequential fp32 additions in index order: ((x[0] + x[1]) + x[2]) + ... Empty: +0.
float SeqSum(std::span<const float> x);

// ---- Elementary functions (§12.8 item 4) ---------------------------------------------------
// Each evaluates the function in double on the exact double value of its fp32 argument and
// rounds the result to fp32 once: the procedure the spec gives for "the correctly rounded fp32
// value of the exact function (evaluate in double and round once)". The two readings differ only
// where the double result lands exactly on an fp32 midpoint and the tie then goes the wrong way
// (double rounding). An exhaustive scan with glibc 2.36 (every fp32 input in the ranges below;
// long double judged each double result within 8 double ulps of a midpoint; the differences were
// confirmed with 300-bit mpmath) found exactly these cases:
//   CrExp      all inputs                    none
//   CrSoftplus [-110, 20] (above: z)         0x1.d483ap-12 -> 0x1.630178p-1 (exact: ...17ap-1)
//   CrSin      |x| <= 2^21 (RoPE angles)     ±0x1.33333p+13 -> ∓0x1.63f4bcp-2 (exact: ∓...bap-2)
//   CrCos      |x| <= 2^21                   none
//   CrSqrt, CrRsqrt: correctly rounded for every input (proved over all mantissas in the test).
// In both cases glibc's double is the correctly rounded double, so every accurate libm gives the
// same fp32: the result is not libm-dependent. This code follows "evaluate in double" (which is
// what a double-precision reference computes); arith_test.cc pins the two cases.
// Special values are those of the double functions.
float CrExp(float x);
// 1/√v in double, rounded once (not 1/sqrtf(v), which rounds twice). +0 -> +inf, -0 -> -inf,
// v < 0 -> NaN, +inf -> +0.
float CrRsqrt(float v);
// √v (double-then-float is exactly the correctly rounded fp32 square root).
float CrSqrt(float v);
float CrSin(float x);
float CrCos(float x);
// base^exponent (the RoPE table's theta^e; exponent is the double the spec computes).
float CrPow(float base, double exponent);
// softplus(z) = ln(1 + e^z) rounded once; z > 20 returns z unchanged (the reference's
// threshold). NaN -> NaN.
float CrSoftplus(float z);

// The exact-erf GELU 0.5 · x · (1 + erf(x / √2)) evaluated in double (as 0.5 · x · erfc(−x / √2),
// accurate for negative x too), rounded once: the vision aligner's activation (vision.md §9,
// §13.2: "fp32 of the exact formula"). NaN -> NaN.
float CrGelu(float x);

// Composite functions, evaluated as written with each fp32 step rounded (§12.8 item 4):
// sigmoid(t) = 1 / (1 + CrExp(-t)) — three roundings (exp, add, divide).
float Sigmoid(float t);
// silu(g) = g / (1 + CrExp(-g)).
float Silu(float g);

}  // namespace dsv41

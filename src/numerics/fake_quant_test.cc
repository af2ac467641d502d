#include "numerics/fake_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "numerics/codecs.h"

namespace dsv41 {
namespace {

uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }

// A block of `n` values: `head` followed by zeros (the spec's "…").
std::vector<float> Block(std::initializer_list<float> head, size_t n) {
  std::vector<float> v(head);
  v.resize(n, 0.0f);
  return v;
}

void ExpectBitsEq(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(Bits(got[i]), Bits(want[i]))
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// ---- Slow independent reference (double arithmetic, grid search) -------------------------------

// Least power of two >= t, by search.
double RefPow2Ceil(double t) {
  for (int k = -149; k <= 128; ++k) {
    if (std::ldexp(1.0, k) >= t) return std::ldexp(1.0, k);
  }
  return std::numeric_limits<double>::infinity();
}

// Nearest of the (sorted, non-negative) `grid` to |y|, ties to the even index (= even code for
// e4m3 and e2m1, whose codes enumerate their grids in order), saturating at the top; sign kept.
double RefNearest(const std::vector<double>& grid, double y) {
  const double a = std::fabs(y);
  size_t pick = grid.size() - 1;
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    if (a > grid[i + 1]) continue;
    const double mid = (grid[i] + grid[i + 1]) / 2;  // exact
    pick = a < mid ? i : a > mid ? i + 1 : (i % 2 == 0 ? i : i + 1);
    break;
  }
  return std::copysign(grid[pick], y);
}

std::vector<double> E4m3Grid() {  // codes 0x00..0x7E from the format definition
  std::vector<double> g;
  for (int e = 0; e < 16; ++e) {
    for (int m = 0; m < 8; ++m) {
      if (e == 15 && m == 7) continue;
      g.push_back(e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10));
    }
  }
  return g;
}

const std::vector<double> kE2m1Grid = {0, 0.5, 1, 1.5, 2, 3, 4, 6};

double RefAmax(const float* x, int n) {
  double amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  return amax;
}

// fp32(a · b) and fp32(a / b) for fp32 a, b via double: the double product is exact, and double
// division then fp32 rounding equals fp32 division (53 >= 2·24 + 2).
float Fp32Mul(float a, float b) { return static_cast<float>(static_cast<double>(a) * b); }
float Fp32Div(float a, float b) { return static_cast<float>(static_cast<double>(a) / b); }

std::vector<float> RefFq8(const std::vector<float>& x) {
  const std::vector<double> grid = E4m3Grid();
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    const float amax = static_cast<float>(std::max(RefAmax(&x[b], 32), static_cast<double>(1e-4f)));
    const double s = RefPow2Ceil(Fp32Mul(amax, static_cast<float>(1.0 / 448.0)));
    for (size_t j = b; j < b + 32; ++j) {
      const double y = std::clamp(x[j] / s, -448.0, 448.0);
      out[j] = static_cast<float>(RefNearest(grid, y) * s);
    }
  }
  return out;
}

std::vector<float> RefFq4B16(const std::vector<float>& x) {
  const std::vector<double> grid = E4m3Grid();
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 16) {
    const float amax = static_cast<float>(std::max(RefAmax(&x[b], 16), std::ldexp(6.0, -9)));
    const float s = static_cast<float>(RefNearest(grid, Fp32Div(amax, 6.0f)));
    for (size_t j = b; j < b + 16; ++j) {
      const double y = std::clamp(static_cast<double>(Fp32Div(x[j], s)), -6.0, 6.0);
      out[j] = static_cast<float>(RefNearest(kE2m1Grid, y) * s);
    }
  }
  return out;
}

std::vector<float> RefFq4B32(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    const float amax = static_cast<float>(std::max(RefAmax(&x[b], 32), std::ldexp(6.0, -126)));
    const double s = RefPow2Ceil(Fp32Mul(amax, static_cast<float>(1.0 / 6.0)));
    for (size_t j = b; j < b + 32; ++j) {
      const double y = std::clamp(x[j] / s, -6.0, 6.0);
      out[j] = static_cast<float>(RefNearest(kE2m1Grid, y) * s);
    }
  }
  return out;
}

// ---- Pow2Ceil -----------------------------------------------------------------------------------

TEST(Pow2CeilTest, IsTheLeastPowerOfTwoAtOrAbove) {
  EXPECT_EQ(Pow2Ceil(1.0f), 1.0f);
  EXPECT_EQ(Pow2Ceil(std::nextafter(1.0f, 2.0f)), 2.0f);
  EXPECT_EQ(Pow2Ceil(std::nextafter(1.0f, 0.0f)), 1.0f);
  EXPECT_EQ(Pow2Ceil(3.0f), 4.0f);
  EXPECT_EQ(Pow2Ceil(0x1p-126f), 0x1p-126f);
  EXPECT_EQ(Pow2Ceil(std::numeric_limits<float>::denorm_min()), 0x1p-126f);  // subnormal: M != 0
  EXPECT_EQ(Pow2Ceil(0x1p127f), 0x1p127f);
  EXPECT_EQ(Pow2Ceil(std::nextafter(0x1p127f, 1e38f * 4)), std::numeric_limits<float>::infinity());
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const float t = std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0x7F7FFFFFu);
    if (t == 0.0f || t < 0x1p-126f) continue;
    ASSERT_EQ(Pow2Ceil(t), static_cast<float>(RefPow2Ceil(t))) << std::hexfloat << t;
  }
}

// ---- The spec's worked examples (model.md §12.2), verbatim ------------------------------------

TEST(FakeQuantTest, Fq8WorkedExample) {
  std::vector<float> x = Block({1.0f, 0.3f, -0.01f, 0.0015f}, 32);
  FakeQuantFq8B32(x);
  ExpectBitsEq(x, Block({1.0f, 0.3125f, -0.009765625f, 0.00146484375f}, 32));
}

TEST(FakeQuantTest, Fq4B16WorkedExample) {
  std::vector<float> x = Block({1.0f, 0.5f, -0.26f, 0.05f}, 16);
  FakeQuantFq4B16E4m3(x);
  ExpectBitsEq(x, Block({1.03125f, 0.515625f, -0.2578125f, 0.0859375f}, 16));
  // The scale was 0.171875: 6 · s is the largest value.
  EXPECT_EQ(1.03125f, 6 * 0.171875f);
}

TEST(FakeQuantTest, Fq4B32WorkedExamples) {
  std::vector<float> x = Block({7.0f, 2.5f, -1.25f, 0.3f}, 32);
  FakeQuantFq4B32Pow2(x);  // s = 2: 3.5 ties up, 1.25 ties down, 0.625 -> 0.5, 0.15 -> 0
  ExpectBitsEq(x, Block({8.0f, 2.0f, -1.0f, 0.0f}, 32));
  std::vector<float> y = Block({6.0f, 3.1f}, 32);
  FakeQuantFq4B32Pow2(y);  // fp32(6 · fp32(1/6)) == 1 exactly, so s = 1 (not 2)
  ExpectBitsEq(y, Block({6.0f, 3.0f}, 32));
}

// ---- Scale rules --------------------------------------------------------------------------------

TEST(FakeQuantTest, ReciprocalConstantsAreCorrectlyRoundedFp32) {
  // fp32(1/448) and fp32(1/6): the compiler's fp32 division and the double-then-float conversion
  // (what Python's 1/448 then torch's fp32 tensor give) agree.
  EXPECT_EQ(1.0f / 448.0f, static_cast<float>(1.0 / 448.0));
  EXPECT_EQ(1.0f / 6.0f, static_cast<float>(1.0 / 6.0));
  EXPECT_EQ(1e-4f, static_cast<float>(1e-4));
}

TEST(FakeQuantTest, Fq4B16ScaleDividesBySixRatherThanMultiplying) {
  // amax = 0x1.c7fffep+2: fp32(amax / 6) = 0x1.2ffffep+0 -> e4m3 1.125, while
  // fp32(amax · fp32(1/6)) = 0x1.3p+0 = 1.1875 exactly, an e4m3 tie that would go to 1.25.
  const float amax = 0x1.c7fffep+2f;
  ASSERT_EQ(amax / 6.0f, 0x1.2ffffep+0f);
  ASSERT_EQ(amax * (1.0f / 6.0f), 0x1.3p+0f);
  std::vector<float> x = Block({amax, 1.125f, -2.25f}, 16);
  FakeQuantFq4B16E4m3(x);
  // s = 1.125: amax / s = 6.33 clamps to 6 -> 6.75; 1.125 / s = 1; -2.25 / s = -2.
  ExpectBitsEq(x, Block({6.75f, 1.125f, -2.25f}, 16));
}

TEST(FakeQuantTest, Fq4B16ScaleSaturatesAt448AndValuesClampToSix) {
  // model.md §12.7: amax / 6 > 448 clamps the scale to 448; x / s then exceeds 6 and clamps.
  std::vector<float> x = Block({3000.0f, -2900.0f, 448.0f}, 16);
  FakeQuantFq4B16E4m3(x);
  ExpectBitsEq(x, Block({2688.0f, -2688.0f, 448.0f}, 16));
}

TEST(FakeQuantTest, Fq4B16ClampsWhenScaleRoundsDown) {
  // amax = 6.36: amax / 6 = 1.06 -> e4m3 1.0 (below amax / 6), so amax / s = 6.36 > 6 -> 6.
  std::vector<float> x = Block({6.36f, -6.36f, 6.0f}, 16);
  FakeQuantFq4B16E4m3(x);
  ExpectBitsEq(x, Block({6.0f, -6.0f, 6.0f}, 16));
}

TEST(FakeQuantTest, Pow2ScalesAreTheSameWhetherMultipliedOrDivided) {
  // For fq8 (1/448) and fq4_b32 (1/6) the spec multiplies by the fp32 reciprocal. For these two
  // constants and every fp32 mantissa, pow2ceil of the product equals pow2ceil of the true fp32
  // quotient, so the distinction cannot show (unlike fq4_b16's e4m3 scale). One binade suffices:
  // both roundings are scale invariant away from subnormals.
  for (const float limit : {448.0f, 6.0f}) {
    const float inverse = 1.0f / limit;
    for (uint32_t bits = Bits(1.0f); bits < Bits(2.0f); ++bits) {
      const float amax = std::bit_cast<float>(bits);
      ASSERT_EQ(Pow2Ceil(amax * inverse), Pow2Ceil(amax / limit)) << std::hexfloat << amax;
    }
  }
}

// ---- Floors, zeros, signs -----------------------------------------------------------------------

TEST(FakeQuantTest, ZeroBlocksStayZeroWithSignsKept) {
  std::vector<float> a(32, 0.0f), b(16, 0.0f), c(32, 0.0f);
  a[3] = b[3] = c[3] = -0.0f;
  FakeQuantFq8B32(a);
  FakeQuantFq4B16E4m3(b);
  FakeQuantFq4B32Pow2(c);
  for (const auto* v : {&a, &b, &c}) {
    for (size_t i = 0; i < v->size(); ++i) {
      EXPECT_EQ(Bits((*v)[i]), Bits(i == 3 ? -0.0f : 0.0f)) << i;
    }
  }
}

TEST(FakeQuantTest, AmaxFloorsSetTheSmallestScale) {
  // fq8: amax floor 1e-4 -> s = pow2ceil(1e-4 · fp32(1/448)) = 2^-22; 1e-6 / 2^-22 = 4.19 -> 4.
  std::vector<float> a = Block({1e-6f}, 32);
  FakeQuantFq8B32(a);
  EXPECT_EQ(a[0], 4 * 0x1p-22f);
  // fq4_b16: floor 6·2^-9 -> s = 2^-9 (e4m3's smallest); 1.2 -> 1, -1.25 ties down to -1, 0.2 -> 0.
  std::vector<float> b = Block({1.2f * 0x1p-9f, -1.25f * 0x1p-9f, 0.2f * 0x1p-9f}, 16);
  FakeQuantFq4B16E4m3(b);
  ExpectBitsEq(b, Block({0x1p-9f, -0x1p-9f, 0.0f}, 16));
  // fq4_b32: floor 6·2^-126 -> fp32(6·2^-126 · fp32(1/6)) = 2^-126 exactly -> s = 2^-126.
  std::vector<float> c = Block({0x1p-130f, 3.5f * 0x1p-126f, -0x1p-149f}, 32);
  FakeQuantFq4B32Pow2(c);
  ExpectBitsEq(c, Block({0.0f, 4 * 0x1p-126f, -0.0f}, 32));
}

TEST(FakeQuantTest, Fq8HandlesSubnormalCodesAndTies) {
  // amax 448 -> s = 1: e4m3 directly. 2^-10 ties to 0 (even), 3·2^-10 to 2·2^-9, 1.0625 to 1.
  std::vector<float> x = Block({448.0f, 0x1p-10f, -3 * 0x1p-10f, 1.0625f, 1.1875f, -0x1p-11f}, 32);
  FakeQuantFq8B32(x);
  ExpectBitsEq(x, Block({448.0f, 0.0f, -2 * 0x1p-9f, 1.0f, 1.25f, -0.0f}, 32));
}

TEST(FakeQuantTest, BlocksAreIndependent) {
  std::vector<float> x(64, 0.0f);
  x[0] = 1000.0f;  // block 0: s = 4
  x[1] = 1.0f;     // 0.25 · 4 -> e4m3(0.25) = 0.25 -> 1.0
  x[32] = 1.0f;    // block 1: s = 2^-8, exact
  x[33] = 0.3f;
  FakeQuantFq8B32(x);
  EXPECT_EQ(x[0], 1024.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[32], 1.0f);
  EXPECT_EQ(x[33], 0.3125f);
}

// ---- Activation quantisation (§12.3) ---------------------------------------------------------

TEST(ActivationQuantTest, WorkedExampleCodesAndScale) {
  const std::vector<float> x = Block({1.0f, 0.3f, -0.01f, 0.0015f}, 64);
  std::vector<uint8_t> codes(64);
  std::vector<float> scales(2);
  QuantizeActivationFq8B32(x, codes, scales);
  EXPECT_EQ(scales[0], 0x1p-8f);
  EXPECT_EQ(scales[1], 0x1p-22f);  // an all-zero block: the 1e-4 floor
  EXPECT_EQ(codes[0], 0x78);       // 256
  EXPECT_EQ(codes[1], 0x6A);       // 80
  EXPECT_EQ(codes[2], 0xC2);       // -2.5
  EXPECT_EQ(codes[3], 0x2C);       // 0.375
  for (size_t i = 4; i < 64; ++i) EXPECT_EQ(codes[i], 0x00) << i;
  std::vector<float> out(64);
  DequantizeActivationFq8B32(codes, scales, out);
  ExpectBitsEq(out, Block({1.0f, 0.3125f, -0.009765625f, 0.00146484375f}, 64));
}

// ---- Activation outliers (trap R5) ----------------------------------------------------------

// Rows of the released hidden width (5120 = 160 blocks) holding bf16 values of ordinary size
// (|x| ~ 0.01..3) with one outlier channel of 1e3..1e4 (100-1000x the rest), as real activations
// have: in the outlier's block the scale follows the outlier (2^1..2^5), the small values fall to
// e4m3 subnormals or to zero, and the outlier itself is represented without clipping. Codes,
// scales and dequantised values equal the slow reference bit for bit; every other block keeps its
// own scale. A floor-log2 scale (2^floor instead of the ceiling) clips the outlier to 448·s.
TEST(ActivationQuantTest, OutlierChannelSetsItsBlockScaleLikeTheReference) {
  constexpr size_t kWidth = 5120;
  constexpr size_t kOutlierChannel = 1234;  // block 38, lane 18
  std::mt19937 rng(1000);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> magnitude(1e3f, 1e4f), row_scale(0.01f, 3.0f);
  int64_t zeroed = 0, subnormal_codes = 0;
  for (int row = 0; row < 64; ++row) {
    std::vector<float> x(kWidth);
    const float scale = row_scale(rng);
    for (float& v : x) v = Bf16Round(normal(rng) * scale);
    const float outlier = Bf16Round((row % 2 ? -1.0f : 1.0f) * magnitude(rng));
    x[kOutlierChannel] = outlier;
    if (row % 8 == 0) x[kOutlierChannel + 64] = -outlier;  // a second outlier block in some rows
    if (row % 8 == 1) {  // the 1e-4 amax floor: 1e-6 down to 1e-10, the smaller on subnormals
      for (int j = 0; j < 32; ++j) x[j] = Bf16Round((j % 2 ? -1e-6f : 1e-6f) * std::pow(0.75f, j));
    }

    std::vector<uint8_t> codes(kWidth);
    std::vector<float> scales(kWidth / 32), deq(kWidth);
    QuantizeActivationFq8B32(x, codes, scales);
    DequantizeActivationFq8B32(codes, scales, deq);
    const std::vector<float> want = RefFq8(x);
    for (size_t i = 0; i < kWidth; ++i) {
      ASSERT_EQ(Bits(deq[i]), Bits(want[i])) << "row " << row << " channel " << i << " x " << x[i];
    }
    std::vector<float> fq = x;
    FakeQuantFq8B32(fq);
    ExpectBitsEq(fq, want);

    const size_t block = kOutlierChannel / 32;
    const double amax = RefAmax(&x[block * 32], 32);
    const double s = RefPow2Ceil(Fp32Mul(static_cast<float>(amax), static_cast<float>(1.0 / 448)));
    ASSERT_EQ(static_cast<double>(scales[block]), s) << "row " << row;
    EXPECT_GE(448.0 * s, std::fabs(outlier));  // no clipping: ceil, not floor
    EXPECT_LE(std::fabs(deq[kOutlierChannel] - outlier), std::fabs(outlier) / 16);  // half an ulp
    for (size_t j = block * 32; j < block * 32 + 32; ++j) {
      if (j == kOutlierChannel) continue;
      zeroed += (x[j] != 0.0f && deq[j] == 0.0f) ? 1 : 0;
      subnormal_codes += (codes[j] & 0x78) == 0 && (codes[j] & 0x07) != 0 ? 1 : 0;
    }
    // A neighbouring block is untouched by the outlier: its scale is its own.
    const double neighbour_amax = RefAmax(&x[(block + 1) * 32], 32);
    EXPECT_LT(static_cast<double>(scales[block + 1]), s);
    EXPECT_GE(448.0 * scales[block + 1], neighbour_amax);
    if (row % 8 == 1) {
      EXPECT_EQ(scales[0], 0x1p-22f);
    }  // max(1e-6, 1e-4) · fp32(1/448) → 2^-22
  }
  EXPECT_GT(zeroed, 0);           // small values below half the smallest subnormal step vanish
  EXPECT_GT(subnormal_codes, 0);  // and others land on e4m3 subnormals
}

// ---- Randomised comparison with the slow reference -------------------------------------------

// Blocks mixing magnitudes over many decades, exact grid ties and zeros.
std::vector<float> RandomBlocks(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-6.0f, 3.0f);
  std::uniform_int_distribution<int> kind(0, 9), small(-16, 16), exp(-12, 4);
  std::vector<float> x(n);
  float block_scale = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % 16 == 0) block_scale = std::pow(10.0f, decade(rng));
    switch (kind(rng)) {
      case 0:
        x[i] = 0.0f;
        break;
      case 1:
        x[i] = std::ldexp(static_cast<float>(small(rng)) / 4.0f, exp(rng));
        break;  // ties
      case 2:
        x[i] = -0.0f;
        break;
      default:
        x[i] = normal(rng) * block_scale;
    }
  }
  return x;
}

TEST(FakeQuantTest, MatchesSlowReferenceOnRandomBlocks) {
  std::mt19937 rng(2024);
  for (int round = 0; round < 2000; ++round) {
    const std::vector<float> x = RandomBlocks(rng, 64);
    std::vector<float> a = x, b = x, c = x;
    FakeQuantFq8B32(a);
    FakeQuantFq4B16E4m3(b);
    FakeQuantFq4B32Pow2(c);
    const std::vector<float> ra = RefFq8(x), rb = RefFq4B16(x), rc = RefFq4B32(x);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(Bits(a[i]), Bits(ra[i])) << "fq8 round " << round << " i " << i << " x " << x[i];
      ASSERT_EQ(Bits(b[i]), Bits(rb[i]))
          << "fq4_b16 round " << round << " i " << i << " x " << x[i];
      ASSERT_EQ(Bits(c[i]), Bits(rc[i]))
          << "fq4_b32 round " << round << " i " << i << " x " << x[i];
      // Every output is exact in bf16 (model.md §12.6).
      ASSERT_EQ(Bf16Round(a[i]), a[i]);
      ASSERT_EQ(Bf16Round(b[i]), b[i]);
      ASSERT_EQ(Bf16Round(c[i]), c[i]);
    }
    std::vector<uint8_t> codes(64);
    std::vector<float> scales(2), deq(64);
    QuantizeActivationFq8B32(x, codes, scales);
    DequantizeActivationFq8B32(codes, scales, deq);
    ExpectBitsEq(deq, a);
  }
}

TEST(FakeQuantTest, IsIdempotent) {
  // A fake-quantised block quantises to itself (same amax or a smaller one with the same scale).
  std::mt19937 rng(99);
  for (int round = 0; round < 500; ++round) {
    std::vector<float> a = RandomBlocks(rng, 32), c = a, b(a.begin(), a.begin() + 16);
    FakeQuantFq8B32(a);
    FakeQuantFq4B32Pow2(c);
    std::vector<float> a2 = a, c2 = c;
    FakeQuantFq8B32(a2);
    FakeQuantFq4B32Pow2(c2);
    ExpectBitsEq(a2, a);
    ExpectBitsEq(c2, c);
  }
}

TEST(FakeQuantDeathTest, RejectsLengthsThatAreNotBlockMultiples) {
  std::vector<float> x(48);
  EXPECT_DEATH(FakeQuantFq8B32(x), "fq8_b32 length 48");
  EXPECT_DEATH(FakeQuantFq4B32Pow2(x), "fq4_b32 length 48");
  std::vector<float> y(24);
  EXPECT_DEATH(FakeQuantFq4B16E4m3(y), "fq4_b16 length 24");
}

}  // namespace
}  // namespace dsv41

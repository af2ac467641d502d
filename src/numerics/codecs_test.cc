#include "numerics/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace dsv41 {
namespace {

// ---- Independent reference: decode from the format definitions with ldexp, encode by searching
// the sorted table of finite non-negative values for the nearest one. Nothing here shares code
// with codecs.cc.

struct MiniFormat {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  bool ieee_specials;  // all-ones exponent is inf/NaN (bf16, fp16); else only e4m3fn's S.1111.111
};

constexpr MiniFormat kBf16{"bf16", 8, 7, 127, true};
constexpr MiniFormat kF16{"fp16", 5, 10, 15, true};
constexpr MiniFormat kE4m3{"e4m3", 4, 3, 7, false};
constexpr MiniFormat kE2m1{"e2m1", 2, 1, 1, false};

int NumCodes(const MiniFormat& f) { return 1 << (1 + f.exp_bits + f.man_bits); }

bool RefIsNan(const MiniFormat& f, uint32_t code) {
  const uint32_t mag = code & ((1u << (f.exp_bits + f.man_bits)) - 1);
  const uint32_t exp_ones = (1u << f.exp_bits) - 1;
  if (f.ieee_specials) return (mag >> f.man_bits) == exp_ones && (mag & ((1u << f.man_bits) - 1));
  if (f.exp_bits == 4) return mag == 0x7F;  // e4m3fn
  return false;                             // e2m1 has no NaN
}

double RefDecode(const MiniFormat& f, uint32_t code) {
  const bool negative = (code >> (f.exp_bits + f.man_bits)) & 1;
  const int e = static_cast<int>((code >> f.man_bits) & ((1u << f.exp_bits) - 1));
  const int m = static_cast<int>(code & ((1u << f.man_bits) - 1));
  if (RefIsNan(f, code)) return std::numeric_limits<double>::quiet_NaN();
  double v;
  if (f.ieee_specials && e == (1 << f.exp_bits) - 1) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(m + (1 << f.man_bits)), e - f.bias - f.man_bits);
  }
  return negative ? -v : v;
}

// Finite non-negative values in increasing order, with their codes.
struct Grid {
  std::vector<double> value;
  std::vector<uint32_t> code;
};

Grid MakeGrid(const MiniFormat& f) {
  Grid g;
  const uint32_t half = static_cast<uint32_t>(NumCodes(f) / 2);
  for (uint32_t c = 0; c < half; ++c) {
    const double v = RefDecode(f, c);
    if (std::isfinite(v)) {
      g.value.push_back(v);
      g.code.push_back(c);
    }
  }
  // Codes of a sign-magnitude format increase with their value; check that premise.
  EXPECT_TRUE(std::is_sorted(g.value.begin(), g.value.end())) << f.name;
  return g;
}

// The reference encoder: nearest grid value, ties to the even code. Beyond the largest finite
// value: `saturate` clamps; otherwise IEEE overflow (at or above max + half an ulp -> infinity,
// whose code is the one after the largest finite code).
uint32_t RefEncode(const MiniFormat& f, const Grid& g, float x, bool saturate) {
  const uint32_t sign = std::signbit(x) ? (1u << (f.exp_bits + f.man_bits)) : 0u;
  const double a = std::fabs(static_cast<double>(x));
  const double max = g.value.back();
  if (a > max) {
    if (saturate) return sign | g.code.back();
    const double ulp = max - g.value[g.value.size() - 2];
    if (a >= max + ulp / 2) return sign | (g.code.back() + 1);
    return sign | g.code.back();
  }
  const size_t hi = std::lower_bound(g.value.begin(), g.value.end(), a) - g.value.begin();
  if (g.value[hi] == a) return sign | g.code[hi];
  const size_t lo = hi - 1;
  // Compare 2a with lo + hi: both exact in double for adjacent grid values.
  const double twice = 2 * a, sum = g.value[lo] + g.value[hi];
  size_t pick;
  if (twice < sum) {
    pick = lo;
  } else if (twice > sum) {
    pick = hi;
  } else {
    pick = (g.code[lo] & 1u) == 0 ? lo : hi;
  }
  return sign | g.code[pick];
}

uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }

// ---- Decoders: every code --------------------------------------------------------------------

TEST(CodecsTest, E4m3DecodesEveryCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const double want = RefDecode(kE4m3, c);
    const float got = F32FromE4m3(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
    } else {
      EXPECT_EQ(Bits(got), Bits(static_cast<float>(want))) << "code " << c;
    }
  }
  EXPECT_EQ(F32FromE4m3(0x7E), 448.0f);
  EXPECT_EQ(F32FromE4m3(0xFE), -448.0f);
  EXPECT_EQ(F32FromE4m3(0x01), 0x1p-9f);
  EXPECT_EQ(F32FromE4m3(0x08), 0x1p-6f);
  EXPECT_EQ(Bits(F32FromE4m3(0x80)), Bits(-0.0f));
  EXPECT_TRUE(std::isnan(F32FromE4m3(0x7F)));
  EXPECT_TRUE(std::isnan(F32FromE4m3(0xFF)));
  // 0x78 (exponent all ones, mantissa 0) is an ordinary finite value in e4m3fn.
  EXPECT_EQ(F32FromE4m3(0x78), 256.0f);
}

TEST(CodecsTest, E8m0DecodesEveryCode) {
  for (int b = 0; b < 255; ++b) {
    const float got = F32FromE8m0(static_cast<uint8_t>(b));
    EXPECT_EQ(static_cast<double>(got), std::ldexp(1.0, b - 127)) << "byte " << b;
  }
  EXPECT_TRUE(std::isnan(F32FromE8m0(0xFF)));
  EXPECT_EQ(Bits(F32FromE8m0(0)), 0x00400000u);  // 2^-127, an fp32 subnormal
  EXPECT_EQ(F32FromE8m0(127), 1.0f);
  EXPECT_EQ(F32FromE8m0(254), 0x1p127f);
}

TEST(CodecsTest, E2m1DecodesEveryCode) {
  const float magnitudes[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint32_t c = 0; c < 16; ++c) {
    const float want = (c & 8) ? -magnitudes[c & 7] : magnitudes[c & 7];
    EXPECT_EQ(Bits(F32FromE2m1(static_cast<uint8_t>(c))), Bits(want)) << "code " << c;
    EXPECT_EQ(static_cast<double>(F32FromE2m1(static_cast<uint8_t>(c))), RefDecode(kE2m1, c));
  }
  EXPECT_EQ(Bits(F32FromE2m1(0x8)), Bits(-0.0f));
}

TEST(CodecsTest, Bf16AndF16DecodeEveryCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    for (const MiniFormat* f : {&kBf16, &kF16}) {
      const double want = RefDecode(*f, c);
      const float got = f == &kBf16 ? F32FromBf16(static_cast<uint16_t>(c))
                                    : F32FromF16(static_cast<uint16_t>(c));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << f->name << " code " << c;
      } else {
        ASSERT_EQ(Bits(got), Bits(static_cast<float>(want))) << f->name << " code " << c;
      }
    }
  }
}

// ---- Encoders: every code round-trips ---------------------------------------------------------

TEST(CodecsTest, EveryCodeRoundTrips) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t code = static_cast<uint16_t>(c);
    if (RefIsNan(kBf16, c)) {
      const uint16_t back = Bf16FromF32(F32FromBf16(code));
      EXPECT_TRUE(RefIsNan(kBf16, back) && (back & 0x0040)) << "bf16 NaN " << c;  // quiet
    } else {
      ASSERT_EQ(Bf16FromF32(F32FromBf16(code)), code) << "bf16 " << c;
    }
    if (RefIsNan(kF16, c)) {
      const uint16_t back = F16FromF32(F32FromF16(code));
      EXPECT_TRUE(RefIsNan(kF16, back) && (back & 0x0200)) << "fp16 NaN " << c;
      EXPECT_EQ(back & 0x8000, c & 0x8000);
    } else {
      ASSERT_EQ(F16FromF32(F32FromF16(code)), code) << "fp16 " << c;
    }
  }
  for (uint32_t c = 0; c < 256; ++c) {
    EXPECT_EQ(E4m3FromF32(F32FromE4m3(static_cast<uint8_t>(c))), c) << "e4m3 " << c;
  }
  for (uint32_t c = 0; c < 16; ++c) {
    EXPECT_EQ(E2m1FromF32(F32FromE2m1(static_cast<uint8_t>(c))), c) << "e2m1 " << c;
  }
}

// ---- Encoders: every midpoint between adjacent codes, and its two fp32 neighbours -------------

// For each pair of adjacent finite grid values (and the overflow boundary), checks the midpoint
// and the fp32 values just below and above it, both signs, against the reference encoder.
template <typename Encode>
void CheckMidpoints(const MiniFormat& f, Encode encode, bool saturate) {
  const Grid g = MakeGrid(f);
  std::vector<double> midpoints;
  for (size_t i = 0; i + 1 < g.value.size(); ++i)
    midpoints.push_back((g.value[i] + g.value[i + 1]) / 2);
  const double max = g.value.back();
  midpoints.push_back(max + (max - g.value[g.value.size() - 2]) / 2);  // overflow boundary
  int ties = 0;
  for (const double mid : midpoints) {
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid) << f.name << ": midpoint not exact in fp32";
    const float probes[3] = {std::nextafter(m, 0.0f), m, std::nextafter(m, 1e30f)};
    for (const float p : probes) {
      for (const float x : {p, -p}) {
        ASSERT_EQ(encode(x), RefEncode(f, g, x, saturate)) << f.name << " x=" << x;
      }
    }
    ++ties;
  }
  EXPECT_GT(ties, 0);
}

TEST(CodecsTest, Bf16MidpointsRoundToEven) {
  CheckMidpoints(
      kBf16, [](float x) { return uint32_t{Bf16FromF32(x)}; }, false);
  // Hand examples: 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7 (even: 1); 1 + 3·2^-8 goes up.
  EXPECT_EQ(Bf16FromF32(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(Bf16FromF32(1.0f + 3 * 0x1p-8f), 0x3F82);
  EXPECT_EQ(Bf16FromF32(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  EXPECT_EQ(Bf16FromF32(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(Bf16FromF32(-0.0f), 0x8000);
  EXPECT_EQ(Bf16FromF32(std::bit_cast<float>(0x7F800001u)), 0x7FC0);  // signalling -> quiet
  EXPECT_EQ(Bf16FromF32(std::bit_cast<float>(0xFFC00000u)), 0xFFC0);
  EXPECT_EQ(Bf16FromF32(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie up to even
  EXPECT_EQ(Bf16Round(1.00390625f), 1.0f);
  EXPECT_EQ(Bf16Round(3.14159265f), 3.140625f);
}

TEST(CodecsTest, F16MidpointsRoundToEven) {
  CheckMidpoints(
      kF16, [](float x) { return uint32_t{F16FromF32(x)}; }, false);
  EXPECT_EQ(F16FromF32(65504.0f), 0x7BFF);
  EXPECT_EQ(F16FromF32(65519.996f), 0x7BFF);
  EXPECT_EQ(F16FromF32(65520.0f), 0x7C00);  // the overflow tie goes to "even" infinity
  EXPECT_EQ(F16FromF32(0x1p-24f), 0x0001);
  EXPECT_EQ(F16FromF32(0x1p-25f), 0x0000);  // tie with 0: even
  EXPECT_EQ(F16FromF32(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(F16FromF32(3 * 0x1p-25f), 0x0002);  // tie 1|2: even
  EXPECT_EQ(F16FromF32(-0x1p-30f), 0x8000);
  EXPECT_EQ(F16FromF32(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(F16FromF32(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(F16FromF32(std::bit_cast<float>(0xFF800001u)) & 0xFE00, 0xFE00);
}

TEST(CodecsTest, E4m3MidpointsRoundToEvenAndSaturate) {
  CheckMidpoints(
      kE4m3, [](float x) { return uint32_t{E4m3FromF32(x)}; }, true);
  EXPECT_EQ(E4m3FromF32(448.0f), 0x7E);
  EXPECT_EQ(E4m3FromF32(464.0f), 0x7E);  // midpoint 448|480: even mantissa 448
  EXPECT_EQ(E4m3FromF32(479.0f), 0x7E);
  EXPECT_EQ(E4m3FromF32(480.0f), 0x7E);  // saturates (torch's cast would give NaN here)
  EXPECT_EQ(E4m3FromF32(1e30f), 0x7E);
  EXPECT_EQ(E4m3FromF32(-1e30f), 0xFE);
  EXPECT_EQ(E4m3FromF32(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(E4m3FromF32(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(E4m3FromF32(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(E4m3FromF32(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(E4m3FromF32(-0.0f), 0x80);
  EXPECT_EQ(E4m3FromF32(0x1p-9f), 0x01);        // smallest subnormal
  EXPECT_EQ(E4m3FromF32(0x1p-10f), 0x00);       // tie 0|2^-9: even (0)
  EXPECT_EQ(E4m3FromF32(-0x1p-10f), 0x80);      // keeps the sign
  EXPECT_EQ(E4m3FromF32(3 * 0x1p-10f), 0x02);   // tie 1|2 (×2^-9): even code
  EXPECT_EQ(E4m3FromF32(15 * 0x1p-10f), 0x08);  // tie 7·2^-9 | 2^-6: even code (smallest normal)
  EXPECT_EQ(E4m3FromF32(1.0625f), 0x38);        // tie 1|1.125: even mantissa (1.0)
  EXPECT_EQ(E4m3FromF32(1.1875f), 0x3A);        // tie 1.125|1.25: even mantissa (1.25)
}

TEST(CodecsTest, E2m1TiesFollowTheSpec) {
  CheckMidpoints(
      kE2m1, [](float x) { return uint32_t{E2m1FromF32(x)}; }, true);
  // model.md §12.1: ties at 0.25, 1.25, 2.5, 5 round down; at 0.75, 1.75, 3.5 round up.
  EXPECT_EQ(F32FromE2m1(E2m1FromF32(0.25f)), 0.0f);
  EXPECT_EQ(F32FromE2m1(E2m1FromF32(1.25f)), 1.0f);
  EXPECT_EQ(F32FromE2m1(E2m1FromF32(2.5f)), 2.0f);
  EXPECT_EQ(F32FromE2m1(E2m1FromF32(5.0f)), 4.0f);
  EXPECT_EQ(F32FromE2m1(E2m1FromF32(0.75f)), 1.0f);
  EXPECT_EQ(F32FromE2m1(E2m1FromF32(1.75f)), 2.0f);
  EXPECT_EQ(F32FromE2m1(E2m1FromF32(3.5f)), 4.0f);
  EXPECT_EQ(F32FromE2m1(E2m1FromF32(-3.5f)), -4.0f);
  EXPECT_EQ(E2m1FromF32(6.0f), 0x7);
  EXPECT_EQ(E2m1FromF32(7.0f), 0x7);  // saturates
  EXPECT_EQ(E2m1FromF32(1e30f), 0x7);
  EXPECT_EQ(E2m1FromF32(-std::numeric_limits<float>::infinity()), 0xF);
  EXPECT_EQ(E2m1FromF32(-0.0f), 0x8);
  EXPECT_EQ(E2m1FromF32(-0.1f), 0x8);  // rounds to -0, sign kept
  EXPECT_EQ(E2m1FromF32(std::numeric_limits<float>::quiet_NaN()), 0x0);
  EXPECT_EQ(E2m1FromF32(std::numeric_limits<float>::denorm_min()), 0x0);
}

// ---- Encoders: random and swept fp32 inputs against the reference ------------------------------

TEST(CodecsTest, EncodersMatchReferenceOnRandomAndSweptInputs) {
  const Grid bf16 = MakeGrid(kBf16), f16 = MakeGrid(kF16), e4m3 = MakeGrid(kE4m3),
             e2m1 = MakeGrid(kE2m1);
  std::mt19937 rng(12345);
  auto check = [&](float x) {
    if (std::isnan(x)) return;
    ASSERT_EQ(Bf16FromF32(x), RefEncode(kBf16, bf16, x, false)) << std::hexfloat << x;
    ASSERT_EQ(F16FromF32(x), RefEncode(kF16, f16, x, false)) << std::hexfloat << x;
    ASSERT_EQ(E4m3FromF32(x), RefEncode(kE4m3, e4m3, x, true)) << std::hexfloat << x;
    ASSERT_EQ(E2m1FromF32(x), RefEncode(kE2m1, e2m1, x, true)) << std::hexfloat << x;
  };
  // Uniform over all fp32 bit patterns.
  for (int i = 0; i < 200000; ++i) check(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // Every fp32 in the binades that matter (2^-27 .. 2^17), strided so each binade gets ~10^4
  // values including those with few mantissa bits set.
  for (uint32_t bits = Bits(0x1p-27f); bits < Bits(0x1p17f); bits += 997) {
    check(std::bit_cast<float>(bits));
    check(-std::bit_cast<float>(bits));
  }
  // Values with short mantissas (likely exact ties of some format) near every binade.
  for (int e = -30; e <= 20; ++e) {
    for (int m = 0; m < 4096; ++m) check(std::ldexp(1.0f + m / 4096.0f, e));
  }
}

// ---- Encoders against a closed-form double oracle, 2^24 samples and whole binades (trap R6) -----

// e4m3fn encoding written from §12.1 in double: the quantum of |x|'s binade (2^(e−3), and 2^-9
// below the smallest normal 2^-6), q = nearbyint(|x| / quantum) (round half to even: the process
// rounding mode is never changed), saturating at 448 (so 464, the 448|480 midpoint, and
// everything above give 448). Returns the decoded value with x's sign.
double OracleE4m3Value(float x) {
  const double a = std::fabs(static_cast<double>(x));
  double v;
  if (a >= 448.0) {
    v = 448.0;
  } else {
    int e;
    std::frexp(a, &e);  // a = f · 2^e, f in [0.5, 1): the binade is 2^(e−1)
    const double quantum = a < 0x1p-6 ? 0x1p-9 : std::ldexp(1.0, e - 1 - 3);
    v = std::min(std::nearbyint(a / quantum) * quantum, 448.0);
  }
  return std::signbit(x) ? -v : v;
}

// e2m1 the same way: quantum 0.5 below 2, 1 in [2, 4), 2 in [4, 8), saturating at 6.
double OracleE2m1Value(float x) {
  const double a = std::fabs(static_cast<double>(x));
  const double quantum = a < 2 ? 0.5 : a < 4 ? 1.0 : 2.0;
  const double v = std::min(std::nearbyint(a / quantum) * quantum, 6.0);
  return std::signbit(x) ? -v : v;
}

// Checks one input: the code decodes to the oracle's value with the input's sign (−0 included).
void CheckNarrowEncoders(float x) {
  const float e4m3 = F32FromE4m3(E4m3FromF32(x));
  ASSERT_EQ(Bits(e4m3), Bits(static_cast<float>(OracleE4m3Value(x)))) << std::hexfloat << x;
  const float e2m1 = F32FromE2m1(E2m1FromF32(x));
  ASSERT_EQ(Bits(e2m1), Bits(static_cast<float>(OracleE2m1Value(x)))) << std::hexfloat << x;
}

TEST(CodecsTest, NarrowEncodersMatchTheDoubleOracleOn2To24SamplesAndWholeBinades) {
  // 2^24 fp32 values uniform over the bit patterns of (0, 1024], both signs: every binade of the
  // e4m3 range (subnormals, saturation, e2m1's whole range) and beyond it.
  std::mt19937 rng(224);
  std::uniform_int_distribution<uint32_t> bits(1, Bits(1024.0f));
  for (int i = 0; i < (1 << 24); ++i) {
    const uint32_t b = bits(rng) | (i % 2 ? 0x80000000u : 0u);
    CheckNarrowEncoders(std::bit_cast<float>(b));
    if (HasFatalFailure()) return;
  }
  // Every fp32 of the binades where the rules change: [2^-10, 2^-9) (zero vs the smallest
  // subnormal), [2^-7, 2^-6) (the last subnormals and the tie with the smallest normal),
  // [256, 512) (the top binade: 448, the 464 tie, saturation) and [4, 8) (e2m1's 5 tie, its
  // saturation at 6).
  for (const auto& [lo, hi] : {std::pair{0x1p-10f, 0x1p-9f}, std::pair{0x1p-7f, 0x1p-6f},
                               std::pair{256.0f, 512.0f}, std::pair{4.0f, 8.0f}}) {
    for (uint32_t b = Bits(lo); b < Bits(hi); ++b) {
      CheckNarrowEncoders(std::bit_cast<float>(b));
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CodecsTest, E4m3SaturationBoundariesAndNonFinites) {
  // Around 448, the 464 midpoint and 480 (torch's NaN threshold): all give 448, never NaN.
  for (const float x : {448.0f, std::nextafter(448.0f, 0.0f), std::nextafter(448.0f, 1e9f),
                        std::nextafter(464.0f, 0.0f), 464.0f, std::nextafter(464.0f, 1e9f),
                        std::nextafter(480.0f, 0.0f), 480.0f, std::nextafter(480.0f, 1e9f), 512.0f,
                        std::numeric_limits<float>::max()}) {
    EXPECT_EQ(E4m3FromF32(x), 0x7E) << std::hexfloat << x;
    EXPECT_EQ(E4m3FromF32(-x), 0xFE) << std::hexfloat << x;
  }
  // Just below 448: the 416|448 midpoint 432 ties to the even mantissa (448 = 1.75·2^8, 416 =
  // 1.625·2^8), anything below it goes to 416.
  EXPECT_EQ(F32FromE4m3(E4m3FromF32(432.0f)), 448.0f);
  EXPECT_EQ(F32FromE4m3(E4m3FromF32(std::nextafter(432.0f, 0.0f))), 416.0f);
  // Every NaN payload (sampled), both signs, gives the NaN code of its sign; never a number.
  for (uint32_t payload = 1; payload < 0x00800000u; payload += 4093) {
    for (const uint32_t sign : {0u, 0x80000000u}) {
      const float nan = std::bit_cast<float>(sign | 0x7F800000u | payload);
      ASSERT_EQ(E4m3FromF32(nan), sign ? 0xFF : 0x7F) << std::hex << payload;
      ASSERT_TRUE(std::isnan(F32FromE4m3(E4m3FromF32(nan))));
    }
  }
}

TEST(CodecsTest, Mxfp4PackingPutsEvenElementInLowNibble) {
  EXPECT_EQ(PackE2m1Pair(0x1, 0xA), 0xA1);
  const uint8_t packed[2] = {0xA1, 0x7F};
  EXPECT_EQ(E2m1CodeAt(packed, 0), 0x1);
  EXPECT_EQ(E2m1CodeAt(packed, 1), 0xA);
  EXPECT_EQ(E2m1CodeAt(packed, 2), 0xF);
  EXPECT_EQ(E2m1CodeAt(packed, 3), 0x7);
  EXPECT_EQ(F32FromE2m1(E2m1CodeAt(packed, 1)), -1.0f);
  EXPECT_EQ(PackE2m1Pair(0xF3, 0x12), 0x23);  // only the low nibbles count
}

}  // namespace
}  // namespace dsv41

#include "numerics/codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
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

#include "model/mhc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/head.h"
#include "model/norm.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

std::vector<std::byte> Bf16Bytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = Bf16FromF32(values[i]);
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
  }
  return bytes;
}

std::vector<std::byte> F32Bytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST(RmsNormTest, ScalesByInverseRootMeanSquareThenWeight) {
  // mean(x²) = 4, r = 1/2 exactly; y = w·(x·r).
  const std::vector<float> x = {2.0f, -2.0f, 2.0f, 2.0f};
  const std::vector<std::byte> w = Bf16Bytes({0.5f, 1.5f, -2.0f, 3.0f});
  std::vector<float> y(4);
  RmsNorm(x, NormWeight{w}, 1e-20f, y);
  EXPECT_EQ(y, (std::vector<float>{0.5f, -1.5f, -2.0f, 3.0f}));
}

TEST(RmsNormTest, RoundsOutputToBf16) {
  // mean(x²) = 1, r = 1: y = bf16(w·x) with w = 1 + 2^-7 (a bf16 value) stays exact.
  const std::vector<float> x = {1.0f, -1.0f};
  std::vector<float> y(2);
  RmsNorm(x, NormWeight{Bf16Bytes({1.0078125f, 1.0f})}, 0.0f, y);
  EXPECT_EQ(y, (std::vector<float>{1.0078125f, -1.0f}));
  // x = 1 + 2^-9 twice: mean(x²) = 1 + 2^-8 + 2^-18 (exact in fp32), x·r = 1 − ε, not a bf16
  // value; the output is rounded to bf16, giving 1.
  const float a = 1.0f + std::ldexp(1.0f, -9);
  const std::vector<float> x2 = {a, a};
  RmsNorm(x2, NormWeight{Bf16Bytes({1.0f, 1.0f})}, 0.0f, y);
  EXPECT_EQ(y, (std::vector<float>{1.0f, 1.0f}));
}

TEST(RmsNormTest, InPlaceMatchesOutOfPlace) {
  std::vector<float> x = {0.25f, -3.5f, 7.0f, 0.125f, 1.0f, -0.5f};
  const std::vector<std::byte> w = Bf16Bytes({1.0f, 0.75f, -1.25f});
  std::vector<float> y(6);
  RmsNormRows(x, 2, NormWeight{w}, 1e-20f, y);
  RmsNormRows(x, 2, NormWeight{w}, 1e-20f, x);
  EXPECT_EQ(x, y);
}

TEST(HcPreTest, OneHotSelectsStreamZero) {
  const std::vector<float> x = {1.5f, -2.0f, 9.0f, 9.0f, 8.0f, 8.0f, 7.0f, 7.0f};
  const std::vector<float> pi = {1.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> out(2);
  HcPre(x, pi, out);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f}));
}

TEST(HcPreTest, SumsInStreamOrderThenRoundsOnceToBf16) {
  // Products 2^24, 1, −2^24, 1. In stream order: 2^24 + 1 rounds to 2^24 (tie to even), then 0,
  // then 1. An exact sum (or the reverse order) would give 2.
  const float big = 16777216.0f;
  const std::vector<float> x = {big, 1.0f, -big, 1.0f};
  const std::vector<float> pi = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> out(1);
  HcPre(x, pi, out);
  EXPECT_EQ(out[0], 1.0f);
  // One bf16 rounding of the fp32 sum: 0.5 + 0.5·(1 + 2^-7) = 1 + 2^-8, a bf16 tie → 1.
  const std::vector<float> y = {1.0f, 1.0078125f, 0.0f, 0.0f};
  const std::vector<float> half = {0.5f, 0.5f, 0.0f, 0.0f};
  HcPre(y, half, out);
  EXPECT_EQ(out[0], 1.0f);
}

MhcMix IdentityMix(std::vector<float> post) {
  MhcMix mix;
  mix.hc_mult = static_cast<int32_t>(post.size());
  for (int32_t k = 0; k < mix.hc_mult; ++k) {
    mix.post[k] = post[k];
    mix.comb[k * mix.hc_mult + k] = 1.0f;
  }
  return mix;
}

TEST(HcPostTest, SumsOverFirstIndexOfComb) {
  // C[0][1] = 1 moves stream 0 into stream 1; C[1][0] = 0.5 moves half of stream 1 into 0.
  MhcMix mix;
  mix.hc_mult = 2;
  mix.comb = {};
  mix.comb[0 * 2 + 1] = 1.0f;
  mix.comb[1 * 2 + 0] = 0.5f;
  const std::vector<float> r = {3.0f, 4.0f};  // stream 0 = 3, stream 1 = 4 (dim 1)
  const std::vector<float> y = {0.0f};
  std::vector<float> out(2);
  HcPost(y, r, mix, out);
  EXPECT_EQ(out, (std::vector<float>{2.0f, 3.0f}));
}

TEST(HcPostTest, AddsPostTermAfterTheMix) {
  // Stream 0 mixes C[0][0]·R[0] + C[1][0]·R[1] = 2^30 − 2^30 = 0 first, then adds post·y = 1.5.
  // Adding post·y first would lose it: (1.5 + 2^30) − 2^30 = 0.
  MhcMix mix;
  mix.hc_mult = 2;
  mix.post = {1.5f, 0.0f};
  mix.comb[0 * 2 + 0] = 1.0f;
  mix.comb[1 * 2 + 0] = 1.0f;
  const float big = std::ldexp(1.0f, 30);
  const std::vector<float> r = {big, -big};
  const std::vector<float> y = {1.0f};
  std::vector<float> out(2);
  HcPost(y, r, mix, out);
  EXPECT_EQ(out, (std::vector<float>{1.5f, 0.0f}));
}

TEST(HcPostTest, RoundsStreamsToBf16) {
  // C = I, post = (1, 2): stream 0 = bf16(1 + 2^-8) = 1 (tie to even); stream 1 = 0.5 + 2^-7.
  const MhcMix mix = IdentityMix({1.0f, 2.0f});
  const std::vector<float> r = {1.0f, 0.5f};
  const std::vector<float> y = {std::ldexp(1.0f, -8)};
  std::vector<float> out(2);
  HcPost(y, r, mix, out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, 0.5f + std::ldexp(1.0f, -7)}));
}

TEST(HcPostTest, OutputMayAliasStreams) {
  MhcMix mix;
  mix.hc_mult = 2;
  mix.post = {0.5f, 0.25f};
  mix.comb[0] = 0.25f;
  mix.comb[1] = 0.75f;
  mix.comb[2] = 0.75f;
  mix.comb[3] = 0.25f;
  const std::vector<float> y = {1.0f, -2.0f};
  std::vector<float> r = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> out(4);
  HcPost(y, r, mix, out);
  HcPost(y, r, mix, r);
  EXPECT_EQ(r, out);
  // Hand: stream 0, d 0: 0.5·1 + (0.25·1 + 0.75·3) = 3; stream 1, d 1: 0.25·−2 + (0.75·2 + 0.25·4).
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[3], 2.0f);
}

TEST(SinkhornTest, UniformLogitsGiveExactQuarters) {
  std::vector<float> c(16, 0.0f);
  SinkhornNormalize(c, 4, 20, 0.0f);
  for (float v : c) EXPECT_EQ(v, 0.25f);
}

TEST(SinkhornTest, OneIterationIsRowSoftmaxPlusEpsThenColumnNormalise) {
  // Rows [0, 0] and [5, 5] both soften to [0.5, 0.5] (exp of logit − row max = 1); + eps 0.25
  // gives 0.75; each column sums to 1.5, + eps = 1.75, so every entry is fp32(0.75 / 1.75).
  std::vector<float> c = {0.0f, 0.0f, 5.0f, 5.0f};
  SinkhornNormalize(c, 2, 1, 0.25f);
  const float expected = 0.75f / 1.75f;
  for (float v : c) EXPECT_EQ(v, expected);
}

TEST(SinkhornTest, ManyIterationsGiveDoublyStochastic) {
  std::vector<float> c = {0.1f, -2.0f, 3.0f, 0.5f, 1.0f,  1.0f, -1.0f, 0.0f,
                          2.5f, 0.0f,  0.0f, 0.3f, -0.7f, 4.0f, 0.2f,  1.1f};
  SinkhornNormalize(c, 4, 60, 0.0f);
  for (int i = 0; i < 4; ++i) {
    double row = 0, col = 0;
    for (int k = 0; k < 4; ++k) {
      row += c[i * 4 + k];
      col += c[k * 4 + i];
    }
    EXPECT_NEAR(row, 1.0, 1e-5) << "row " << i;
    EXPECT_NEAR(col, 1.0, 1e-6) << "column " << i;
  }
}

// MixDot is ExactDot (numerics/arith.h) on fp32 weight bytes: compare on random rows whose
// products span wide exponent ranges and cancel, on rows that leave its binned path (non-bf16
// inputs, tiny and huge products, all-zero products) and on hand cases.
TEST(MixDotTest, EqualsExactDot) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t n = 1 + trial % 97;
    std::vector<float> fn(n), x(n);
    const int spread = trial % 3 == 0 ? 0 : (trial % 3 == 1 ? 8 : 60);
    for (size_t d = 0; d < n; ++d) {
      const int e = spread == 0 ? 0 : exponent(rng) % (spread + 1);
      fn[d] = std::ldexp(mantissa(rng), e);
      x[d] = Bf16Round(std::ldexp(mantissa(rng), -e));
    }
    if (trial % 5 == 0) {  // exact cancellation inside one exponent bin
      fn[0] = 0.75f;
      x[0] = 1.0f;
      fn[n - 1] = -0.75f;
      x[n - 1] = n > 1 ? 1.0f : x[n - 1];
    }
    if (trial % 7 == 0) x[n / 2] = 0.1f;                        // not a bf16 value
    if (trial % 11 == 0) x[n / 2] = std::ldexp(1.0f, -120);     // product below 2^-100
    if (trial % 13 == 0) fn[n / 2] = std::ldexp(1.0f, 110);     // product above 2^100
    if (trial % 17 == 0) std::fill(x.begin(), x.end(), -0.0f);  // all-zero products
    const float want = ExactDot(fn, x);
    const float got = MixDot(F32Bytes(fn), x);
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
        << "trial " << trial << ": " << got << " vs " << want;
  }
}

TEST(MixDotTest, SumsExactlyBeforeTheOneRounding) {
  // 2^30 + 1 − 2^30 = 1 exactly (a sequential fp32 sum gives 0); 1 + 2^-30 rounds to 1 once.
  const std::vector<float> fn = {1.0f, 1.0f, -1.0f};
  EXPECT_EQ(
      MixDot(F32Bytes(fn), std::vector<float>{std::ldexp(1.0f, 30), 1.0f, std::ldexp(1.0f, 30)}),
      1.0f);
  EXPECT_EQ(MixDot(F32Bytes({1.0f, 1.0f}), std::vector<float>{1.0f, std::ldexp(1.0f, -30)}), 1.0f);
  // 1 + 2^-24 + 2^-24 = 1 + 2^-23 exactly: one rounding keeps it (two would lose both halves).
  EXPECT_EQ(MixDot(F32Bytes({1.0f, 1.0f, 1.0f}),
                   std::vector<float>{1.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -24)}),
            1.0f + std::ldexp(1.0f, -23));
}

TEST(ComputeMixTest, ZeroWeightsGiveSigmoidOfBase) {
  // fn = 0: m = 0, so pre = sigmoid(base) + eps, post = 2·sigmoid(base), C from base alone.
  MhcDims dims;
  dims.hc_mult = 2;
  dims.hidden_size = 3;
  dims.sinkhorn_iters = 1;
  dims.norm_eps = 1e-20f;
  dims.hc_eps = 0.25f;
  const std::vector<std::byte> fn = F32Bytes(std::vector<float>(8 * 6, 0.0f));
  const std::vector<std::byte> base = F32Bytes({0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 5.0f, 5.0f});
  const std::vector<std::byte> scale = F32Bytes({1.0f, 1.0f, 1.0f});
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const MhcMix mix = ComputeMix(x, MhcWeights{fn, base, scale}, dims);
  EXPECT_EQ(mix.pre[0], 0.75f);  // sigmoid(0) = 1/(1+1) = 0.5, + 0.25
  EXPECT_EQ(mix.post[1], 1.0f);  // 2·0.5
  for (int idx = 0; idx < 4; ++idx) EXPECT_EQ(mix.comb[idx], 0.75f / 1.75f);
}

TEST(ComputeMixTest, MultipliesTheExactDotByRho) {
  // x has mean square 4, so ρ = 1/2; fn row 0 is all ones: m[0] = 8 · 1/2 = 4, and with
  // scale[0] = 1/2: pre[0] = sigmoid(2) + eps = 1 / (1 + fp32(e^-2)) + eps.
  MhcDims dims;
  dims.hc_mult = 2;
  dims.hidden_size = 3;
  dims.sinkhorn_iters = 3;
  dims.norm_eps = 1e-20f;
  dims.hc_eps = 1e-6f;
  std::vector<float> fn(8 * 6, 0.0f);
  for (int d = 0; d < 6; ++d) fn[d] = 1.0f;
  const std::vector<std::byte> fn_bytes = F32Bytes(fn);
  const std::vector<std::byte> base = F32Bytes(std::vector<float>(8, 0.0f));
  const std::vector<std::byte> scale = F32Bytes({0.5f, 1.0f, 1.0f});
  const std::vector<float> x = {2.0f, 2.0f, 2.0f, -2.0f, 2.0f, 2.0f};
  const MhcMix mix = ComputeMix(x, MhcWeights{fn_bytes, base, scale}, dims);
  const float e = static_cast<float>(std::exp(-2.0));
  const float sig = 1.0f / (1.0f + e);
  EXPECT_EQ(mix.pre[0], sig + 1e-6f);
  EXPECT_EQ(mix.pre[1], 0.5f + 1e-6f);
}

TEST(EmbedTokensTest, CopiesTheRowIntoEveryStream) {
  HeadWeights head;
  const std::vector<std::byte> embed = Bf16Bytes({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f});
  head.embed = embed;
  head.vocab_size = 3;
  head.hidden_size = 2;
  const std::vector<int32_t> ids = {2, 0};
  std::vector<float> streams(2 * 2 * 2);
  ASSERT_TRUE(EmbedTokens(head, ids, 2, streams).ok());
  EXPECT_EQ(streams, (std::vector<float>{5.0f, 6.0f, 5.0f, 6.0f, 1.0f, 2.0f, 1.0f, 2.0f}));
}

TEST(EmbedTokensTest, RejectsTokenOutsideVocabularyNamingIt) {
  HeadWeights head;
  const std::vector<std::byte> embed = Bf16Bytes({1.0f, 2.0f, 3.0f, 4.0f});
  head.embed = embed;
  head.vocab_size = 2;
  head.hidden_size = 2;
  std::vector<float> streams(2 * 4 * 2);
  for (const int32_t bad : {2, -1}) {
    const std::vector<int32_t> ids = {1, bad};
    const Status status = EmbedTokens(head, ids, 4, streams);
    EXPECT_FALSE(status.ok());
    EXPECT_NE(status.ToString().find("token 1: id " + std::to_string(bad)), std::string::npos)
        << status.ToString();
  }
}

}  // namespace
}  // namespace dsv41

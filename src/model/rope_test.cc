// RoPE at the released context length (trap K5 of real-weight-traps.md): which table each layer
// class of the released plan uses, and the angles and rotations at positions up to 2^20 − 1 for
// both tables, against references computed here from model.md §6.
#include "model/rope.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numbers>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/layer_plan.h"

namespace dsv41 {
namespace {

constexpr int32_t kRopeDim = 64;  // the release's qk_rope_head_dim (checked below)
const int32_t kPositions[] = {0,       1,       4095,    4096,    65535,        65536,
                              1000003, 1048559, 1048574, 1048575, 1048575 - 128};

uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }

// §6.2 in this test's own words. `fp32_chain` true: the fp32 evaluation the reference performs
// (each step rounded to fp32; powers correctly rounded); false: the same formula in double.
std::vector<double> InvFreq(double theta, bool yarn, bool fp32_chain) {
  const int half = kRopeDim / 2;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) {
    if (fp32_chain) {
      const float e = static_cast<float>(2 * i) / static_cast<float>(kRopeDim);
      const float power =
          static_cast<float>(std::pow(static_cast<double>(static_cast<float>(theta)), e));
      inv[i] = 1.0f / power;
    } else {
      inv[i] = 1.0 / std::pow(theta, 2.0 * i / kRopeDim);
    }
  }
  if (!yarn) return inv;
  // YaRN with the release's factor 16, original length 65536, beta 32 / 1; bounds in double.
  const double orig = 65536, factor = 16;
  auto corr = [&](double rotations) {
    return kRopeDim * std::log(orig / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  const double low = std::max(std::floor(corr(32)), 0.0);
  const double high = std::min(std::ceil(corr(1)), kRopeDim - 1.0);
  for (int i = 0; i < half; ++i) {
    if (fp32_chain) {
      const float span = static_cast<float>(std::max(high - low, 0.001));
      const float ramp =
          std::clamp((static_cast<float>(i) - static_cast<float>(low)) / span, 0.0f, 1.0f);
      const float keep = 1.0f - ramp;
      const float base = static_cast<float>(inv[i]);
      const float scaled = (base / static_cast<float>(factor)) * (1.0f - keep);
      const float kept = base * keep;
      inv[i] = scaled + kept;
    } else {
      const double ramp = std::clamp((i - low) / std::max(high - low, 0.001), 0.0, 1.0);
      inv[i] = inv[i] / factor * ramp + inv[i] * (1 - ramp);
    }
  }
  return inv;
}

struct TableCase {
  const char* name;
  RopeTable table;
  double theta;
  bool yarn;
};
const TableCase kTables[] = {{"main", RopeTable::kMain, 10000.0, false},
                             {"compress", RopeTable::kCompress, 160000.0, true}};

// model.md §1.2, §6.2: ratio-0 layers use rope_theta without YaRN, ratio > 0 layers
// compress_rope_theta with YaRN (mlx-lm #1189 applied one table everywhere).
TEST(RopeReleasedTest, EachLayerClassUsesItsTable) {
  const ModelConfig config = ReleasedConfig();
  ASSERT_EQ(config.qk_rope_head_dim, kRopeDim);
  EXPECT_EQ(config.rope_theta, 10000.0);
  EXPECT_EQ(config.compress_rope_theta, 160000.0);
  EXPECT_EQ(config.compress_yarn.factor, 16.0);
  EXPECT_EQ(config.compress_yarn.original_max_position_embeddings, 65536);
  EXPECT_EQ(config.compress_yarn.beta_fast, 32.0);
  EXPECT_EQ(config.compress_yarn.beta_slow, 1.0);
  EXPECT_EQ(config.max_position_embeddings, 1 << 20);
  const LayerPlan plan = PlanLayers(config);
  ASSERT_EQ(plan.layers.size(), 40u);
  int by_ratio[3] = {0, 0, 0};
  for (const LayerRole& role : plan.layers) {
    ASSERT_GE(role.ratio, 0);
    ASSERT_LE(role.ratio, 2);
    ++by_ratio[role.ratio];
    EXPECT_EQ(role.rope_table, role.ratio == 0 ? RopeTable::kMain : RopeTable::kCompress)
        << "layer " << role.layer << " ratio " << role.ratio;
  }
  EXPECT_EQ(by_ratio[0], 2);
  EXPECT_EQ(by_ratio[1], 20);
  EXPECT_EQ(by_ratio[2], 18);
  for (const TableCase& t : kTables) {
    const Rope rope = Rope::ForTable(config, t.table);
    const std::vector<double> want = InvFreq(t.theta, t.yarn, /*fp32_chain=*/true);
    ASSERT_EQ(rope.inv_freq().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(Bits(rope.inv_freq()[i]), Bits(static_cast<float>(want[i])))
          << t.name << " pair " << i;
    }
  }
}

// Angles at positions up to 2^20 − 1. Two references per (table, position, pair):
// - parity: §6.2 "Angle precision": the fp32 product fp32(p) · inv_freq_fp32, then cos / sin of
//   that fp32 angle in double, rounded once. The engine must equal it bit for bit.
// - exactness: cos / sin of p · inv_freq in double. The fp32 angle departs from it by at most half
//   an fp32 ulp of the angle (0.03125 rad near 1e6) plus p times the fp32 table's error; the
//   engine must stay inside that bound (+ 2^-24 for the final rounding). A position converted
//   through a narrower type, or the angle formed from a coarser product, exceeds it.
TEST(RopeReleasedTest, AnglesAtLargePositionsMatchTheFp32ProductAndStayWithinItsBound) {
  const ModelConfig config = ReleasedConfig();
  double worst_bound = 0.0, worst_error = 0.0;
  for (const TableCase& t : kTables) {
    const Rope rope = Rope::ForTable(config, t.table);
    const std::vector<double> inv_f = InvFreq(t.theta, t.yarn, true);
    const std::vector<double> inv_d = InvFreq(t.theta, t.yarn, false);
    const size_t half = inv_f.size();
    std::vector<float> cos(half), sin(half);
    for (const int32_t pos : kPositions) {
      rope.Angles(pos, cos, sin);
      for (size_t i = 0; i < half; ++i) {
        const float angle_f = static_cast<float>(static_cast<double>(pos) * inv_f[i]);  // exact
        const float want_cos = static_cast<float>(std::cos(static_cast<double>(angle_f)));
        const float want_sin = static_cast<float>(std::sin(static_cast<double>(angle_f)));
        const std::string where =
            std::string(t.name) + " pos " + std::to_string(pos) + " pair " + std::to_string(i);
        ASSERT_EQ(Bits(cos[i]), Bits(want_cos)) << where;
        ASSERT_EQ(Bits(sin[i]), Bits(want_sin)) << where;
        const double exact = pos * inv_d[i];
        const double ulp = angle_f == 0.0f ? 0.0 : std::ldexp(1.0, std::ilogb(angle_f) - 23);
        const double bound = 0.5 * ulp + pos * std::fabs(inv_f[i] - inv_d[i]) + 0x1p-24;
        worst_bound = std::max(worst_bound, bound);
        worst_error = std::max({worst_error, std::fabs(cos[i] - std::cos(exact)),
                                std::fabs(sin[i] - std::sin(exact))});
        ASSERT_LE(std::fabs(cos[i] - std::cos(exact)), bound) << where;
        ASSERT_LE(std::fabs(sin[i] - std::sin(exact)), bound) << where;
      }
    }
  }
  // What the spec's fp32 angle costs near 2^20: half an angle ulp (2^-5 rad) plus p times the
  // fp32 table's error, about 0.055 rad at worst; the engine's error stays inside it.
  std::printf("[ RoPE 2^20 ] worst fp32-angle bound %.4f rad, worst engine error %.4f\n",
              worst_bound, worst_error);
  EXPECT_GT(worst_bound, 0.03);
  EXPECT_LT(worst_bound, 0.1);
}

// The rotation at those positions (§6.1): a' = bf16(fp32(a·c) − fp32(b·s)), b' = bf16(fp32(a·s) +
// fp32(b·c)) with the parity angles, bit for bit, both directions, leading dims untouched.
TEST(RopeReleasedTest, RotationAtLargePositionsFollowsThePairRule) {
  const ModelConfig config = ReleasedConfig();
  auto bf16 = [](float x) {
    const uint32_t b = Bits(x);
    return std::bit_cast<float>((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);
  };
  constexpr int kHeadDim = 512;  // q, SWA kv, compressed entries (§6.1: the last 64 dims rotate)
  std::vector<float> v0(kHeadDim);
  for (int d = 0; d < kHeadDim; ++d) v0[d] = bf16(std::sin(0.37f * d) * (1.0f + 0.01f * d));
  for (const TableCase& t : kTables) {
    const Rope rope = Rope::ForTable(config, t.table);
    const std::vector<double> inv_f = InvFreq(t.theta, t.yarn, true);
    for (const int32_t pos : kPositions) {
      for (const bool inverse : {false, true}) {
        std::vector<float> v = v0;
        rope.Rotate(v, pos, inverse);
        for (int d = 0; d < kHeadDim - kRopeDim; ++d) ASSERT_EQ(Bits(v[d]), Bits(v0[d]));
        for (int i = 0; i < kRopeDim / 2; ++i) {
          const float angle = static_cast<float>(static_cast<double>(pos) * inv_f[i]);
          const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
          const float s0 = static_cast<float>(std::sin(static_cast<double>(angle)));
          const float s = inverse ? -s0 : s0;
          const int at = kHeadDim - kRopeDim + 2 * i;
          const float a = v0[at], b = v0[at + 1];
          const float ac = a * c, bs = b * s, as = a * s, bc = b * c;
          ASSERT_EQ(Bits(v[at]), Bits(bf16(ac - bs))) << t.name << " pos " << pos << " pair " << i;
          ASSERT_EQ(Bits(v[at + 1]), Bits(bf16(as + bc)))
              << t.name << " pos " << pos << " pair " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv41

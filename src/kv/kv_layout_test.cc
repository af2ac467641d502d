#include "kv/kv_layout.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {

// Rows as the model stores them: random magnitudes over many binades, a zero block, a block of
// tiny values (below the quantisers' amax floors) and signed zeros, then fake-quantised.
std::vector<float> QuantisedRow(uint32_t seed, int32_t n, void (*fake_quant)(std::span<float>)) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 8);
  std::vector<float> row(n);
  for (float& v : row) v = std::ldexp(mantissa(rng), exponent(rng));
  for (int32_t i = 0; i < 32 && i < n; ++i) row[i] = 0.0f;
  for (int32_t i = 32; i < 64 && i < n; ++i) row[i] = (i % 2 ? -1.0f : 1.0f) * 1e-12f * i;
  if (n > 64) row[64] = -0.0f;
  fake_quant(row);
  return row;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class KvRowCodecTest : public ::testing::TestWithParam<KvProfile> {};

TEST_P(KvRowCodecTest, SwaRowsRoundTripBitExactly) {
  const int32_t n = 512;
  const size_t bytes = GetParam() == KvProfile::kPacked ? n + n / 32 : 2 * n;
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const std::vector<float> row = QuantisedRow(seed, n, FakeQuantFq8B32);
    std::vector<std::byte> stored(bytes);
    EncodeSwaRow(GetParam(), row, stored.data());
    std::vector<float> back(n);
    DecodeSwaRow(GetParam(), stored.data(), back);
    ASSERT_TRUE(SameBits(row, back)) << "seed " << seed;
  }
}

TEST_P(KvRowCodecTest, CompressedKvRowsRoundTripBitExactly) {
  const int32_t n = 512;
  const size_t bytes = GetParam() == KvProfile::kPacked ? n / 2 + n / 16 : 2 * n;
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const std::vector<float> row = QuantisedRow(seed, n, FakeQuantFq4B16E4m3);
    std::vector<std::byte> stored(bytes);
    EncodeKvRow(GetParam(), row, stored.data());
    std::vector<float> back(n);
    DecodeKvRow(GetParam(), stored.data(), back);
    ASSERT_TRUE(SameBits(row, back)) << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Profiles, KvRowCodecTest,
                         ::testing::Values(KvProfile::kSeed, KvProfile::kCompact,
                                           KvProfile::kPacked),
                         [](const ::testing::TestParamInfo<KvProfile>& info) {
                           return std::string(KvProfileName(info.param));
                         });

TEST(KvIndexRowTest, RoundTripsBitExactlyAndZeroPadsTheSeedRegion) {
  const int32_t n = 128;
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const std::vector<float> row = QuantisedRow(seed, n, FakeQuantFq4B32Pow2);
    std::vector<std::byte> stored(n, std::byte{0xAB});  // the seed geometry's 128-B region
    EncodeIndexRow(row, stored.data(), stored.size());
    for (int32_t i = n / 2 + n / 32; i < n; ++i) ASSERT_EQ(stored[i], std::byte{0}) << i;
    std::vector<float> back(n);
    DecodeIndexRow(stored.data(), back);
    ASSERT_TRUE(SameBits(row, back)) << "seed " << seed;
  }
}

TEST(KvCacheLayoutTest, PlacesFollowThePlanAndRowsStayInsideTheirPages) {
  ModelConfig config;
  config.num_hidden_layers = 6;
  config.head_dim = 64;
  config.index_head_dim = 32;
  config.sliding_window = 8;
  config.compress_ratios = {0, 2, 2, 1, 1, 2};
  config.kv_source_layer_ids = {1, 3};
  config.index_source_layer_ids = {1, 3};
  config.max_position_embeddings = 1024;
  Result<CachePlan> plan =
      PlanCache(config, PlanLayers(config), CachePlanOptions{.block_tokens = 4});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const KvCacheLayout layout = LayoutFromPlan(*plan, config);
  ASSERT_EQ(layout.swa.size(), 6u);
  // Layer l's SWA rows sit in slot l mod 2, group G_SWA_{l div 2}, B rows of bf16 × head_dim.
  for (int32_t l = 0; l < 6; ++l) {
    EXPECT_EQ(layout.swa[l].slot, l % 2) << l;
    EXPECT_EQ(layout.swa[l].group_idx, plan->swa_group_idx[l / 2]) << l;
    EXPECT_EQ(layout.swa[l].rows_per_page, 4) << l;
    EXPECT_EQ(layout.swa[l].row_bytes, 128u) << l;
  }
  ASSERT_TRUE(layout.sources[1].has_value());
  ASSERT_TRUE(layout.sources[3].has_value());
  EXPECT_FALSE(layout.sources[0].has_value());
  // Source 1 (ratio 2): 2 entries per block, KV then index rows, a 32-row ring of fp32 [a ‖ g].
  EXPECT_EQ(layout.sources[1]->kv.rows_per_page, 2);
  EXPECT_EQ(layout.sources[1]->index.offset_bytes, 2u * 128u);
  EXPECT_EQ(layout.sources[1]->ring.row_bytes, 2u * 64u * 4u);
  EXPECT_EQ(layout.sources[1]->ring.group_idx, plan->ring_group_idx);
  EXPECT_EQ(layout.sources[3]->ring.slot, -1);  // ratio 1 keeps no ring
  KvCacheStorage storage(*plan, config, 5);
  const KvCacheView& view = storage.view();
  for (int32_t l = 0; l < 6; ++l) {
    const KvRowPlace& p = layout.swa[l];
    EXPECT_LE(view.Row(p, 4, 3) + p.row_bytes, view.base[p.slot] + 5 * view.page_bytes[p.slot]);
  }
  // Each slot is its own mapping with huge pages asked for: a fresh cache's first rows fault in
  // 2 MiB at a time.
  if (!KernelTakesHugePageAdvice()) GTEST_SKIP() << "this kernel takes no MADV_HUGEPAGE";
  for (size_t slot = 0; slot < view.base.size(); ++slot) {
    Result<std::string> flags = MappingVmFlags(view.base[slot]);
    if (!flags.ok()) GTEST_SKIP() << flags.status().ToString();
    EXPECT_NE(flags->find(" hg"), std::string::npos) << slot << ": " << *flags;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view.base[slot]) % 4096, 0u) << slot;
  }
}

TEST(KvCacheLayoutTest, ContiguousTablesGiveEachGroupItsOwnConsecutiveIds) {
  ModelConfig config;
  config.num_hidden_layers = 2;
  config.head_dim = 64;
  config.index_head_dim = 32;
  config.sliding_window = 8;
  config.compress_ratios = {2, 2};
  config.kv_source_layer_ids = {0};
  config.index_source_layer_ids = {0};
  config.max_position_embeddings = 64;
  Result<CachePlan> plan =
      PlanCache(config, PlanLayers(config), CachePlanOptions{.block_tokens = 4});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::vector<std::vector<uint32_t>> tables = ContiguousBlockTables(*plan, 3);
  ASSERT_EQ(tables.size(), plan->groups.size());
  std::vector<uint32_t> all;
  for (size_t g = 0; g < tables.size(); ++g) {
    EXPECT_EQ(tables[g].size(), static_cast<int>(g) == plan->ring_group_idx ? 1u : 3u);
    all.insert(all.end(), tables[g].begin(), tables[g].end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "an id in two groups";
}

}  // namespace
}  // namespace dsv41

// The index-key slot rule (model/index_key_slot.h, model.md §7.5 "Which keys an index source
// scores against"): the clean default, and the official reference's single published slot.

#include "model/index_key_slot.h"

#include <gtest/gtest.h>

#include <vector>

#include "config/config.h"

namespace dsv41 {
namespace {

// A plan of `ratios` with the given kv and index sources (the rule reads only ratios and roles).
LayerPlan PlanOf(const std::vector<int32_t>& ratios, const std::vector<int32_t>& kv_sources,
                 const std::vector<int32_t>& index_sources) {
  ModelConfig c = ReleasedConfig();
  c.num_hidden_layers = static_cast<int32_t>(ratios.size());
  c.compress_ratios = ratios;
  c.kv_source_layer_ids = kv_sources;
  c.index_source_layer_ids = index_sources;
  c.candidate_source_layer_id = -1;
  c.engram_layer_ids = {};
  c.dspark_target_layer_ids = {};
  return PlanLayers(c);
}

int32_t KeyLayer(const LayerPlan& plan, int32_t layer, int32_t start, int32_t n, bool official) {
  return IndexKeySourceLayer(plan, plan.layers[static_cast<size_t>(layer)], start, n, official);
}

TEST(IndexKeySlotTest, CompletesGroupAtTheLastMemberOfAGroup) {
  EXPECT_TRUE(CompletesGroup(1, 0, 1));
  EXPECT_FALSE(CompletesGroup(2, 0, 1));
  EXPECT_TRUE(CompletesGroup(2, 1, 1));
  EXPECT_FALSE(CompletesGroup(2, 84, 1));
  EXPECT_TRUE(CompletesGroup(2, 84, 2));
  EXPECT_FALSE(CompletesGroup(4, 4, 3));
  EXPECT_TRUE(CompletesGroup(4, 4, 4));
  EXPECT_FALSE(CompletesGroup(2, 5, 0));
}

// The released 40-layer plan (model.md §2.2).
TEST(IndexKeySlotTest, ReleasedPlanEvenDecodeStepsBorrowLayer20) {
  const LayerPlan plan = PlanLayers(ReleasedConfig());
  for (int32_t p : {1, 2, 83, 84, 1000, 1001}) {
    for (const LayerRole& role : plan.layers) {
      if (!role.is_index_source) continue;
      const int32_t own = *role.kv_source_layer;
      EXPECT_EQ(KeyLayer(plan, role.layer, p, 1, false), own) << "clean, p " << p;
      const bool borrows = role.ratio == 2 && p % 2 == 0;
      EXPECT_EQ(KeyLayer(plan, role.layer, p, 1, true), borrows ? 20 : own)
          << "layer " << role.layer << " p " << p;
    }
  }
  // A first token completes nothing and has nothing published: its own (empty) keys.
  EXPECT_EQ(KeyLayer(plan, 2, 0, 1, true), 2);
  // Any forward of two or more tokens completes every ratio-2 group it closes: own keys.
  for (int32_t start : {0, 7, 84}) {
    for (int32_t n : {2, 3, 64}) {
      for (int32_t l : {2, 8, 14, 20, 24, 36}) {
        EXPECT_EQ(KeyLayer(plan, l, start, n, true), *plan.layers[l].kv_source_layer);
      }
    }
  }
}

TEST(IndexKeySlotTest, EarlierPublisherInTheSameForwardWins) {
  // Layer 1 (ratio 1) publishes before layer 2 (ratio 2) in every forward.
  const LayerPlan plan = PlanOf({0, 1, 2, 2}, {1, 2}, {1, 2});
  EXPECT_EQ(KeyLayer(plan, 2, 10, 1, true), 1);
  EXPECT_EQ(KeyLayer(plan, 2, 11, 1, true), 2);
  EXPECT_EQ(KeyLayer(plan, 2, 10, 1, false), 2);
  EXPECT_EQ(KeyLayer(plan, 2, 10, 2, true), 2);
}

TEST(IndexKeySlotTest, PreviousForwardsLastPublisherAndTooFewRows) {
  // Layer 1 of ratio 2, then layer 2 of ratio 4.
  const LayerPlan plan = PlanOf({0, 2, 4}, {1, 2}, {1, 2});
  // p = 6: nothing completes in this forward; at 5 only layer 1 did (5 mod 4 != 3). It holds
  // 7 / 2 = 3 rows of the 7 / 4 = 1 layer 2 reads.
  EXPECT_EQ(KeyLayer(plan, 2, 6, 1, true), 1);
  // p = 5: layer 1 completes earlier in this forward.
  EXPECT_EQ(KeyLayer(plan, 2, 5, 1, true), 1);
  // p = 4: layer 2 published last (at 3) but holds 5 / 4 = 1 row of the 5 / 2 = 2 that layer 1
  // reads: its own keys.
  EXPECT_EQ(KeyLayer(plan, 1, 4, 1, true), 1);
}

}  // namespace
}  // namespace dsv41

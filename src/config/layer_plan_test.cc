#include "config/layer_plan.h"

#include <gtest/gtest.h>

#include <string>

namespace dsv41 {
namespace {

const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model/";

// One row of model.md §2.2's table, covering layers first..last.
struct SpecRow {
  int32_t first, last, ratio;
  LayerMode mode;
  int32_t kv_source, index_source;  // -1 = none
  CandidateMode candidate_mode;
  bool uses_filter;
  int32_t engram_slot;  // -1 = none
  RopeTable rope;
};

constexpr LayerMode kSwa = LayerMode::kSwaOnly;
constexpr LayerMode kFull = LayerMode::kFull;
constexpr LayerMode kReindex = LayerMode::kReindex;
constexpr LayerMode kReuse = LayerMode::kReuse;
constexpr CandidateMode kNone = CandidateMode::kNone;
constexpr CandidateMode kPlain = CandidateMode::kPlain;
constexpr CandidateMode kProduce = CandidateMode::kProduce;
constexpr CandidateMode kFilter = CandidateMode::kFilter;
constexpr RopeTable kMain = RopeTable::kMain;
constexpr RopeTable kCompress = RopeTable::kCompress;

// model.md §2.2, typed from the spec.
constexpr SpecRow kReleasedTable[] = {
    {0, 0, 0, kSwa, -1, -1, kNone, false, -1, kMain},
    {1, 1, 0, kSwa, -1, -1, kNone, false, 0, kMain},
    {2, 2, 2, kFull, 2, 2, kPlain, false, -1, kCompress},
    {3, 7, 2, kReuse, 2, 2, kNone, false, -1, kCompress},
    {8, 8, 2, kFull, 8, 8, kPlain, false, -1, kCompress},
    {9, 13, 2, kReuse, 8, 8, kNone, false, -1, kCompress},
    {14, 14, 2, kFull, 14, 14, kPlain, false, 1, kCompress},
    {15, 19, 2, kReuse, 14, 14, kNone, false, -1, kCompress},
    {20, 20, 1, kFull, 20, 20, kProduce, false, -1, kCompress},
    {21, 23, 1, kReuse, 20, 20, kNone, false, -1, kCompress},
    {24, 24, 1, kReindex, 20, 24, kFilter, true, -1, kCompress},
    {25, 27, 1, kReuse, 20, 24, kNone, false, -1, kCompress},
    {28, 28, 1, kReindex, 20, 28, kFilter, true, -1, kCompress},
    {29, 31, 1, kReuse, 20, 28, kNone, false, -1, kCompress},
    {32, 32, 1, kReindex, 20, 32, kFilter, true, -1, kCompress},
    {33, 35, 1, kReuse, 20, 32, kNone, false, -1, kCompress},
    {36, 36, 1, kReindex, 20, 36, kFilter, true, -1, kCompress},
    {37, 39, 1, kReuse, 20, 36, kNone, false, -1, kCompress},
};

std::optional<int32_t> Opt(int32_t v) { return v < 0 ? std::nullopt : std::optional<int32_t>(v); }

TEST(LayerPlanTest, ReleasedPlanMatchesSpecTable) {
  const LayerPlan plan = PlanLayers(ReleasedConfig());
  ASSERT_EQ(plan.layers.size(), 40u);
  EXPECT_EQ(plan.num_dspark_stages, 3);
  int32_t covered = 0;
  for (const SpecRow& row : kReleasedTable) {
    for (int32_t l = row.first; l <= row.last; ++l, ++covered) {
      SCOPED_TRACE("layer " + std::to_string(l));
      const LayerRole& role = plan.layers[static_cast<size_t>(l)];
      EXPECT_EQ(role.layer, l);
      EXPECT_EQ(role.ratio, row.ratio);
      EXPECT_EQ(role.mode, row.mode);
      EXPECT_EQ(role.kv_source_layer, Opt(row.kv_source));
      EXPECT_EQ(role.index_source_layer, Opt(row.index_source));
      EXPECT_EQ(role.candidate_mode, row.candidate_mode);
      EXPECT_EQ(role.uses_candidate_filter, row.uses_filter);
      EXPECT_EQ(role.engram_slot, Opt(row.engram_slot));
      EXPECT_EQ(role.rope_table, row.rope);
      EXPECT_EQ(role.is_candidate_source, l == 20);
      EXPECT_EQ(role.is_kv_source, row.mode == kFull);
      EXPECT_EQ(role.is_index_source, row.mode == kFull || row.mode == kReindex);
      // "DSpark targets 0, 1, 2" on layers 37-39.
      EXPECT_EQ(role.dspark_target_index, l >= 37 ? Opt(l - 37) : std::nullopt);
      // Ownership column: compressor gate only on the ratio-2 Full layers 2, 8, 14.
      EXPECT_EQ(role.owns_compressor_gate(), l == 2 || l == 8 || l == 14);
      EXPECT_EQ(role.owns_indexer_key(), row.mode == kFull);
      EXPECT_EQ(role.has_engram(), l == 1 || l == 14);
    }
  }
  EXPECT_EQ(covered, 40);
}

TEST(LayerPlanTest, ReleasedPlanHasTheSpecModeCounts) {
  const LayerPlan plan = PlanLayers(ReleasedConfig());
  int counts[4] = {0, 0, 0, 0};
  for (const LayerRole& role : plan.layers) ++counts[static_cast<int>(role.mode)];
  EXPECT_EQ(counts[static_cast<int>(kFull)], 4);
  EXPECT_EQ(counts[static_cast<int>(kReindex)], 4);
  EXPECT_EQ(counts[static_cast<int>(kReuse)], 30);
  EXPECT_EQ(counts[static_cast<int>(kSwa)], 2);
}

TEST(LayerPlanTest, GoldenLayerPlansEqualThePlansOfTheGoldenConfigs) {
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    SCOPED_TRACE(name);
    Result<ModelConfig> config = LoadModelConfig(kGoldens + "checkpoints/" + name);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    Result<Json> golden = ReadJsonFile(kGoldens + "cases/" + name + "/layer_plan.json");
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    const Json plan = LayerPlanToJson(PlanLayers(*config));
    EXPECT_EQ(plan, *golden) << plan.dump(1);
  }
}

TEST(LayerPlanTest, WithoutCandidateLevelEveryIndexSourceIsPlain) {
  ModelConfig config = ReleasedConfig();
  config.candidate_source_layer_id = -1;
  const LayerPlan plan = PlanLayers(config);
  for (const LayerRole& role : plan.layers) {
    EXPECT_FALSE(role.is_candidate_source);
    EXPECT_FALSE(role.uses_candidate_filter);
    EXPECT_EQ(role.candidate_mode, role.is_index_source ? kPlain : kNone) << role.layer;
  }
}

TEST(LayerPlanTest, NamesAreTheGoldenSpellings) {
  EXPECT_EQ(LayerModeName(kSwa), "swa");
  EXPECT_EQ(LayerModeName(kFull), "full");
  EXPECT_EQ(LayerModeName(kReindex), "reindex");
  EXPECT_EQ(LayerModeName(kReuse), "reuse");
  EXPECT_EQ(RopeTableName(kMain), "main");
  EXPECT_EQ(RopeTableName(kCompress), "compress");
}

TEST(LayerPlanTest, CandidateModeNamesFollowVllmAscend) {
  EXPECT_EQ(CandidateModeName(CandidateMode::kProduce), "produce");
  EXPECT_EQ(CandidateModeName(CandidateMode::kFilter), "filter");
  EXPECT_EQ(CandidateModeName(CandidateMode::kPlain), "plain");
  EXPECT_EQ(CandidateModeName(CandidateMode::kNone), "-");
}

}  // namespace
}  // namespace dsv41

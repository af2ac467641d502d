#include "config/rank_shard.h"

#include <vector>

#include "config/layer_plan.h"
#include "config/weight_summary.h"
#include "gtest/gtest.h"

namespace dsv41 {
namespace {

// Every index of [0, n) belongs to exactly one rank.
void ExpectPartition(const std::vector<IndexRange>& parts, int64_t n) {
  std::vector<int> owners(static_cast<size_t>(n), 0);
  for (const IndexRange& p : parts) {
    ASSERT_LE(0, p.begin);
    ASSERT_LE(p.begin, p.end);
    ASSERT_LE(p.end, n);
    for (int64_t i = p.begin; i < p.end; ++i) ++owners[static_cast<size_t>(i)];
  }
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(owners[static_cast<size_t>(i)], 1) << "index " << i;
}

TEST(RankShardTest, ExpertsArePartitionedIntoRangesWithinOneOfEachOther) {
  for (int32_t ranks = 1; ranks <= 5; ++ranks) {
    for (int64_t experts : {1, 2, 3, 7, 8, 13, 16, 128, 384}) {
      for (int64_t moe = 0; moe < 7; ++moe) {
        SCOPED_TRACE(testing::Message()
                     << experts << " experts, " << ranks << " ranks, moe " << moe);
        std::vector<IndexRange> parts;
        for (int32_t r = 0; r < ranks; ++r) {
          parts.push_back(ShardExperts(experts, moe, RankShard{r, ranks}));
        }
        ExpectPartition(parts, experts);
        for (const IndexRange& p : parts) {
          EXPECT_TRUE(p.size() == experts / ranks || p.size() == experts / ranks + 1);
        }
      }
    }
  }
}

TEST(RankShardTest, TheLargerExpertRangesRotateOverTheRanks) {
  // 7 experts over 3 ranks: ranges of 2, 2 and 3; over 3 consecutive MoEs each rank holds 7.
  for (int64_t first_moe : {0, 5}) {
    std::vector<int64_t> held(3, 0);
    for (int64_t moe = first_moe; moe < first_moe + 3; ++moe) {
      for (int32_t r = 0; r < 3; ++r) held[r] += ShardExperts(7, moe, RankShard{r, 3}).size();
    }
    EXPECT_EQ(held, (std::vector<int64_t>{7, 7, 7}));
  }
  // One MoE: place p is the p-th range, held by rank (p + moe) mod N.
  EXPECT_EQ(ShardExperts(7, 1, RankShard{1, 3}), (IndexRange{0, 2}));
  EXPECT_EQ(ShardExperts(7, 1, RankShard{2, 3}), (IndexRange{2, 4}));
  EXPECT_EQ(ShardExperts(7, 1, RankShard{0, 3}), (IndexRange{4, 7}));
}

TEST(RankShardTest, EngramRowsArePartitionedInRankOrder) {
  for (int64_t rows : {0, 1, 5, 252, 410, 1001}) {
    for (int32_t ranks = 1; ranks <= 4; ++ranks) {
      std::vector<IndexRange> parts;
      for (int32_t r = 0; r < ranks; ++r)
        parts.push_back(ShardEngramRows(rows, RankShard{r, ranks}));
      ExpectPartition(parts, rows);
      for (int32_t r = 1; r < ranks; ++r) EXPECT_EQ(parts[r].begin, parts[r - 1].end);
    }
  }
  // The released table of 384,016,682 rows over 3 ranks, in 64 bits (n·r passes 2^31).
  EXPECT_EQ(ShardEngramRows(384016682, RankShard{1, 3}), (IndexRange{128005560, 256011121}));
  EXPECT_EQ(ShardEngramRows(384016682, RankShard{2, 3}).end, 384016682);
}

TEST(RankShardTest, ParsesRoutedExpertTensorsOnly) {
  const ModelConfig config = ReleasedConfig();
  const std::optional<RoutedExpertRef> a =
      ParseRoutedExpert(config, "layers.3.ffn.experts.17.w1.weight");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->moe_idx, 3);
  EXPECT_EQ(a->expert, 17);
  const std::optional<RoutedExpertRef> b =
      ParseRoutedExpert(config, "mtp.1.ffn.experts.2.w2.scale");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->moe_idx, config.num_hidden_layers + 1);
  EXPECT_EQ(b->expert, 2);
  EXPECT_FALSE(ParseRoutedExpert(config, "layers.3.ffn.shared_experts.w1.weight").has_value());
  EXPECT_FALSE(ParseRoutedExpert(config, "layers.3.ffn.gate.weight").has_value());
  EXPECT_FALSE(ParseRoutedExpert(config, "layers.3.ffn.experts.x.w1.weight").has_value());
  EXPECT_EQ(MoeIndex(config, "layers.42"), 42);
  EXPECT_EQ(MoeIndex(config, "mtp.0"), config.num_hidden_layers);
}

TEST(RankShardTest, RankBytesAddUpToTheWeightSummary) {
  const ModelConfig config = ReleasedConfig();
  const std::vector<TensorSpec> tensors = ExpectedTensors(config, PlanLayers(config));
  uint64_t routed = 0, other = 0, engram = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t bytes = TensorBytes(t);
    if (ClassifyTensor(t.name) == WeightKind::kEngramTables) {
      engram += bytes;
    } else if (ParseRoutedExpert(config, t.name)) {
      routed += bytes;
    } else {
      other += bytes;
    }
  }
  for (int32_t ranks : {1, 2, 3, 4}) {
    const std::vector<RankWeightBytes> per_rank = WeightBytesPerRank(config, tensors, ranks);
    uint64_t routed_sum = 0, engram_sum = 0;
    for (const RankWeightBytes& r : per_rank) {
      EXPECT_EQ(r.replicated, other) << ranks << " ranks";
      routed_sum += r.routed_experts;
      engram_sum += r.engram_rows;
    }
    EXPECT_EQ(routed_sum, routed) << ranks << " ranks";
    EXPECT_EQ(engram_sum, engram) << ranks << " ranks";
  }
  // One rank holds everything.
  const RankWeightBytes one = WeightBytesPerRank(config, tensors, 1)[0];
  EXPECT_EQ(one.routed_experts, routed);
  EXPECT_EQ(one.engram_rows, engram);
}

}  // namespace
}  // namespace dsv41

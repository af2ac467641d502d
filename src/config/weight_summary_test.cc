#include "config/weight_summary.h"

#include <gtest/gtest.h>

#include "config/config.h"
#include "config/layer_plan.h"

namespace dsv41 {
namespace {

uint64_t BytesOf(const std::vector<WeightKindTotal>& totals, WeightKind kind) {
  return totals[static_cast<size_t>(kind)].bytes;
}

TEST(WeightSummaryTest, ClassifiesByModule) {
  EXPECT_EQ(ClassifyTensor("layers.3.attn.wq_a.weight"), WeightKind::kAttention);
  EXPECT_EQ(ClassifyTensor("layers.3.attn.q_norm.weight"), WeightKind::kAttention);
  EXPECT_EQ(ClassifyTensor("layers.3.attn_norm.weight"), WeightKind::kNormsAndMhc);
  EXPECT_EQ(ClassifyTensor("layers.3.hc_ffn_fn"), WeightKind::kNormsAndMhc);
  EXPECT_EQ(ClassifyTensor("layers.2.attn.compressor.norm.weight"), WeightKind::kCompressor);
  EXPECT_EQ(ClassifyTensor("layers.2.attn.indexer.k_norm.weight"), WeightKind::kIndexer);
  EXPECT_EQ(ClassifyTensor("layers.1.engram.embed.scale"), WeightKind::kEngramTables);
  EXPECT_EQ(ClassifyTensor("layers.1.engram.wkv.weight"), WeightKind::kEngramProjection);
  EXPECT_EQ(ClassifyTensor("layers.9.ffn.experts.7.w2.scale"), WeightKind::kRoutedExperts);
  EXPECT_EQ(ClassifyTensor("layers.9.ffn.shared_experts.w1.weight"), WeightKind::kSharedExperts);
  EXPECT_EQ(ClassifyTensor("layers.9.ffn.gate.bias"), WeightKind::kRouter);
  EXPECT_EQ(ClassifyTensor("mtp.1.ffn.experts.0.w1.weight"), WeightKind::kDspark);
  EXPECT_EQ(ClassifyTensor("head.weight"), WeightKind::kEmbedHead);
  EXPECT_EQ(ClassifyTensor("norm.weight"), WeightKind::kNormsAndMhc);
}

// checkpoint.md §6.6, §6.7, §6.10: the released byte totals by kind.
TEST(WeightSummaryTest, ReleasedTotalsMatchCheckpointSpec) {
  const ModelConfig config = ReleasedConfig();
  const std::vector<WeightKindTotal> totals =
      SummarizeWeights(ExpectedTensors(config, PlanLayers(config)));
  EXPECT_EQ(BytesOf(totals, WeightKind::kRoutedExperts), 288'777'830'400u);
  EXPECT_EQ(BytesOf(totals, WeightKind::kEngramTables), 202'758'032'400u);
  EXPECT_EQ(
      BytesOf(totals, WeightKind::kEngramTables) + BytesOf(totals, WeightKind::kEngramProjection),
      203'073'076'240u);
  EXPECT_EQ(BytesOf(totals, WeightKind::kEmbedHead), 2u * 1'323'827'200u);
  EXPECT_EQ(BytesOf(totals, WeightKind::kDspark), 7'932'874'632u);
  EXPECT_EQ(BytesOf(totals, WeightKind::kCompressor) + BytesOf(totals, WeightKind::kIndexer),
            81'835'008u);
  uint64_t all = 0;
  for (const WeightKindTotal& t : totals) all += t.bytes;
  // 510,286,023,000 B in the index minus vision (970,506,240) and image_* (3 × 10,240).
  EXPECT_EQ(all, 510'286'023'000u - 970'506'240u - 30'720u);
  EXPECT_EQ(BytesOf(totals, WeightKind::kOther), 0u);
}

}  // namespace
}  // namespace dsv41

#include "model/linear_weight.h"

#include <gtest/gtest.h>

#include <string>

#include "model/weights.h"

namespace dsv41 {
namespace {

const std::string kGoldenCheckpoints = std::string(DSV41_SHARED_DIR) + "/goldens/model/checkpoints";

// tiny-a: hidden 256, q_lora_rank 96, moe_intermediate_size 128, 8 routed experts (config.json).
TEST(LinearWeightTest, ChoosesTheFormatFromTheStoredDtypes) {
  Result<ModelWeights> weights = ModelWeights::Load(kGoldenCheckpoints + "/tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();

  Result<LinearWeight> wq_a = GetLinear(*weights, "layers.0.attn.wq_a");
  ASSERT_TRUE(wq_a.ok()) << wq_a.status().ToString();
  EXPECT_EQ(wq_a->format, WeightFormat::kFp8Block);
  EXPECT_EQ(wq_a->out, 96);
  EXPECT_EQ(wq_a->in, 256);
  EXPECT_EQ(wq_a->weight.size(), 96u * 256u);
  EXPECT_EQ(wq_a->scale.size(), 3u * 8u);
  EXPECT_TRUE(LinearOptionsFor(*wq_a).quantize_activations);

  Result<LinearWeight> w2 = GetLinear(*weights, "layers.3.ffn.experts.7.w2");
  ASSERT_TRUE(w2.ok()) << w2.status().ToString();
  EXPECT_EQ(w2->format, WeightFormat::kMxfp4);
  EXPECT_EQ(w2->out, 256);
  EXPECT_EQ(w2->in, 128);
  EXPECT_EQ(w2->weight.size(), 256u * 64u);
  EXPECT_EQ(w2->scale.size(), 256u * 4u);
  EXPECT_TRUE(LinearOptionsFor(*w2).quantize_activations);

  Result<LinearWeight> gate = GetLinear(*weights, "layers.0.ffn.gate");
  ASSERT_TRUE(gate.ok()) << gate.status().ToString();
  EXPECT_EQ(gate->format, WeightFormat::kBf16);
  EXPECT_EQ(gate->out, 8);
  EXPECT_EQ(gate->in, 256);
  EXPECT_TRUE(gate->scale.empty());
  EXPECT_FALSE(LinearOptionsFor(*gate).quantize_activations);
}

TEST(LinearWeightTest, Bf16CheckpointHasUnquantisedExperts) {
  Result<ModelWeights> weights = ModelWeights::Load(kGoldenCheckpoints + "/tiny-b");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  Result<LinearWeight> w1 = GetLinear(*weights, "layers.0.ffn.shared_experts.w1");
  ASSERT_TRUE(w1.ok()) << w1.status().ToString();
  EXPECT_EQ(w1->format, WeightFormat::kBf16);
  EXPECT_EQ(w1->in, weights->config().hidden_size);
  EXPECT_FALSE(LinearOptionsFor(*w1).quantize_activations);
}

TEST(LinearWeightTest, MissingWeightIsAnErrorNamingIt) {
  Result<ModelWeights> weights = ModelWeights::Load(kGoldenCheckpoints + "/tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  Result<LinearWeight> missing = GetLinear(*weights, "layers.0.ffn.experts.99.w1");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().ToString().find("layers.0.ffn.experts.99.w1.weight"),
            std::string::npos)
      << missing.status().ToString();
}

TEST(LinearWeightTest, NonMatrixTensorIsRejected) {
  Result<ModelWeights> weights = ModelWeights::Load(kGoldenCheckpoints + "/tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  Result<LinearWeight> norm = GetLinear(*weights, "layers.0.ffn_norm");
  ASSERT_FALSE(norm.ok());
  EXPECT_NE(norm.status().ToString().find("layers.0.ffn_norm.weight"), std::string::npos)
      << norm.status().ToString();
}

}  // namespace
}  // namespace dsv41

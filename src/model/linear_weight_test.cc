#include "model/linear_weight.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"
#include "numerics/codecs.h"

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

// Products of one input queued together (one region, shared prepared inputs) give the bits of
// one call each: FP8, MXFP4 and bf16 weights of the same K, fp32 and bf16-rounded outputs, both
// numerics, 1 and 2 threads, rows that split into several tiles and one row.
TEST(LinearWeightTest, ProductsOfOneInputEqualOneCallEach) {
  Result<ModelWeights> weights = ModelWeights::Load(kGoldenCheckpoints + "/tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  std::vector<LinearWeight> ws;
  for (const char* name : {"layers.0.attn.wq_a", "layers.0.ffn.gate", "layers.1.attn.wkv",
                           "layers.3.ffn.experts.7.w1", "layers.0.attn.wq_a"}) {
    Result<LinearWeight> w = GetLinear(*weights, name);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_EQ(w->in, ws.empty() ? w->in : ws.front().in) << name;
    ws.push_back(*w);
  }
  const int64_t in = ws.front().in;
  for (const int64_t rows : {int64_t{1}, int64_t{5}}) {
    std::vector<float> x(static_cast<size_t>(rows * in));
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = Bf16Round(std::sin(0.37f * static_cast<float>(i) + 0.1f) *
                       std::ldexp(1.0f, static_cast<int>(i % 7) - 3));
    }
    for (const Numerics numerics : {Numerics::kFast, Numerics::kReference}) {
      for (const int threads : {1, 2}) {
        OwnedExecContext exec(threads, numerics);
        std::vector<std::vector<float>> one_each(ws.size()), queued(ws.size());
        ProductsOfInput products(x, rows);
        for (size_t k = 0; k < ws.size(); ++k) {
          const bool round = k % 2 == 0;
          one_each[k].assign(static_cast<size_t>(rows * ws[k].out), 0.0f);
          queued[k].assign(one_each[k].size(), -1.0f);
          if (round) {
            LinearBf16(ws[k], x, rows, one_each[k], exec.ctx);
          } else {
            LinearProduct(ws[k], x, rows, one_each[k], exec.ctx);
          }
          products.Add(ws[k], queued[k], round);
        }
        products.Run(exec.ctx);
        for (size_t k = 0; k < ws.size(); ++k) {
          for (size_t i = 0; i < one_each[k].size(); ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(queued[k][i]),
                      std::bit_cast<uint32_t>(one_each[k][i]))
                << "product " << k << " output " << i << ", rows " << rows << ", threads "
                << threads << ", numerics " << static_cast<int>(numerics);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv41

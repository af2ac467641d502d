#include "model/weights.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/mapped_file.h"

namespace dsv41 {
namespace {

const std::string kGoldenCheckpoints = std::string(DSV41_SHARED_DIR) + "/goldens/model/checkpoints";

TEST(ModelWeightsTest, LoadsEveryGoldenCheckpoint) {
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    Result<ModelWeights> weights = ModelWeights::Load(kGoldenCheckpoints + "/" + name);
    ASSERT_TRUE(weights.ok()) << name << ": " << weights.status().ToString();
    EXPECT_EQ(weights->expected().size() + 3, weights->checkpoint().num_tensors())
        << name << ": the checkpoint holds the expected tensors plus image_start/end/newline";
    Result<TensorView> embed = weights->Get("embed.weight");
    ASSERT_TRUE(embed.ok());
    EXPECT_EQ(embed->shape, (Shape{weights->config().vocab_size, weights->config().hidden_size}));
  }
}

std::string TempDir(const char* name) {
  std::filesystem::path path = std::filesystem::path(::testing::TempDir());
  path /= name;
  return path.string();
}

// Writes a checkpoint of `config` holding `tensors` (zero bytes) plus its config.json.
void WriteCheckpoint(const std::string& dir, const ModelConfig& config,
                     const std::vector<TensorSpec>& tensors) {
  std::filesystem::remove_all(dir);
  ShardedCheckpointWriter writer(dir, ShardingOptions{.num_shards = 2});
  for (const TensorSpec& t : tensors) {
    std::vector<std::byte> bytes(TensorBytes(t));
    ASSERT_TRUE(writer.Add(t.name, t.dtype, t.shape, bytes).ok()) << t.name;
  }
  ASSERT_TRUE(writer.Finish().ok());
  ASSERT_TRUE(WriteStringToFile(dir + "/config.json", ConfigToHfJson(config).dump(2)).ok());
}

TEST(ModelWeightsTest, OneErrorListsMissingMisShapedAndWrongDtypeTensors) {
  Result<ModelConfig> config = LoadModelConfig(kGoldenCheckpoints + "/tiny-a");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  std::vector<TensorSpec> tensors = ExpectedTensors(*config, PlanLayers(*config));
  const std::string dir = TempDir("dsv41_bad_weights");
  WriteCheckpoint(dir, *config, tensors);
  ASSERT_TRUE(ModelWeights::Load(dir).ok()) << "the unmodified inventory must load";

  std::vector<TensorSpec> broken;
  for (TensorSpec t : tensors) {
    if (t.name == "layers.2.attn.compressor.wgate.weight") continue;  // missing
    if (t.name == "layers.6.attn.wkv.weight") t.shape[0] += 32;       // mis-shaped
    if (t.name == "layers.0.attn.attn_sink") t.dtype = DType::kBF16;  // wrong dtype
    broken.push_back(t);
  }
  WriteCheckpoint(dir, *config, broken);
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_FALSE(weights.ok());
  const std::string msg = weights.status().message();
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers.2.attn.compressor.wgate.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers.6.attn.wkv.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers.0.attn.attn_sink"), std::string::npos) << msg;
}

TEST(ModelWeightsTest, DsparkTensorsOptionalWhenDisabled) {
  Result<ModelConfig> config = LoadModelConfig(kGoldenCheckpoints + "/tiny-a");
  ASSERT_TRUE(config.ok());
  const std::vector<TensorSpec> no_dspark =
      ExpectedTensors(*config, PlanLayers(*config), InventoryOptions{.include_dspark = false});
  const std::string dir = TempDir("dsv41_no_dspark");
  WriteCheckpoint(dir, *config, no_dspark);
  EXPECT_TRUE(ModelWeights::Load(dir, LoadOptions{.include_dspark = false}).ok());
  Result<ModelWeights> with = ModelWeights::Load(dir);
  ASSERT_FALSE(with.ok());
  EXPECT_NE(with.status().message().find("mtp.0."), std::string::npos);
}

}  // namespace
}  // namespace dsv41

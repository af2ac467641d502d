#include "config/tensor_inventory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "checkpoint/checkpoint.h"

namespace dsv41 {
namespace {

using ::testing::HasSubstr;

const std::string kCheckpoints = std::string(DSV41_SHARED_DIR) + "/goldens/model/checkpoints/";

struct Totals {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

template <typename Pred>
Totals Sum(const std::vector<TensorSpec>& tensors, Pred pred) {
  Totals t;
  for (const TensorSpec& tensor : tensors) {
    if (!pred(tensor.name)) continue;
    ++t.count;
    t.bytes += TensorBytes(tensor);
  }
  return t;
}

const TensorSpec* Find(const std::vector<TensorSpec>& tensors, const std::string& name) {
  for (const TensorSpec& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

std::vector<TensorSpec> ReleasedTensors(const InventoryOptions& options = {}) {
  const ModelConfig config = ReleasedConfig();
  return ExpectedTensors(config, PlanLayers(config), options);
}

// checkpoint.md §6.10: 96,085 tensors / 510,286,023,000 bytes in the index, minus 263 vision
// tensors (970,506,240 bytes) and the three image_* tensors (3 × 10,240 bytes).
TEST(TensorInventoryTest, ReleasedInventoryReconcilesWithTheIndexTotal) {
  const std::vector<TensorSpec> tensors = ReleasedTensors();
  const Totals all = Sum(tensors, [](const std::string&) { return true; });
  EXPECT_EQ(all.count, 96085u - 263u - 3u);
  EXPECT_EQ(all.bytes, 510286023000ull - 970506240ull - 3ull * 10240ull);
  std::set<std::string> names;
  for (const TensorSpec& tensor : tensors) names.insert(tensor.name);
  EXPECT_EQ(names.size(), tensors.size()) << "duplicate names";
}

TEST(TensorInventoryTest, ReleasedInventoryReconcilesPartByPart) {
  const std::vector<TensorSpec> tensors = ReleasedTensors();
  // One plain backbone layer: 13 attn + 2 norms + 6 hc + 3 gate + 2304 routed + 6 shared.
  const Totals layer0 =
      Sum(tensors, [](const std::string& n) { return n.starts_with("layers.0."); });
  EXPECT_EQ(layer0.count, 2334u);
  EXPECT_EQ(layer0.bytes, 7389500888ull);
  const Totals attn =
      Sum(tensors, [](const std::string& n) { return n.starts_with("layers.0.attn."); });
  EXPECT_EQ(attn.count, 13u);
  EXPECT_EQ(attn.bytes, 126743040ull);
  const Totals comp_idx = Sum(tensors, [](const std::string& n) {
    return n.find(".attn.compressor.") != std::string::npos ||
           n.find(".attn.indexer.") != std::string::npos;
  });
  EXPECT_EQ(comp_idx.count, 43u);
  EXPECT_EQ(comp_idx.bytes, 81835008ull);
  const Totals engram =
      Sum(tensors, [](const std::string& n) { return n.find(".engram.") != std::string::npos; });
  EXPECT_EQ(engram.count, 12u);
  EXPECT_EQ(engram.bytes, 203073076240ull);
  const Totals dspark = Sum(tensors, [](const std::string& n) { return n.starts_with("mtp."); });
  EXPECT_EQ(dspark.count, 2401u);
  EXPECT_EQ(dspark.bytes, 7932874632ull);
  const Totals top = Sum(tensors, [](const std::string& n) {
    return !n.starts_with("layers.") && !n.starts_with("mtp.");
  });
  EXPECT_EQ(top.count, 3u);
  EXPECT_EQ(top.bytes, 2647695360ull - 3ull * 10240ull);
  const Totals expert0 =
      Sum(tensors, [](const std::string& n) { return n.starts_with("layers.0.ffn.experts.0."); });
  EXPECT_EQ(expert0.bytes, 18800640ull);
}

TEST(TensorInventoryTest, ReleasedShapesMatchTheSpecTables) {
  const std::vector<TensorSpec> tensors = ReleasedTensors();
  const std::vector<TensorSpec> want = {
      {"layers.0.attn.wq_a.scale", DType::kF8E8M0, {40, 160}},
      {"layers.0.attn.wq_b.weight", DType::kF8E4M3, {32768, 1280}},
      {"layers.0.attn.wo_a.weight", DType::kF8E4M3, {8192, 4096}},
      {"layers.0.attn.wo_b.scale", DType::kF8E8M0, {160, 256}},
      {"layers.0.attn.attn_sink", DType::kF32, {64}},
      {"layers.0.hc_attn_fn", DType::kF32, {24, 20480}},
      {"layers.0.hc_ffn_scale", DType::kF32, {3}},
      {"layers.0.ffn.gate.bias_vl", DType::kF32, {384}},
      {"layers.0.ffn.experts.383.w1.weight", DType::kI8, {2304, 2560}},
      {"layers.0.ffn.experts.0.w2.weight", DType::kI8, {5120, 1152}},
      {"layers.0.ffn.experts.0.w2.scale", DType::kF8E8M0, {5120, 72}},
      {"layers.0.ffn.shared_experts.w1.scale", DType::kF8E8M0, {72, 160}},
      {"layers.2.attn.compressor.wgate.weight", DType::kBF16, {512, 5120}},
      {"layers.20.attn.compressor.wkv.weight", DType::kBF16, {512, 5120}},
      {"layers.24.attn.indexer.wq_b.scale", DType::kF8E8M0, {128, 40}},
      {"layers.24.attn.indexer.weights_proj.weight", DType::kBF16, {32, 5120}},
      {"layers.20.attn.indexer.wk.weight", DType::kBF16, {128, 512}},
      {"layers.1.engram.embed.weight", DType::kF8E4M3, {384006168, 256}},
      {"layers.14.engram.embed.scale", DType::kF8E8M0, {384016682, 8}},
      {"layers.14.engram.wkv.scale", DType::kF8E8M0, {800, 192}},
      {"layers.1.engram.q_weight", DType::kBF16, {4, 5120}},
      {"mtp.0.main_proj.scale", DType::kF8E8M0, {160, 480}},
      {"mtp.1.ffn.gate.weight", DType::kBF16, {128, 5120}},
      {"mtp.2.markov_head.head.weight", DType::kBF16, {129280, 256}},
      {"mtp.2.confidence_head.proj.weight", DType::kBF16, {1, 5376}},
      {"embed.weight", DType::kBF16, {129280, 5120}},
  };
  for (const TensorSpec& w : want) {
    const TensorSpec* have = Find(tensors, w.name);
    ASSERT_NE(have, nullptr) << w.name;
    EXPECT_EQ(*have, w) << w.name;
  }
  for (const char* absent :
       {"layers.20.attn.compressor.wgate.weight", "layers.24.attn.indexer.wk.weight",
        "layers.3.attn.indexer.wq_b.weight", "layers.0.engram.embed.weight",
        "mtp.1.main_proj.weight", "mtp.0.norm.weight", "layers.0.ffn.experts.384.w1.weight",
        "mtp.0.ffn.experts.128.w1.weight", "mtp.0.attn.compressor.wkv.weight"}) {
    EXPECT_EQ(Find(tensors, absent), nullptr) << absent;
  }
}

TEST(TensorInventoryTest, WithoutDsparkNoStageTensors) {
  const std::vector<TensorSpec> tensors = ReleasedTensors({.include_dspark = false});
  EXPECT_EQ(tensors.size(), 95819u - 2401u);
  for (const TensorSpec& tensor : tensors)
    EXPECT_FALSE(tensor.name.starts_with("mtp.")) << tensor.name;
}

TEST(TensorInventoryTest, UnquantisedCheckpointHasBf16WeightsAndFp8EngramTables) {
  ModelConfig config = ReleasedConfig();
  config.quantization = QuantizationConfig{};
  const std::vector<TensorSpec> tensors = ExpectedTensors(config, PlanLayers(config));
  for (const TensorSpec& tensor : tensors) {
    const bool table = tensor.name.find(".engram.embed.") != std::string::npos;
    if (!table) {
      EXPECT_EQ(tensor.name.find(".scale"), std::string::npos) << tensor.name;
      EXPECT_TRUE(tensor.dtype == DType::kBF16 || tensor.dtype == DType::kF32) << tensor.name;
    }
  }
  EXPECT_EQ(*Find(tensors, "layers.1.engram.embed.scale"),
            (TensorSpec{"layers.1.engram.embed.scale", DType::kF8E8M0, {384006168, 8}}));
  EXPECT_EQ(*Find(tensors, "layers.0.ffn.experts.0.w2.weight"),
            (TensorSpec{"layers.0.ffn.experts.0.w2.weight", DType::kBF16, {5120, 2304}}));
}

TEST(TensorInventoryTest, Fp8ExpertsWithoutFp4UseBlockScales) {
  ModelConfig config = ReleasedConfig();
  config.quantization.expert_dtype = "";
  const std::vector<TensorSpec> tensors = ExpectedTensors(config, PlanLayers(config));
  EXPECT_EQ(*Find(tensors, "layers.0.ffn.experts.0.w2.scale"),
            (TensorSpec{"layers.0.ffn.experts.0.w2.scale", DType::kF8E8M0, {160, 72}}));
  EXPECT_EQ(Find(tensors, "layers.0.ffn.experts.0.w2.weight")->dtype, DType::kF8E4M3);
}

TEST(TensorInventoryTest, ScaleShapesRoundPartialTilesUp) {
  ModelConfig config = ReleasedConfig();
  config.quantization.weight_block_rows = 128;
  config.quantization.weight_block_cols = 96;
  const std::vector<TensorSpec> tensors = ExpectedTensors(config, PlanLayers(config));
  // wq_a [1280, 5120]: ceil(1280 / 128) = 10, ceil(5120 / 96) = 54.
  EXPECT_EQ(Find(tensors, "layers.0.attn.wq_a.scale")->shape, (Shape{10, 54}));
}

// The tensors of a checkpoint directory, read through the checkpoint layer.
std::vector<TensorSpec> ReadCheckpointTensors(const Checkpoint& checkpoint) {
  std::vector<TensorSpec> tensors;
  for (const std::string& name : checkpoint.tensor_names()) {
    const std::optional<TensorView> view = checkpoint.Find(name);
    EXPECT_TRUE(view.has_value()) << name;
    if (view) tensors.push_back({name, view->dtype, view->shape});
  }
  return tensors;
}

TEST(TensorInventoryTest, GoldenCheckpointsHoldExactlyTheExpectedTensors) {
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    SCOPED_TRACE(name);
    const std::string dir = kCheckpoints + name;
    Result<ModelConfig> config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    const std::vector<TensorSpec> expected = ExpectedTensors(*config, PlanLayers(*config));
    Result<Checkpoint> checkpoint = Checkpoint::Open(dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
    const std::vector<TensorSpec> present = ReadCheckpointTensors(*checkpoint);
    ASSERT_FALSE(present.empty());
    const Status status = CheckTensors(expected, present);
    EXPECT_TRUE(status.ok()) << status.ToString();
    // Same sets, not only "nothing missing": every present text tensor is expected.
    std::map<std::string, TensorSpec> want, have;
    for (const TensorSpec& t : expected) want.emplace(t.name, t);
    for (const TensorSpec& t : present) {
      if (!t.name.starts_with("image_") && !t.name.starts_with("vision.")) have.emplace(t.name, t);
    }
    EXPECT_EQ(want, have);
    // Expected bytes + the three image_* tensors = the index's total_size.
    uint64_t bytes = 0;
    for (const TensorSpec& t : expected) bytes += TensorBytes(t);
    for (const TensorSpec& t : present) {
      if (t.name.starts_with("image_")) bytes += TensorBytes(t);
    }
    EXPECT_EQ(std::optional<uint64_t>(bytes), checkpoint->index_total_size());
  }
}

std::vector<TensorSpec> TinyTensors(ModelConfig* config_out = nullptr) {
  Result<ModelConfig> config = LoadModelConfig(kCheckpoints + "tiny-a");
  EXPECT_TRUE(config.ok());
  if (config_out != nullptr) *config_out = *config;
  return ExpectedTensors(*config, PlanLayers(*config));
}

TEST(TensorInventoryTest, CheckListsEveryProblemInOneError) {
  const std::vector<TensorSpec> expected = TinyTensors();
  std::vector<TensorSpec> present = expected;
  present.erase(std::remove_if(present.begin(), present.end(),
                               [](const TensorSpec& t) {
                                 return t.name == "layers.2.attn.indexer.wk.weight";
                               }),
                present.end());
  for (TensorSpec& t : present) {
    if (t.name == "layers.7.attn.wkv.weight") t.shape = {72, 256};
    // An F32 tensor under a `.scale` name is refused (U8 holds the same exponent bytes: accepted).
    if (t.name == "layers.4.engram.embed.scale") t.dtype = DType::kF32;
    if (t.name == "layers.4.engram.wkv.scale") t.dtype = DType::kU8;
  }
  present.push_back({"vision.blocks.0.weight", DType::kF32, {3}});
  present.push_back({"image_start", DType::kBF16, {256}});
  present.push_back({"layers.3.attn.compressor.wkv.weight", DType::kBF16, {64, 256}});  // warning
  const Status status = CheckTensors(expected, present);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("3 problems"));
  EXPECT_THAT(status.message(), HasSubstr("'layers.2.attn.indexer.wk.weight': missing"));
  EXPECT_THAT(status.message(),
              HasSubstr("'layers.7.attn.wkv.weight': shape [72, 256], want [64, 256]"));
  EXPECT_THAT(status.message(),
              HasSubstr("'layers.4.engram.embed.scale': dtype F32, want F8_E8M0 (or U8)"));
  EXPECT_THAT(status.message(), testing::Not(HasSubstr("engram.wkv")));
  EXPECT_THAT(status.message(), testing::Not(HasSubstr("vision")));
  EXPECT_THAT(status.message(), testing::Not(HasSubstr("compressor")));
}

TEST(TensorInventoryTest, CheckIgnoresVisionAndOnlyWarnsAboutUnexpectedTensors) {
  const std::vector<TensorSpec> expected = TinyTensors();
  std::vector<TensorSpec> present = expected;
  present.push_back({"vision.blocks.0.weight", DType::kF32, {3}});
  present.push_back({"image_newline", DType::kBF16, {256}});
  present.push_back({"layers.3.attn.indexer.wk.weight", DType::kBF16, {32, 64}});
  testing::internal::CaptureStderr();
  const Status status = CheckTensors(expected, present);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_THAT(log, HasSubstr("layers.3.attn.indexer.wk.weight"));
  EXPECT_THAT(log, testing::Not(HasSubstr("vision")));
  EXPECT_THAT(log, testing::Not(HasSubstr("image_newline")));
}

TEST(TensorInventoryTest, CheckCapsTheListAndCountsTheRest) {
  const std::vector<TensorSpec> expected = TinyTensors();
  const Status status = CheckTensors(expected, {});
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(),
              HasSubstr(std::to_string(expected.size()) + " problems: 'embed.weight': missing"));
  EXPECT_THAT(status.message(),
              HasSubstr("... and " + std::to_string(expected.size() - 20) + " more"));
}

TEST(TensorInventoryTest, CheckReportsDuplicates) {
  const std::vector<TensorSpec> expected = TinyTensors();
  std::vector<TensorSpec> present = expected;
  present.push_back(expected.front());
  EXPECT_THAT(CheckTensors(expected, present).message(),
              HasSubstr("'embed.weight': present twice"));
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

InventoryOptions TextOnly() {
  InventoryOptions options;
  options.include_vision = false;
  return options;
}

// The vision goldens' checkpoint: with its tower the inventory is every tensor of the file
// (19 vision.*, 4 aligner.*, 3 image_*), and their bytes are the index's total.
TEST(VisionInventoryTest, VisionGoldenCheckpointHoldsExactlyTheExpectedTensors) {
  const std::string dir = std::string(DSV41_SHARED_DIR) + "/goldens/vision/checkpoints/tiny-v";
  Result<ModelConfig> config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const std::vector<TensorSpec> expected = ExpectedTensors(*config, PlanLayers(*config));
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  const std::vector<TensorSpec> present = ReadCheckpointTensors(*checkpoint);
  EXPECT_TRUE(CheckTensors(expected, present).ok());
  std::map<std::string, TensorSpec> want, have;
  for (const TensorSpec& t : expected) want.emplace(t.name, t);
  for (const TensorSpec& t : present) have.emplace(t.name, t);
  EXPECT_EQ(want, have);
  EXPECT_EQ(Sum(expected, [](const std::string& n) { return n.starts_with("vision."); }).count,
            19u);
  EXPECT_EQ(Sum(expected, [](const std::string& n) { return n.starts_with("aligner."); }).count,
            4u);
  uint64_t bytes = 0;
  for (const TensorSpec& t : expected) bytes += TensorBytes(t);
  EXPECT_EQ(std::optional<uint64_t>(bytes), checkpoint->index_total_size());
  // Without the tower (include_vision off) the same file still checks: the tower is ignored.
  EXPECT_TRUE(
      CheckTensors(ExpectedTensors(*config, PlanLayers(*config), TextOnly()), present).ok());
}

// vision.md §2: the released tower is 266 tensors (263 without image_*) of 970,536,960 bytes
// (970,506,240 without image_*, checkpoint.md §5).
TEST(VisionInventoryTest, ReleasedTowerCountsAndBytes) {
  ModelConfig config = ReleasedConfig();
  config.vision = ReleasedVisionConfig();
  const std::vector<TensorSpec> tensors = ExpectedTensors(config, PlanLayers(config));
  const auto tower = [](const std::string& n) {
    return n.starts_with("vision.") || n.starts_with("aligner.") || n.starts_with("image_");
  };
  const Totals all = Sum(tensors, tower);
  EXPECT_EQ(all.count, 266u);
  EXPECT_EQ(all.bytes, 970536960u);
  const Totals no_image =
      Sum(tensors, [&](const std::string& n) { return tower(n) && !n.starts_with("image_"); });
  EXPECT_EQ(no_image.count, 263u);
  EXPECT_EQ(no_image.bytes, 970506240u);
  for (const TensorSpec& t : tensors) {
    if (tower(t.name)) {
      EXPECT_EQ(t.dtype, DType::kBF16) << t.name;
    }
  }
  const TensorSpec* w1 = Find(tensors, "vision.blocks.31.mlp.w1.weight");
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->shape, (Shape{5632, 1024}));
  const TensorSpec* aligner = Find(tensors, "aligner.w1.weight");
  ASSERT_NE(aligner, nullptr);
  EXPECT_EQ(aligner->shape, (Shape{5120, 9216}));
}

}  // namespace
}  // namespace dsv41

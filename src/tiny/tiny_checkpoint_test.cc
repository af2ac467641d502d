#include "tiny/tiny_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <span>

#include "base/mapped_file.h"
#include "checkpoint/checkpoint.h"
#include "config/engram_primes.h"
#include "engram/token_map.h"
#include "model/vision_tower.h"
#include "model/weights.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"
#include "text/tokenizer.h"
#include "tiny/synthetic_tokenizer.h"

namespace dsv41 {
namespace {

std::string TempDir(const std::string& name) {
  std::filesystem::path path = std::filesystem::path(::testing::TempDir());
  path /= "dsv41_tiny_" + name;
  std::filesystem::remove_all(path);
  return path.string();
}

Result<TinyCheckpointSummary> WritePreset(const std::string& preset, const std::string& dir,
                                          uint64_t seed = 1) {
  Result<TinySpec> spec = TinyPreset(preset);
  if (!spec.ok()) return spec.status();
  spec->seed = seed;
  return WriteTinyCheckpoint(*spec, dir);
}

// Logical values of a stored tensor (dequantised when it has a scale).
std::vector<float> Values(const ModelWeights& w, const TensorSpec& spec) {
  const TensorView view = *w.Get(spec.name);
  std::vector<float> out;
  const std::string base = spec.name.substr(0, spec.name.size() - 7);
  const std::optional<TensorView> scale = w.checkpoint().Find(base + ".scale");
  auto bytes_u8 = [](const TensorView& v) {
    return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(v.bytes.data()),
                                reinterpret_cast<const uint8_t*>(v.bytes.data()) + v.bytes.size());
  };
  if (spec.dtype == DType::kI8) {
    const int64_t rows = spec.shape[0], cols = spec.shape[1] * 2;
    out.resize(rows * cols);
    DequantizeMxfp4(rows, cols, bytes_u8(view), bytes_u8(*scale), out);
  } else if (spec.dtype == DType::kF8E4M3 && spec.name.find("engram.embed") != std::string::npos) {
    const int64_t rows = spec.shape[0], cols = spec.shape[1];
    out.resize(rows * cols);
    const std::vector<uint8_t> codes = bytes_u8(view), scales = bytes_u8(*scale);
    for (int64_t i = 0; i < rows * cols; ++i) {
      out[i] = F32FromE4m3(codes[i]) * F32FromE8m0(scales[i / 32]);
    }
  } else if (spec.dtype == DType::kF8E4M3) {
    const int64_t rows = spec.shape[0], cols = spec.shape[1];
    out.resize(rows * cols);
    DequantizeFp8Blocks(rows, cols, bytes_u8(view), bytes_u8(*scale), out);
  } else if (spec.dtype == DType::kBF16) {
    out.resize(view.bytes.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, view.bytes.data() + 2 * i, 2);
      out[i] = F32FromBf16(b);
    }
  } else if (spec.dtype == DType::kF32) {
    out.resize(view.bytes.size() / 4);
    std::memcpy(out.data(), view.bytes.data(), view.bytes.size());
  }
  return out;
}

class TinyPresetTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyPresetTest, WritesACheckpointTheLoaderAccepts) {
  const std::string dir = TempDir(GetParam());
  Result<TinyCheckpointSummary> summary = WritePreset(GetParam(), dir);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  EXPECT_EQ(weights->config(), summary->config) << "config.json must read back as written";
  EXPECT_EQ(weights->checkpoint().num_tensors(), summary->num_tensors);
  for (const char* file :
       {"config.json", "inference/config.json", "tokenizer.json", "tokenizer_config.json",
        "generation_config.json", "model.safetensors.index.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + file)) << file;
  }
  Result<ModelConfig> from_inference = [&]() -> Result<ModelConfig> {
    DSV41_ASSIGN_OR_RETURN(Json j, ReadJsonFile(dir + "/inference/config.json"));
    return ParseInferenceConfig(j);
  }();
  ASSERT_TRUE(from_inference.ok()) << from_inference.status().ToString();
  EXPECT_EQ(from_inference->num_hidden_layers, summary->config.num_hidden_layers);
}

// checkpoint.md §8.3: valid codes and scales, no NaN, no all-zero rows anywhere.
TEST_P(TinyPresetTest, ValuesAreFiniteAndNoRowIsZero) {
  const std::string dir = TempDir(GetParam() + "_values");
  ASSERT_TRUE(WritePreset(GetParam(), dir).ok());
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  for (const TensorSpec& spec : weights->expected()) {
    if (spec.name.size() > 6 && spec.name.substr(spec.name.size() - 6) == ".scale") {
      const TensorView scale = *weights->Get(spec.name);
      for (std::byte b : scale.bytes) ASSERT_NE(static_cast<uint8_t>(b), 0xFF) << spec.name;
      continue;
    }
    const std::vector<float> values = Values(*weights, spec);
    ASSERT_FALSE(values.empty()) << spec.name;
    const size_t row =
        spec.shape.size() == 2
            ? static_cast<size_t>(spec.dtype == DType::kI8 ? 2 * spec.shape[1] : spec.shape[1])
            : values.size();
    for (size_t r = 0; r + row <= values.size(); r += row) {
      bool nonzero = false;
      for (size_t i = r; i < r + row; ++i) {
        ASSERT_TRUE(std::isfinite(values[i])) << spec.name << " element " << i;
        nonzero |= values[i] != 0.0f;
      }
      ASSERT_TRUE(nonzero) << spec.name << " row " << r / row << " is all zero";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, TinyPresetTest,
                         ::testing::Values("tiny", "tiny-bf16", "tiny-strict", "tiny-real"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(TinyCheckpointTest, SameSeedSameBytesOtherSeedOtherValues) {
  const std::string a = TempDir("seed_a"), b = TempDir("seed_b"), c = TempDir("seed_c");
  ASSERT_TRUE(WritePreset("tiny", a, 7).ok());
  ASSERT_TRUE(WritePreset("tiny", b, 7).ok());
  ASSERT_TRUE(WritePreset("tiny", c, 8).ok());
  for (const char* file : {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors",
                           "config.json", "tokenizer.json"}) {
    EXPECT_EQ(*ReadFileToString(a + "/" + file), *ReadFileToString(b + "/" + file)) << file;
  }
  EXPECT_NE(*ReadFileToString(a + "/model-00001-of-00003.safetensors"),
            *ReadFileToString(c + "/model-00001-of-00003.safetensors"));
}

// The default preset is the one model that exercises every role (checkpoint.md §8.2).
TEST(TinyCheckpointTest, DefaultPresetExercisesEveryLayerModeAndBothEngramPlacements) {
  const std::string dir = TempDir("roles");
  ASSERT_TRUE(WritePreset("tiny", dir).ok());
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok());
  std::set<LayerMode> modes;
  std::set<CandidateMode> candidate_modes;
  std::set<int32_t> full_ratios, engram_ratios;
  for (const LayerRole& role : weights->plan().layers) {
    modes.insert(role.mode);
    candidate_modes.insert(role.candidate_mode);
    if (role.mode == LayerMode::kFull) full_ratios.insert(role.ratio);
    if (role.has_engram()) engram_ratios.insert(role.ratio);
  }
  EXPECT_EQ(modes, (std::set<LayerMode>{LayerMode::kSwaOnly, LayerMode::kFull, LayerMode::kReindex,
                                        LayerMode::kReuse}));
  EXPECT_TRUE(candidate_modes.count(CandidateMode::kProduce));
  EXPECT_TRUE(candidate_modes.count(CandidateMode::kFilter));
  EXPECT_TRUE(candidate_modes.count(CandidateMode::kPlain));
  EXPECT_EQ(full_ratios, (std::set<int32_t>{1, 2}));
  EXPECT_EQ(engram_ratios, (std::set<int32_t>{0, 2})) << "Engram on a ratio-0 and a ratio>0 layer";
  EXPECT_EQ(weights->plan().num_dspark_stages, 3);
  EXPECT_TRUE(weights->config().quantization.quantized);
}

// The config carries what the engine derives at load: Engram rows = sums of primes (§9.3), the
// token-map class count of the shipped tokenizer (§9.2), the tokenizer's <｜System｜> as noise.
TEST(TinyCheckpointTest, ConfigAgreesWithItsTokenizerAndPrimes) {
  const std::string dir = TempDir("consistency");
  Result<TinyCheckpointSummary> summary = WritePreset("tiny", dir);
  ASSERT_TRUE(summary.ok());
  const ModelConfig& c = summary->config;
  Result<Tokenizer> tokenizer = Tokenizer::Load(dir + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  EXPECT_EQ(tokenizer->vocab_size(), c.vocab_size);
  Result<EngramTokenMap> map = BuildEngramTokenMap(*tokenizer);
  ASSERT_TRUE(map.ok());
  EXPECT_TRUE(CheckClassCount(*map, c.engram_compressed_vocab_size).ok());
  EXPECT_LT(map->num_classes, c.vocab_size) << "case folding must merge some tokens";
  EXPECT_EQ(tokenizer->IdOf("<｜System｜>"), c.dspark_noise_token_id);
  EXPECT_EQ(tokenizer->IdOf("<｜deepseek_image｜>"), c.image_token_id);
  EXPECT_EQ(tokenizer->IdOf("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(tokenizer->IdOf("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(tokenizer->IdOf("<｜▁pad▁｜>"), 2);
  // checkpoint.md §8.2: primes from 31 give tables of 252 and 410 rows.
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<int64_t>{252, 410}));
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok());
  EXPECT_EQ(weights->Get("layers.4.engram.embed.weight")->shape, (Shape{410, 32}));
  EXPECT_EQ(weights->Get("layers.4.engram.embed.scale")->shape, (Shape{410, 1}));
}

// Issue 21: the tiny presets carry a small vision tower under the released names (vision.md §2),
// which the loader checks and the tower loads; with no tower layers the checkpoint is text-only
// and keeps the release's three image_* rows.
TEST(TinyCheckpointTest, PresetsCarryAVisionTowerWithTheReleasedNames) {
  const std::string dir = TempDir("vision");
  Result<TinyCheckpointSummary> summary = WritePreset("tiny", dir);
  ASSERT_TRUE(summary.ok());
  EXPECT_TRUE(summary->config.vision.has_tower());
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  const VisionConfig& v = weights->config().vision;
  EXPECT_EQ(weights->Get("vision.patch_embed.proj.weight")->shape,
            (Shape{v.hidden_size, v.patch_values()}));
  EXPECT_EQ(weights->Get("vision.blocks.1.mlp.w1.weight")->shape,
            (Shape{2 * v.intermediate_size, v.hidden_size}));
  EXPECT_EQ(weights->Get("aligner.w1.weight")->shape,
            (Shape{summary->config.hidden_size,
                   v.downsample_ratio * v.downsample_ratio * v.hidden_size}));
  EXPECT_EQ(weights->Get("image_newline")->dtype, DType::kBF16);
  EXPECT_TRUE(VisionTower::Load(*weights).ok());

  Result<TinySpec> spec = TinyPreset("tiny");
  ASSERT_TRUE(spec.ok());
  spec->config.vision = VisionConfig{};
  const std::string text_dir = TempDir("text_only");
  ASSERT_TRUE(WriteTinyCheckpoint(*spec, text_dir).ok());
  Result<ModelWeights> text_only = ModelWeights::Load(text_dir);
  ASSERT_TRUE(text_only.ok());
  EXPECT_FALSE(text_only->config().vision.has_tower());
  EXPECT_TRUE(text_only->Get("image_start").ok());
  EXPECT_FALSE(text_only->Get("vision.norm.weight").ok());
}

TEST(TinyCheckpointTest, Bf16PresetHasNoScalesButTheEngramTables) {
  const std::string dir = TempDir("bf16_scales");
  ASSERT_TRUE(WritePreset("tiny-bf16", dir).ok());
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok());
  EXPECT_FALSE(weights->config().quantization.quantized);
  for (const std::string& name : weights->checkpoint().tensor_names()) {
    if (name.size() > 6 && name.substr(name.size() - 6) == ".scale") {
      EXPECT_NE(name.find("engram.embed.scale"), std::string::npos) << name;
    }
  }
}

TEST(TinyCheckpointTest, OneShardWritesASingleFile) {
  const std::string dir = TempDir("single");
  Result<TinySpec> spec = TinyPreset("tiny");
  ASSERT_TRUE(spec.ok());
  spec->num_shards = 1;
  ASSERT_TRUE(WriteTinyCheckpoint(*spec, dir).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  EXPECT_TRUE(ModelWeights::Load(dir).ok());
}

TEST(TinyCheckpointTest, InvalidOverridesNameTheField) {
  Result<TinySpec> spec = TinyPreset("tiny");
  ASSERT_TRUE(spec.ok());
  spec->config.kv_source_layer_ids = {1, 4, 6};  // layer 1 has ratio 0
  Result<TinyCheckpointSummary> summary = WriteTinyCheckpoint(*spec, TempDir("invalid"));
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find("kv_source_layer_ids"), std::string::npos)
      << summary.status().message();
  EXPECT_FALSE(TinyPreset("huge").ok());
}

// ---- the strict format (trap list L1–L5) ----------------------------------------------------

std::vector<uint8_t> ScaleBytes(const ModelWeights& w, const std::string& name) {
  const TensorView view = *w.Get(name);
  const auto* p = reinterpret_cast<const uint8_t*>(view.bytes.data());
  return std::vector<uint8_t>(p, p + view.bytes.size());
}

bool IsScale(const std::string& name) { return name.ends_with(".scale"); }

// L1/L2: every scale tensor's codes differ between blocks and spread over ~100..135, at dims
// that are multiples of 32 but not of 128; a wrong block size or a code read as a number then
// changes the weights.
TEST(StrictFormatTest, ScaleCodesSpreadOverTheTilesAtDimsNotAMultipleOf128) {
  const std::string dir = TempDir("strict_codes");
  Result<TinyCheckpointSummary> summary = WritePreset("tiny-strict", dir);
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_NE(summary->config.hidden_size % 128, 0);
  EXPECT_EQ(summary->config.hidden_size % 32, 0);
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  // wq_a [96, 224]: 3 × 7 tiles of 32 (a 128 tile would leave a 96 × 96 tail).
  const std::vector<uint8_t> wq_a = ScaleBytes(*weights, "layers.0.attn.wq_a.scale");
  EXPECT_EQ(weights->Get("layers.0.attn.wq_a.scale")->shape, (Shape{3, 7}));
  EXPECT_GE(std::set<uint8_t>(wq_a.begin(), wq_a.end()).size(), 5u) << "21 tiles, one gain each";
  int lowest = 255, highest = 0;
  size_t num_scales = 0, num_pairs = 0, num_differing = 0;
  for (const std::string& name : weights->checkpoint().tensor_names()) {
    if (!IsScale(name)) continue;
    ++num_scales;
    const std::vector<uint8_t> codes = ScaleBytes(*weights, name);
    const std::set<uint8_t> distinct(codes.begin(), codes.end());
    if (codes.size() >= 4) {
      EXPECT_GE(distinct.size(), 3u) << name;
    }
    // Neighbouring blocks along a row (9 gains per block: ~8 in 9 pairs differ).
    const int64_t row = weights->Get(name)->shape.back();
    for (size_t i = 1; i < codes.size(); ++i) {
      if (static_cast<int64_t>(i) % row == 0) continue;
      ++num_pairs;
      num_differing += codes[i] != codes[i - 1];
    }
    lowest = std::min<int>(lowest, *distinct.begin());
    highest = std::max<int>(highest, *distinct.rbegin());
  }
  EXPECT_GT(num_scales, 100u);
  EXPECT_GT(static_cast<double>(num_differing), 0.8 * static_cast<double>(num_pairs));
  EXPECT_LE(lowest, 105);
  EXPECT_GE(highest, 130);
  // Dequantised values stay finite (checked for every preset in ValuesAreFiniteAndNoRowIsZero).
}

// E4: tiny-real's quantised weights take the release's ranges — FP8 dense weights |w| <= 0.102,
// Engram rows |v| <= 3.25 (both reached within the e4m3 step), experts ~88 % non-zero codes —
// where `tiny` has unit-variance uniform values.
TEST(ReleasedMagnitudesTest, QuantisedWeightsTakeTheReleasedRanges) {
  const std::string dir = TempDir("released_magnitudes");
  ASSERT_TRUE(WritePreset("tiny-real", dir).ok());
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  size_t num_fp8 = 0, num_tables = 0, expert_codes = 0, expert_nonzero = 0;
  for (const TensorSpec& spec : weights->expected()) {
    if (spec.dtype != DType::kF8E4M3 && spec.dtype != DType::kI8) continue;
    const std::vector<float> values = Values(*weights, spec);
    float max_abs = 0.0f;
    for (float v : values) max_abs = std::max(max_abs, std::fabs(v));
    if (spec.dtype == DType::kI8) {
      expert_codes += values.size();
      for (float v : values) expert_nonzero += v != 0.0f;
    } else if (spec.name.ends_with("engram.embed.weight")) {
      ++num_tables;
      EXPECT_GE(max_abs, 3.0f) << spec.name;
      EXPECT_LE(max_abs, 3.5f) << spec.name;
    } else {
      ++num_fp8;
      EXPECT_GE(max_abs, 0.095f) << spec.name;
      EXPECT_LE(max_abs, 0.11f) << spec.name;
    }
  }
  EXPECT_GT(num_fp8, 20u);
  EXPECT_EQ(num_tables, 2u);
  ASSERT_GT(expert_codes, 0u);
  const double nonzero = static_cast<double>(expert_nonzero) / static_cast<double>(expert_codes);
  std::printf("expert E2M1 codes non-zero: %.3f\n", nonzero);
  EXPECT_GT(nonzero, 0.8);
  EXPECT_LT(nonzero, 0.95);
}

// L3: element 2k ≠ element 2k+1 in every packed FP4 byte, so a swapped nibble order shows.
TEST(StrictFormatTest, NoPackedExpertByteHoldsTwoEqualNibbles) {
  const std::string dir = TempDir("strict_nibbles");
  ASSERT_TRUE(WritePreset("tiny-strict", dir).ok());
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  size_t num_experts = 0;
  for (const std::string& name : weights->checkpoint().tensor_names()) {
    const TensorView view = *weights->Get(name);
    if (view.dtype != DType::kI8) continue;
    ++num_experts;
    for (std::byte b : view.bytes) {
      const auto v = static_cast<uint8_t>(b);
      ASSERT_NE(v & 0x0F, v >> 4) << name;
    }
  }
  EXPECT_GT(num_experts, 100u);
}

// L5: 48 shards, each layer's routed experts in shards apart from its attention weights.
TEST(StrictFormatTest, FortyEightShardsWithExpertsApartFromTheirAttention) {
  const std::string dir = TempDir("strict_shards");
  ASSERT_TRUE(WritePreset("tiny-strict", dir).ok());
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  EXPECT_EQ(weights->checkpoint().shards().size(), 48u);
  std::map<std::string, std::set<std::string>> attention_shards, expert_shards;
  for (const std::string& name : weights->checkpoint().tensor_names()) {
    const size_t attn = name.find(".attn.");
    const size_t experts = name.find(".ffn.experts.");
    const std::string shard = weights->checkpoint().Locate(name)->path;
    if (attn != std::string::npos) attention_shards[name.substr(0, attn)].insert(shard);
    if (experts != std::string::npos) expert_shards[name.substr(0, experts)].insert(shard);
  }
  ASSERT_EQ(expert_shards.size(), 13u) << "10 layers and 3 DSpark stages";
  for (const auto& [layer, shards] : expert_shards) {
    for (const std::string& shard : shards) {
      EXPECT_EQ(attention_shards[layer].count(shard), 0u) << layer << ": " << shard;
    }
  }
}

// L2: the same bytes under U8 scale tensors load as the same weights; the simple format's
// neighbouring tiles share codes (what the strict format is for).
TEST(StrictFormatTest, U8ScaleTensorsLoadAsTheSameWeights) {
  Result<TinySpec> spec = TinyPreset("tiny-strict");
  ASSERT_TRUE(spec.ok());
  spec->num_shards = 2;
  const std::string e8m0_dir = TempDir("strict_e8m0");
  const std::string u8_dir = TempDir("strict_u8");
  ASSERT_TRUE(WriteTinyCheckpoint(*spec, e8m0_dir).ok());
  spec->scale_dtype = DType::kU8;
  Result<TinyCheckpointSummary> u8 = WriteTinyCheckpoint(*spec, u8_dir);
  ASSERT_TRUE(u8.ok()) << u8.status().ToString();
  Result<ModelWeights> a = ModelWeights::Load(e8m0_dir);
  Result<ModelWeights> b = ModelWeights::Load(u8_dir);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  size_t num_u8 = 0;
  for (const TensorSpec& t : a->expected()) {
    const TensorView x = *a->Get(t.name);
    const TensorView y = *b->Get(t.name);
    if (IsScale(t.name)) {
      EXPECT_EQ(x.dtype, DType::kF8E8M0) << t.name;
      EXPECT_EQ(y.dtype, DType::kU8) << t.name;
      num_u8 += y.dtype == DType::kU8;
    }
    ASSERT_EQ(x.bytes.size(), y.bytes.size()) << t.name;
    EXPECT_EQ(std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()), 0) << t.name;
    if (!IsScale(t.name)) {
      const std::vector<float> vx = Values(*a, t), vy = Values(*b, t);
      EXPECT_EQ(vx, vy) << t.name;
    }
  }
  EXPECT_GT(num_u8, 100u);
}

// L2 negative: an F32 tensor under a `.scale` name is refused, naming it, not cast.
TEST(StrictFormatTest, F32ScaleTensorIsRefusedNamingIt) {
  Result<TinySpec> spec = TinyPreset("tiny");
  ASSERT_TRUE(spec.ok());
  spec->scale_dtype = DType::kF32;
  const Result<TinyCheckpointSummary> refused = WriteTinyCheckpoint(*spec, TempDir("f32_gen"));
  EXPECT_FALSE(refused.ok()) << "the writer itself only writes exponent bytes";

  // Rewrite one scale of a valid checkpoint as F32 values 2^(code-127) in the same shape.
  const std::string dir = TempDir("f32_scale");
  spec->scale_dtype = DType::kF8E8M0;
  spec->num_shards = 1;
  ASSERT_TRUE(WriteTinyCheckpoint(*spec, dir).ok());
  const std::string victim = "layers.2.attn.wq_b.scale";
  {
    Result<Checkpoint> source = Checkpoint::Open(dir);
    ASSERT_TRUE(source.ok());
    SafetensorsWriter writer;
    std::vector<float> f32;
    for (const std::string& name : source->tensor_names()) {
      const TensorView view = *source->Find(name);
      if (name == victim) {
        for (std::byte b : view.bytes) f32.push_back(F32FromE8m0(static_cast<uint8_t>(b)));
        ASSERT_TRUE(writer.Add(name, DType::kF32, view.shape, std::as_bytes(std::span(f32))).ok());
      } else {
        ASSERT_TRUE(writer.Add(name, view.dtype, view.shape, view.bytes).ok());
      }
    }
    ASSERT_TRUE(writer.Write(dir + "/model.safetensors.new").ok());
  }
  std::filesystem::rename(dir + "/model.safetensors.new", dir + "/model.safetensors");
  Result<ModelWeights> weights = ModelWeights::Load(dir);
  ASSERT_FALSE(weights.ok());
  EXPECT_NE(weights.status().message().find("'" + victim + "': dtype F32, want F8_E8M0 (or U8)"),
            std::string::npos)
      << weights.status().ToString();
}

TEST(SyntheticTokenizerTest, HasExactlyTheVocabAndRoundTripsText) {
  for (int32_t vocab : {300, 512, 2048}) {
    Result<SyntheticTokenizer> synthetic = BuildSyntheticTokenizer(vocab, 3);
    ASSERT_TRUE(synthetic.ok()) << vocab;
    Result<Tokenizer> tokenizer = Tokenizer::FromJson(synthetic->json);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    EXPECT_EQ(tokenizer->vocab_size(), vocab);
    for (int32_t id = 0; id < vocab; ++id) {
      ASSERT_FALSE(tokenizer->TokenString(id).empty()) << "id " << id << " has no token";
    }
    const std::string text = "The engine maps café and 東京 at 12345 tokens/s!\n<think>x</think>";
    Result<std::vector<int32_t>> ids = tokenizer->Encode(text);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(tokenizer->Decode(*ids), text);
    EXPECT_LT(ids->size(), text.size()) << "merges must shorten ordinary text";
  }
  EXPECT_FALSE(BuildSyntheticTokenizer(200, 1).ok());
}

}  // namespace
}  // namespace dsv41

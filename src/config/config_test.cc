#include "config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "base/mapped_file.h"

namespace dsv41 {
namespace {

using ::testing::HasSubstr;

const std::string kTestdata = std::string(DSV41_SOURCE_ROOT) + "/src/config/testdata/";
const std::string kCheckpoints = std::string(DSV41_SHARED_DIR) + "/goldens/model/checkpoints/";

Json ReadJson(const std::string& path) {
  Result<Json> json = ReadJsonFile(path);
  EXPECT_TRUE(json.ok()) << json.status().ToString();
  return json.ok() ? *json : Json::object();
}

// Parses `hf` alone (config.json) and returns the error message, or "" when it parses.
std::string ParseError(const Json& hf) {
  Result<ModelConfig> config = ParseModelConfig(hf);
  return config.ok() ? "" : config.status().message();
}

TEST(ConfigTest, ReleasedHfConfigParsesToReleasedConfig) {
  const Json hf = ReadJson(kTestdata + "released_config.json");
  Result<ModelConfig> config = ParseModelConfig(hf);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, ReleasedConfig());
}

TEST(ConfigTest, ReleasedInferenceConfigParsesToReleasedConfig) {
  const Json ref = ReadJson(kTestdata + "released_inference_config.json");
  Result<ModelConfig> config = ParseInferenceConfig(ref);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ModelConfig want = ReleasedConfig();
  want.image_token_id = -1;  // the fixture's reference file does not carry it
  EXPECT_EQ(*config, want);
}

TEST(ConfigTest, BothReleasedFilesTogetherAgree) {
  const Json hf = ReadJson(kTestdata + "released_config.json");
  const Json ref = ReadJson(kTestdata + "released_inference_config.json");
  Result<ModelConfig> config = ParseModelConfig(hf, ref);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, ReleasedConfig());
}

TEST(ConfigTest, ReleasedConfigHasTheDerivedConstantsOfSpec) {
  const ModelConfig c = ReleasedConfig();
  EXPECT_EQ(c.nope_dim(), 448);
  EXPECT_EQ(c.heads_per_group(), 8);
  EXPECT_EQ(c.group_in(), 4096);
  EXPECT_EQ(c.wo_a_out(), 8192);
  EXPECT_EQ(c.hc_mix_rows(), 24);
  EXPECT_EQ(c.hc_dim(), 20480);
  EXPECT_EQ(c.n_hash_cols(), 24);
  EXPECT_EQ(c.engram_in(), 6144);
  EXPECT_EQ(c.engram_out(), 25600);
  EXPECT_EQ(c.dspark_in(), 15360);
  EXPECT_EQ(c.confidence_in(), 5376);
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c).ToString();
}

TEST(ConfigTest, GoldenTinyConfigsLoadFromEitherFileAlike) {
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    SCOPED_TRACE(name);
    const std::string dir = kCheckpoints + name;
    Result<ModelConfig> both = LoadModelConfig(dir);
    ASSERT_TRUE(both.ok()) << both.status().ToString();
    const Json hf = ReadJson(dir + "/config.json");
    const Json ref = ReadJson(dir + "/inference/config.json");
    Result<ModelConfig> from_hf = ParseModelConfig(hf);
    Result<ModelConfig> from_ref = ParseInferenceConfig(ref);
    ASSERT_TRUE(from_hf.ok()) << from_hf.status().ToString();
    ASSERT_TRUE(from_ref.ok()) << from_ref.status().ToString();
    EXPECT_EQ(*from_hf, *both);
    EXPECT_EQ(*from_ref, *both);
  }
}

TEST(ConfigTest, GoldenTinyConfigsHaveTheirFileValues) {
  Result<ModelConfig> a = LoadModelConfig(kCheckpoints + "tiny-a");
  Result<ModelConfig> b = LoadModelConfig(kCheckpoints + "tiny-b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->num_hidden_layers, 10);
  EXPECT_EQ(a->num_nextn_predict_layers, 2);
  EXPECT_EQ(a->compress_ratios, (std::vector<int32_t>{0, 0, 2, 2, 2, 2, 1, 1, 1, 1}));
  EXPECT_EQ(a->engram_num_embeddings, (std::vector<int64_t>{630, 834}));
  EXPECT_TRUE(a->quantization.quantized);
  EXPECT_EQ(a->quantization.expert_dtype, "fp4");
  EXPECT_EQ(a->compress_yarn.original_max_position_embeddings, 65536);
  EXPECT_EQ(a->rms_norm_eps, 1e-20);
  EXPECT_EQ(a->image_token_id, 511);
  EXPECT_FALSE(b->quantization.quantized);
  EXPECT_EQ(b->engram_max_ngram_size, 3);
  EXPECT_EQ(b->dspark_num_experts_per_tok, 1);
  EXPECT_EQ(b->compress_ratios, (std::vector<int32_t>{0, 2, 2, 1, 1, 1}));
}

Json ToJson(const OrderedJson& ordered) {
  Result<Json> json = ParseJson(ordered.dump(), "emitted config");
  EXPECT_TRUE(json.ok());
  return json.ok() ? *json : Json::object();
}

TEST(ConfigTest, EmittedConfigsParseBackToTheSameConfig) {
  std::vector<ModelConfig> configs = {ReleasedConfig()};
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    Result<ModelConfig> c = LoadModelConfig(kCheckpoints + name);
    ASSERT_TRUE(c.ok());
    configs.push_back(*c);
  }
  ModelConfig odd = ReleasedConfig();  // values the reference file does not usually carry
  odd.norm_topk_prob = false;
  odd.gate_temp = 0.5;
  odd.max_position_embeddings = 4096;
  odd.quantization.expert_dtype = "";
  odd.candidate_source_layer_id = -1;
  configs.push_back(odd);
  for (size_t i = 0; i < configs.size(); ++i) {
    SCOPED_TRACE(i);
    const Json hf = ToJson(ConfigToHfJson(configs[i]));
    const Json ref = ToJson(ConfigToInferenceJson(configs[i]));
    Result<ModelConfig> from_hf = ParseModelConfig(hf);
    Result<ModelConfig> from_ref = ParseInferenceConfig(ref);
    Result<ModelConfig> from_both = ParseModelConfig(hf, ref);
    ASSERT_TRUE(from_hf.ok()) << from_hf.status().ToString();
    ASSERT_TRUE(from_ref.ok()) << from_ref.status().ToString();
    ASSERT_TRUE(from_both.ok()) << from_both.status().ToString();
    EXPECT_EQ(*from_hf, configs[i]);
    EXPECT_EQ(*from_ref, configs[i]);
    EXPECT_EQ(*from_both, configs[i]);
  }
}

OrderedJson ReadOrdered(const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  EXPECT_TRUE(text.ok());
  Result<OrderedJson> json = ParseOrderedJson(text.ok() ? *text : "{}", path);
  EXPECT_TRUE(json.ok());
  return json.ok() ? *json : OrderedJson::object();
}

TEST(ConfigTest, EmittedConfigsHaveTheGoldenLayout) {
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    SCOPED_TRACE(name);
    const std::string dir = kCheckpoints + name;
    Result<ModelConfig> c = LoadModelConfig(dir);
    ASSERT_TRUE(c.ok());
    OrderedJson hf = ReadOrdered(dir + "/config.json");
    hf.erase("vision_config");  // not part of the text model
    EXPECT_EQ(ConfigToHfJson(*c), hf) << ConfigToHfJson(*c).dump(1);
    OrderedJson ref = ReadOrdered(dir + "/inference/config.json");
    ref.erase("vision_n_layers");
    EXPECT_EQ(ConfigToInferenceJson(*c), ref) << ConfigToInferenceJson(*c).dump(1);
  }
}

// The released HF config with one change.
Json ReleasedHf(const std::function<void(Json& top, Json& text)>& mutate) {
  Json hf = ReadJson(kTestdata + "released_config.json");
  mutate(hf, hf["text_config"]);
  return hf;
}

TEST(ConfigTest, BareTextConfigIsTheTextConfig) {
  Json hf = ReadJson(kTestdata + "released_config.json");
  Json bare = hf["text_config"];
  bare["quantization_config"] = hf["quantization_config"];
  bare["image_token_id"] = 129264;
  Result<ModelConfig> config = ParseModelConfig(bare);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, ReleasedConfig());
}

TEST(ConfigTest, QuantizationConfigInsideTextConfigIsRead) {
  const Json hf = ReleasedHf([](Json& top, Json& text) {
    text["quantization_config"] = top["quantization_config"];
    top.erase("quantization_config");
  });
  Result<ModelConfig> config = ParseModelConfig(hf);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, ReleasedConfig());
}

TEST(ConfigTest, AbsentQuantizationConfigMeansUnquantised) {
  const Json hf = ReleasedHf([](Json& top, Json&) { top.erase("quantization_config"); });
  Result<ModelConfig> config = ParseModelConfig(hf);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->quantization.quantized);
}

TEST(ConfigTest, ReferenceDtypeBf16AndNullExpertDtypeAreRead) {
  Json ref = ReadJson(kTestdata + "released_inference_config.json");
  ref["dtype"] = "bf16";
  ref["expert_dtype"] = nullptr;
  Result<ModelConfig> bf16 = ParseInferenceConfig(ref);
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  EXPECT_EQ(bf16->quantization, QuantizationConfig{});
  ref["dtype"] = "fp8";
  Result<ModelConfig> fp8 = ParseInferenceConfig(ref);
  ASSERT_TRUE(fp8.ok()) << fp8.status().ToString();
  EXPECT_TRUE(fp8->quantization.quantized);
  EXPECT_EQ(fp8->quantization.expert_dtype, "");
}

TEST(ConfigTest, NestedRopeParametersAreRead) {
  const Json hf = ReleasedHf([](Json&, Json& text) {
    text.erase("rope_theta");
    text.erase("compress_rope_theta");
    text.erase("rope_scaling");
    text["rope_parameters"] = {{"main", {{"rope_type", "default"}, {"rope_theta", 10000}}},
                               {"compress",
                                {{"rope_type", "yarn"},
                                 {"rope_theta", 160000},
                                 {"factor", 16},
                                 {"original_max_position_embeddings", 65536},
                                 {"beta_fast", 32},
                                 {"beta_slow", 1}}}};
  });
  Result<ModelConfig> config = ParseModelConfig(hf);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, ReleasedConfig());
}

TEST(ConfigTest, EngramPadIdSpellingIsAccepted) {
  const Json hf = ReleasedHf([](Json&, Json& text) {
    text.erase("engram_pad_token_id");
    text["engram_pad_id"] = 7;
  });
  Result<ModelConfig> config = ParseModelConfig(hf);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->engram_pad_token_id, 7);
}

TEST(ConfigTest, AbsentEngramPadDefaultsToTwo) {
  const Json hf = ReleasedHf([](Json&, Json& text) { text.erase("engram_pad_token_id"); });
  Result<ModelConfig> config = ParseModelConfig(hf);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->engram_pad_token_id, 2);
}

TEST(ConfigTest, CompressRatiosWithoutStageEntriesAreAccepted) {
  const Json hf = ReleasedHf([](Json&, Json& text) {
    Json& ratios = text["compress_ratios"];
    ratios.erase(ratios.size() - 1);
    ratios.erase(ratios.size() - 1);
    ratios.erase(ratios.size() - 1);
  });
  Result<ModelConfig> config = ParseModelConfig(hf);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, ReleasedConfig());
}

TEST(ConfigTest, NonZeroStageRatioIsRejected) {
  const Json hf = ReleasedHf([](Json&, Json& text) { text["compress_ratios"][41] = 1; });
  EXPECT_THAT(ParseError(hf), HasSubstr("config.json: text_config.compress_ratios: entry 41"));
}

TEST(ConfigTest, CompressRatiosTooShortOrTooLongAreRejected) {
  const Json short_hf =
      ReleasedHf([](Json&, Json& text) { text["compress_ratios"] = std::vector<int>(39, 1); });
  EXPECT_THAT(ParseError(short_hf), HasSubstr("compress_ratios: 39 entries"));
  const Json long_hf = ReleasedHf([](Json&, Json& text) { text["compress_ratios"].push_back(0); });
  EXPECT_THAT(ParseError(long_hf), HasSubstr("compress_ratios: 44 entries"));
}

TEST(ConfigTest, DisagreeingFilesAreRejectedNamingBoth) {
  const Json hf = ReadJson(kTestdata + "released_config.json");
  Json ref = ReadJson(kTestdata + "released_inference_config.json");
  ref["dim"] = 4096;
  Result<ModelConfig> config = ParseModelConfig(hf, ref);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("config.json: text_config.hidden_size = 5120"));
  EXPECT_THAT(config.status().message(), HasSubstr("inference/config.json: dim = 4096"));
}

TEST(ConfigTest, DisagreeingQuantizationIsRejected) {
  const Json hf = ReadJson(kTestdata + "released_config.json");
  Json ref = ReadJson(kTestdata + "released_inference_config.json");
  ref["dtype"] = "bf16";
  Result<ModelConfig> config = ParseModelConfig(hf, ref);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("inference/config.json: dtype"));
}

TEST(ConfigTest, TypeErrorsNameFileAndField) {
  const Json string_int = ReleasedHf([](Json&, Json& text) { text["hidden_size"] = "5120"; });
  EXPECT_EQ(ParseError(string_int),
            "config.json: text_config.hidden_size: want an integer, got string \"5120\"");
  const Json fraction = ReleasedHf([](Json&, Json& text) { text["head_dim"] = 512.5; });
  EXPECT_THAT(ParseError(fraction), HasSubstr("text_config.head_dim: want an integer"));
  const Json list_item =
      ReleasedHf([](Json&, Json& text) { text["kv_source_layer_ids"][1] = "8"; });
  EXPECT_THAT(ParseError(list_item), HasSubstr("text_config.kv_source_layer_ids[1]: want an"));
  const Json not_list = ReleasedHf([](Json&, Json& text) { text["engram_layer_ids"] = 1; });
  EXPECT_THAT(ParseError(not_list), HasSubstr("text_config.engram_layer_ids: want a list"));
  const Json not_bool = ReleasedHf([](Json&, Json& text) { text["norm_topk_prob"] = 1; });
  EXPECT_THAT(ParseError(not_bool), HasSubstr("text_config.norm_topk_prob: want true or false"));
  const Json not_number = ReleasedHf([](Json&, Json& text) { text["rms_norm_eps"] = "1e-20"; });
  EXPECT_THAT(ParseError(not_number), HasSubstr("text_config.rms_norm_eps: want a number"));
  const Json too_big = ReleasedHf([](Json&, Json& text) { text["vocab_size"] = 1LL << 40; });
  EXPECT_THAT(ParseError(too_big), HasSubstr("text_config.vocab_size: 1099511627776 is out of"));
  const Json bad_func = ReleasedHf([](Json&, Json& text) { text["scoring_func"] = "relu"; });
  EXPECT_THAT(ParseError(bad_func), HasSubstr("text_config.scoring_func: \"relu\" is not one of"));
  const Json bad_rope =
      ReleasedHf([](Json&, Json& text) { text["rope_scaling"]["rope_type"] = "linear"; });
  EXPECT_THAT(ParseError(bad_rope), HasSubstr("text_config.rope_scaling.rope_type: \"linear\""));
  const Json bad_quant =
      ReleasedHf([](Json& top, Json&) { top["quantization_config"]["weight_block_size"] = {32}; });
  EXPECT_THAT(ParseError(bad_quant), HasSubstr("quantization_config.weight_block_size: want 2"));
}

TEST(ConfigTest, AbsurdLayerCountIsRejectedBeforeSizingLists) {
  const Json hf = ReleasedHf([](Json&, Json& text) {
    text["num_hidden_layers"] = 2000000000;
    text.erase("compress_ratios");
  });
  EXPECT_EQ(ParseError(hf), "config.json: text_config.num_hidden_layers: 2000000000; want 1..4096");
}

TEST(ConfigTest, MissingRequiredFieldIsRejected) {
  const Json hf = ReleasedHf([](Json&, Json& text) { text.erase("hidden_size"); });
  EXPECT_EQ(ParseError(hf),
            "config.json: text_config.hidden_size: missing (the field has no "
            "default)");
}

TEST(ConfigTest, UnknownFieldsAreIgnored) {
  const Json hf = ReleasedHf([](Json& top, Json& text) {
    top["something_new"] = {1, 2};
    text["another_field"] = "x";
  });
  EXPECT_EQ(ParseError(hf), "");
}

// model.md §1 "absent on purpose" (trap L7): a V4-style config asking for hash-routed or dense
// layers, group-limited routing or a learned head mix is refused naming the field; the keys'
// neutral values pass.
TEST(ConfigTest, FieldsAbsentOnPurposeAreRefusedUnlessNeutral) {
  EXPECT_EQ(ParseError(ReleasedHf([](Json&, Json& text) { text["num_hash_layers"] = 3; })),
            "config.json: text_config.num_hash_layers = 3: DeepSeek-V4.1 has no hash-routed layers "
            "(want 0 or no field)");
  EXPECT_EQ(ParseError(ReleasedHf([](Json&, Json& text) { text["first_k_dense_replace"] = 1; })),
            "config.json: text_config.first_k_dense_replace = 1: DeepSeek-V4.1 has no dense FFN "
            "layers (want 0 or no field)");
  EXPECT_EQ(ParseError(ReleasedHf([](Json&, Json& text) { text["n_group"] = 8; })),
            "config.json: text_config.n_group = 8: DeepSeek-V4.1 has no group-limited routing "
            "(want 1 or no field)");
  EXPECT_EQ(ParseError(ReleasedHf([](Json&, Json& text) { text["hc_head_fn"] = {1}; })),
            "config.json: text_config.hc_head_fn: DeepSeek-V4.1 has no learned head mix");
  EXPECT_EQ(ParseError(ReleasedHf([](Json&, Json& text) {
              text["num_hash_layers"] = 0;
              text["n_group"] = 1;
              text["topk_group"] = 1;
              text["first_k_dense_replace"] = 0;
            })),
            "");
}

TEST(ConfigTest, ValidationErrorsNameFileAndField) {
  const Json hf = ReadJson(kCheckpoints + "tiny-a/config.json");
  Json bad = hf;
  bad["text_config"]["kv_source_layer_ids"] = {0, 2, 4, 6};
  EXPECT_EQ(ParseError(bad),
            "config.json: text_config.kv_source_layer_ids: layer 0 has compress ratio 0; a kv "
            "source needs ratio > 0");
  Json ref = ReadJson(kCheckpoints + "tiny-a/inference/config.json");
  ref["kv_source_layers"] = {0, 2, 4, 6};
  Result<ModelConfig> config = ParseInferenceConfig(ref);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "inference/config.json: kv_source_layers: layer 0 has compress ratio 0; a kv source "
            "needs ratio > 0");
}

TEST(ConfigTest, AbsentFieldsTakeTheSpecDefaults) {
  Json text = ReadJson(kCheckpoints + "tiny-a/config.json")["text_config"];
  for (const char* key :
       {"compress_ratios", "kv_source_layer_ids", "index_source_layer_ids",
        "dspark_target_layer_ids", "candidate_source_layer_id", "swiglu_limit",
        "routed_scaling_factor", "norm_topk_prob", "dspark_n_routed_experts",
        "dspark_num_experts_per_tok", "engram_pad_token_id", "max_position_embeddings"}) {
    text.erase(key);
  }
  Result<ModelConfig> config = ParseModelConfig(text);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  // n = 10: 2 SWA layers, floor(9 / 2) = 4 ratio-2 layers, 4 ratio-1 layers.
  EXPECT_EQ(config->compress_ratios, (std::vector<int32_t>{0, 0, 2, 2, 2, 2, 1, 1, 1, 1}));
  EXPECT_EQ(config->kv_source_layer_ids, (std::vector<int32_t>{2, 6}));
  EXPECT_EQ(config->index_source_layer_ids, (std::vector<int32_t>{2, 6}));
  EXPECT_EQ(config->dspark_target_layer_ids, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(config->candidate_source_layer_id, -1);
  EXPECT_EQ(config->swiglu_limit, 0.0);
  EXPECT_EQ(config->routed_scaling_factor, 1.0);
  EXPECT_TRUE(config->norm_topk_prob);
  EXPECT_EQ(config->gate_temp, 1.0);
  EXPECT_EQ(config->dspark_n_routed_experts, 8);
  EXPECT_EQ(config->dspark_num_experts_per_tok, 2);
  EXPECT_EQ(config->engram_pad_token_id, 2);
  EXPECT_EQ(config->max_position_embeddings, 65536 * 16);
}

TEST(ConfigTest, AbsentRatiosOfFortyLayersAreTheReleasedPattern) {
  const Json hf = ReleasedHf([](Json&, Json& text) {
    text.erase("compress_ratios");
    text.erase("kv_source_layer_ids");
    text.erase("index_source_layer_ids");
  });
  Result<ModelConfig> config = ParseModelConfig(hf);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(*config, ReleasedConfig());
}

TEST(ConfigTest, LoadReadsInferenceConfigJsonAlone) {
  const std::string dir = testing::TempDir() + "/dsv41_config_test_ref_only";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/config.json");
  Result<std::string> text = ReadFileToString(kTestdata + "released_inference_config.json");
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(WriteStringToFile(dir + "/inference_config.json", *text).ok());
  Result<ModelConfig> config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->hidden_size, 5120);

  Json ref = ReadJson(kTestdata + "released_inference_config.json");
  ref["dim"] = "x";
  ASSERT_TRUE(WriteStringToFile(dir + "/inference_config.json", ref.dump()).ok());
  EXPECT_THAT(LoadModelConfig(dir).status().message(),
              HasSubstr("inference_config.json: dim: want an integer"));
}

TEST(ConfigTest, LoadWithoutAnyConfigIsNotFound) {
  const std::string dir = testing::TempDir() + "/dsv41_config_test_empty";
  std::filesystem::create_directories(dir);
  EXPECT_EQ(LoadModelConfig(dir).status().code(), StatusCode::kNotFound);
}

TEST(ConfigTest, NonObjectConfigIsRejected) {
  const Json list = Json::array({1, 2});
  EXPECT_THAT(ParseError(list), HasSubstr("config.json: want a JSON object"));
  EXPECT_THAT(ParseInferenceConfig(list).status().message(),
              HasSubstr("inference/config.json: want a JSON object"));
}

// --- One case per validation rule of model.md §1.6 (plus the sizes the inventory needs). ---

struct RuleCase {
  const char* name;
  std::function<void(ModelConfig&)> mutate;
  const char* want;  // the start of the message: "<field>: <why>"
};

std::ostream& operator<<(std::ostream& os, const RuleCase& rule) { return os << rule.name; }

class ValidationRuleTest : public testing::TestWithParam<RuleCase> {};

TEST_P(ValidationRuleTest, TripsTheRule) {
  ModelConfig config = ReleasedConfig();
  ASSERT_TRUE(ValidateConfig(config).ok());
  GetParam().mutate(config);
  const Status status = ValidateConfig(config);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), testing::StartsWith(GetParam().want));
}

const RuleCase kRuleCases[] = {
    {"NoLayers", [](ModelConfig& c) { c.num_hidden_layers = 0; }, "num_hidden_layers: 0"},
    {"NegativeStages", [](ModelConfig& c) { c.num_nextn_predict_layers = -1; },
     "num_nextn_predict_layers: -1"},
    {"RatioCountDiffers", [](ModelConfig& c) { c.compress_ratios.pop_back(); },
     "compress_ratios: 39 backbone entries"},
    {"RatioThree", [](ModelConfig& c) { c.compress_ratios[5] = 3; },
     "compress_ratios: layer 5 has ratio 3"},
    {"KvSourcesUnsorted",
     [](ModelConfig& c) {
       c.kv_source_layer_ids = {8, 2, 14, 20};
     },
     "kv_source_layer_ids: must be sorted and unique; layer 2 follows layer 8"},
    {"KvSourcesRepeated",
     [](ModelConfig& c) {
       c.kv_source_layer_ids = {2, 2, 8, 14, 20};
     },
     "kv_source_layer_ids: must be sorted and unique"},
    {"KvSourceOutOfRange", [](ModelConfig& c) { c.kv_source_layer_ids.push_back(40); },
     "kv_source_layer_ids: layer 40 is out of range"},
    {"KvSourceOnRatioZero",
     [](ModelConfig& c) {
       c.kv_source_layer_ids = {1, 2, 8, 14, 20};
     },
     "kv_source_layer_ids: layer 1 has compress ratio 0; a kv source needs ratio > 0"},
    {"IndexSourceOnRatioZero",
     [](ModelConfig& c) { c.index_source_layer_ids.insert(c.index_source_layer_ids.begin(), 0); },
     "index_source_layer_ids: layer 0 has compress ratio 0"},
    {"IndexSourcesUnsorted",
     [](ModelConfig& c) { std::swap(c.index_source_layer_ids[0], c.index_source_layer_ids[1]); },
     "index_source_layer_ids: must be sorted"},
    {"KvSourceNotIndexSource",
     [](ModelConfig& c) { c.index_source_layer_ids = {2, 14, 20, 24, 28, 32, 36}; },
     "index_source_layer_ids: kv source layer 8 is not an index source"},
    {"CompressedLayerWithoutKvSource",
     [](ModelConfig& c) {
       c.kv_source_layer_ids = {8, 14, 20};
       c.index_source_layer_ids = {8, 14, 20, 24, 28, 32, 36};
     },
     "kv_source_layer_ids: layer 2 has ratio 2 but no kv source at or below it"},
    {"RatioDiffersFromKvSource", [](ModelConfig& c) { c.compress_ratios[3] = 1; },
     "compress_ratios: layer 3 has ratio 1 but its kv source layer 2 has ratio 2"},
    {"CandidateNotIndexSource", [](ModelConfig& c) { c.candidate_source_layer_id = 21; },
     "candidate_source_layer_id: layer 21 is not an index source"},
    {"CandidateNotKvSource", [](ModelConfig& c) { c.candidate_source_layer_id = 24; },
     "candidate_source_layer_id: layer 24 is not a kv source"},
    {"KvSourceAfterCandidateWithOtherRatio",
     [](ModelConfig& c) { c.candidate_source_layer_id = 14; },
     "kv_source_layer_ids: kv source layer 20 (ratio 1) follows candidate source layer 14"},
    {"CandidatePoolSmallerThanTopk", [](ModelConfig& c) { c.candidate_topk_blocks = 64; },
     "candidate_topk_blocks: (candidate_topk_blocks - 1) * candidate_block_size + 1 = 505 < "
     "index_topk 512"},
    {"CandidateTopkBlocksZero", [](ModelConfig& c) { c.candidate_topk_blocks = 0; },
     "candidate_topk_blocks: 0; want >= 1"},
    {"CandidateBlockSizeZero", [](ModelConfig& c) { c.candidate_block_size = 0; },
     "candidate_block_size: 0; want >= 1"},
    {"CandidateBlockSizeZeroWithoutCandidateLevel",
     [](ModelConfig& c) {
       c.candidate_source_layer_id = -1;
       c.candidate_block_size = 0;
     },
     "candidate_block_size: 0; want >= 1"},
    {"IndexTopkZero",
     [](ModelConfig& c) {
       c.candidate_source_layer_id = -1;
       c.index_topk = 0;
     },
     "index_topk: 0; want >= 1"},
    {"EngramLayerRepeated",
     [](ModelConfig& c) {
       c.engram_layer_ids = {1, 1};
     },
     "engram_layer_ids: layer 1 is listed twice"},
    {"EngramLayerOutOfRange",
     [](ModelConfig& c) {
       c.engram_layer_ids = {1, 40};
     },
     "engram_layer_ids: layer 40 is out of range"},
    {"EngramRowCountsMissing", [](ModelConfig& c) { c.engram_num_embeddings = {384006168}; },
     "engram_num_embeddings: 1 entries; want one per engram_layer_ids entry (2)"},
    {"EngramRowsNotThePrimeSum", [](ModelConfig& c) { c.engram_num_embeddings[1] = 384016683; },
     "engram_num_embeddings: entry 1 (layer 14) is 384016683, but that layer's primes sum to "
     "384016682"},
    {"EngramOrderOne", [](ModelConfig& c) { c.engram_max_ngram_size = 1; },
     "engram_max_ngram_size: 1; want 2 .. 16"},
    {"EngramOrderTooLong", [](ModelConfig& c) { c.engram_max_ngram_size = 17; },
     "engram_max_ngram_size: 17; want 2 .. 16"},
    {"EngramNoHeads", [](ModelConfig& c) { c.engram_n_heads = 0; }, "engram_n_heads: 0"},
    {"EngramHeadDimNotBlockMultiple", [](ModelConfig& c) { c.engram_head_dim = 240; },
     "engram_head_dim: 240 is not a positive multiple of 32"},
    {"EngramVocabZero", [](ModelConfig& c) { c.engram_vocab_size = 0; }, "engram_vocab_size: 0"},
    {"EngramPadOutsideVocab", [](ModelConfig& c) { c.engram_pad_token_id = 129280; },
     "engram_pad_token_id: 129280 is not a token id"},
    {"EngramCompressedVocabZero", [](ModelConfig& c) { c.engram_compressed_vocab_size = 0; },
     "engram_compressed_vocab_size: 0"},
    {"DsparkTargetOutOfRange",
     [](ModelConfig& c) {
       c.dspark_target_layer_ids = {37, 38, 40};
     },
     "dspark_target_layer_ids: layer 40 is out of range"},
    {"DsparkNoTargets", [](ModelConfig& c) { c.dspark_target_layer_ids.clear(); },
     "dspark_target_layer_ids: empty"},
    {"DsparkBlockSizeZero", [](ModelConfig& c) { c.dspark_block_size = 0; },
     "dspark_block_size: 0; want >= 1"},
    {"DsparkNoiseTokenOutsideVocab", [](ModelConfig& c) { c.dspark_noise_token_id = 129280; },
     "dspark_noise_token_id: 129280 is not a token id of vocab_size 129280"},
    {"DsparkMarkovRankZero", [](ModelConfig& c) { c.dspark_markov_rank = 0; },
     "dspark_markov_rank: 0"},
    {"DsparkTopkAboveExperts", [](ModelConfig& c) { c.dspark_num_experts_per_tok = 129; },
     "dspark_num_experts_per_tok: 129"},
    {"TwoKvHeads", [](ModelConfig& c) { c.num_key_value_heads = 2; },
     "num_key_value_heads: 2; the model has one shared K=V latent"},
    {"AttentionBias", [](ModelConfig& c) { c.attention_bias = true; },
     "attention_bias: true; must be false"},
    {"HeadsNotMultipleOfGroups", [](ModelConfig& c) { c.o_groups = 7; },
     "o_groups: num_attention_heads 64 is not a multiple of o_groups 7"},
    {"OddRopeDim", [](ModelConfig& c) { c.qk_rope_head_dim = 63; },
     "qk_rope_head_dim: 63; want an even number"},
    {"RopeDimNotBelowHeadDim", [](ModelConfig& c) { c.qk_rope_head_dim = 512; },
     "qk_rope_head_dim: 512; want < head_dim 512"},
    {"RopeDimAboveIndexHeadDim", [](ModelConfig& c) { c.index_head_dim = 32; },
     "qk_rope_head_dim: 64 > index_head_dim 32"},
    {"ActivationNotSilu", [](ModelConfig& c) { c.hidden_act = "gelu"; }, "hidden_act: \"gelu\""},
    {"TwoSharedExperts", [](ModelConfig& c) { c.n_shared_experts = 2; },
     "n_shared_experts: 2; must be 1"},
    {"HiddenNotBlockMultiple", [](ModelConfig& c) { c.hidden_size = 5104; },
     "hidden_size: 5104 is not a multiple of 32"},
    {"QLoraNotBlockMultiple", [](ModelConfig& c) { c.q_lora_rank = 1288; },
     "q_lora_rank: 1288 is not a multiple of 32"},
    {"WoBInputNotBlockMultiple", [](ModelConfig& c) { c.o_lora_rank = 1021; },
     "o_lora_rank: o_groups * o_lora_rank = 8168 is not a multiple of 32"},
    {"MoeInterNotBlockMultiple", [](ModelConfig& c) { c.moe_intermediate_size = 2300; },
     "moe_intermediate_size: 2300 is not a multiple of 32"},
    {"HeadDimNotBlockMultiple", [](ModelConfig& c) { c.head_dim = 496; },
     "head_dim: 496 is not a multiple of 32"},
    {"IndexHeadDimNotBlockMultiple", [](ModelConfig& c) { c.index_head_dim = 112; },
     "index_head_dim: 112 is not a positive multiple of 32"},
    {"IndexHeadDimPastTheKeyTile", [](ModelConfig& c) { c.index_head_dim = 1056; },
     "index_head_dim: 1056; the indexer's key tiles hold at most 1024"},
    {"ExpertsPerTokenAboveExperts", [](ModelConfig& c) { c.num_experts_per_tok = 385; },
     "num_experts_per_tok: 385"},
    {"NoVocab", [](ModelConfig& c) { c.vocab_size = 0; }, "vocab_size: 0"},
    {"NoWindow", [](ModelConfig& c) { c.sliding_window = 0; }, "sliding_window: 0"},
    {"ZeroEps", [](ModelConfig& c) { c.rms_norm_eps = 0; }, "rms_norm_eps: 0"},
    {"EosOutsideVocab", [](ModelConfig& c) { c.eos_token_id = 129280; },
     "eos_token_id: 129280 is not a token id"},
    {"YarnFactorBelowOne", [](ModelConfig& c) { c.compress_yarn.factor = 0.5; },
     "rope_scaling.factor: 0.5"},
    {"QuantMethodNotFp8", [](ModelConfig& c) { c.quantization.quant_method = "int8"; },
     "quantization_config.quant_method: \"int8\""},
    {"ExpertDtypeUnknown", [](ModelConfig& c) { c.quantization.expert_dtype = "fp6"; },
     "quantization_config.expert_dtype: \"fp6\""},
    {"WeightBlockZero", [](ModelConfig& c) { c.quantization.weight_block_rows = 0; },
     "quantization_config.weight_block_size: [0, 32]"},
    {"WeightBlockOfV4",
     [](ModelConfig& c) {
       c.quantization.weight_block_rows = 128;
       c.quantization.weight_block_cols = 128;
     },
     "quantization_config.weight_block_size: [128, 128]; only [32, 32] is supported"},
    {"ScaleFormatUnknown", [](ModelConfig& c) { c.quantization.scale_fmt = "fp32"; },
     "quantization_config.scale_fmt: \"fp32\""},
    {"ActivationSchemeStatic", [](ModelConfig& c) { c.quantization.activation_scheme = "static"; },
     "quantization_config.activation_scheme: \"static\""},
};

INSTANTIATE_TEST_SUITE_P(Rules, ValidationRuleTest, testing::ValuesIn(kRuleCases),
                         [](const testing::TestParamInfo<RuleCase>& info) {
                           return std::string(info.param.name);
                         });

TEST(ConfigTest, YarnProductMismatchIsOnlyAWarning) {
  ModelConfig config = ReleasedConfig();
  config.max_position_embeddings = 4096;
  testing::internal::CaptureStderr();
  const Status status = ValidateConfig(config);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_THAT(log, HasSubstr("max_position_embeddings (4096)"));
}

TEST(ConfigTest, UnquantisedConfigNeedsNoBlockMultipleGemmWidths) {
  ModelConfig config = ReleasedConfig();
  config.quantization = QuantizationConfig{};
  config.q_lora_rank = 80;
  config.o_lora_rank = 18;
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).ToString();
  config.head_dim = 496;  // the cache fake-quant blocks stay
  EXPECT_FALSE(ValidateConfig(config).ok());
}

TEST(ConfigTest, ConfigWithoutEngramOrDsparkIsValid) {
  ModelConfig config = ReleasedConfig();
  config.engram_layer_ids.clear();
  config.engram_num_embeddings.clear();
  config.num_nextn_predict_layers = 0;
  config.dspark_block_size = 0;
  EXPECT_TRUE(ValidateConfig(config).ok()) << ValidateConfig(config).ToString();
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

const std::string kVisionCheckpoint =
    std::string(DSV41_SHARED_DIR) + "/goldens/vision/checkpoints/tiny-v/";

// goldens/vision/README.md's tiny-v vision_config, from either file and from both.
TEST(VisionConfigTest, TinyVLoadsFromEitherFileAlike) {
  const VisionConfig want = {.num_hidden_layers = 2,
                             .hidden_size = 64,
                             .num_attention_heads = 4,
                             .intermediate_size = 96,
                             .patch_size = 14,
                             .rope_theta = 10000.0,
                             .downsample_ratio = 3,
                             .max_image_tokens = 120,
                             .min_pixels = 40000};
  const Json hf = ReadJson(kVisionCheckpoint + "config.json");
  const Json ref = ReadJson(kVisionCheckpoint + "inference/config.json");
  for (const Result<ModelConfig>& config :
       {ParseModelConfig(hf), ParseInferenceConfig(ref), ParseModelConfig(hf, ref)}) {
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(config->vision, want);
    EXPECT_EQ(config->vision.head_dim(), 16);
    EXPECT_EQ(config->vision.patch_values(), 588);
  }
}

// The model goldens carry a vision_config with num_hidden_layers 0: no tower, nothing read.
TEST(VisionConfigTest, ZeroLayersMeansNoTower) {
  Result<ModelConfig> config = LoadModelConfig(kCheckpoints + "tiny-a");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_FALSE(config->vision.has_tower());
  EXPECT_EQ(config->vision, VisionConfig{});
}

TEST(VisionConfigTest, WrittenConfigsReadBackWithTheTower) {
  Result<ModelConfig> config = ParseModelConfig(ReadJson(kVisionCheckpoint + "config.json"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  config->vision.rope_theta = 20000.0;
  const Json hf = Json::parse(ConfigToHfJson(*config).dump());
  const Json ref = Json::parse(ConfigToInferenceJson(*config).dump());
  for (const Result<ModelConfig>& back : {ParseModelConfig(hf), ParseInferenceConfig(ref)}) {
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->vision, config->vision);
  }
}

TEST(VisionConfigTest, BadVisionConfigsAreRefusedNamingTheField) {
  const Json good = ReadJson(kVisionCheckpoint + "config.json");
  const auto error_with = [&](const std::function<void(Json&)>& edit) {
    Json hf = good;
    edit(hf);
    return ParseError(hf);
  };
  EXPECT_THAT(error_with([](Json& j) { j["vision_config"]["max_wh_ratio"] = 2.0; }),
              HasSubstr("vision_config.max_wh_ratio: 2.0: an aspect cap is not supported"));
  EXPECT_THAT(error_with([](Json& j) { j["vision_config"].erase("patch_size"); }),
              HasSubstr("vision_config.patch_size: missing"));
  EXPECT_THAT(error_with([](Json& j) { j["vision_config"]["num_attention_heads"] = 3; }),
              HasSubstr("vision_config.num_attention_heads"));
  EXPECT_THAT(error_with([](Json& j) { j["vision_config"]["num_attention_heads"] = 32; }),
              HasSubstr("multiple of 4"));  // head_dim 2
  EXPECT_EQ(error_with([](Json& j) { j["vision_config"]["num_attention_heads"] = 16; }), "");
  EXPECT_THAT(error_with([](Json& j) { j["vision_config"]["downsample_ratio"] = 0; }),
              HasSubstr("vision_config.downsample_ratio: 0; want 1 .. 64"));
  EXPECT_THAT(error_with([](Json& j) { j["vision_config"]["num_hidden_layers"] = -1; }),
              HasSubstr("want 0 (no tower) or more"));
  EXPECT_THAT(error_with([](Json& j) { j["vision_config"] = 5; }),
              HasSubstr("vision_config: want an object"));
  EXPECT_THAT(error_with([](Json& j) { j.erase("image_token_id"); }), HasSubstr("image_token_id"));
  const Json ref = ReadJson(kVisionCheckpoint + "inference/config.json");
  Json other = ref;
  other["vision_dim"] = 32;
  Result<ModelConfig> config = ParseModelConfig(good, other);
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("disagrees"));
}

}  // namespace
}  // namespace dsv41

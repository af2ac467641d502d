#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "vision/image_plan.h"

namespace dsv41 {

// YaRN parameters of the `compress` RoPE table (model.md §1.2, §6.2).
struct YarnConfig {
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;  // 0 = no YaRN
  double beta_fast = 32.0;
  double beta_slow = 1.0;

  bool operator==(const YarnConfig&) const = default;
};

// How the checkpoint stores its linear weights (model.md §1.3).
struct QuantizationConfig {
  bool quantized = false;          // false: bf16 weights, no .scale, no activation quantisation
  std::string quant_method;        // "fp8"
  std::string activation_scheme;   // "dynamic"
  int32_t weight_block_rows = 32;  // weight_block_size[0]
  int32_t weight_block_cols = 32;  // weight_block_size[1]
  std::string scale_fmt;           // "ue8m0"
  std::string expert_dtype;        // "fp4" or "" (experts stored like dense weights)

  bool operator==(const QuantizationConfig&) const = default;
};

enum class ScoringFunc { kSqrtSoftplus, kSoftmax, kSigmoid };

// The widest head the vision tower takes (a RoPE row lives on the stack).
inline constexpr int32_t kMaxVisionHeadDim = 1024;

// The vision tower (vision.md §1): config.json's `vision_config`, or the flat `vision_*` names of
// inference/config.json. num_hidden_layers 0 (or absent) means no tower, and the other fields
// are then neither read nor written; otherwise every field but rope_theta is required.
struct VisionConfig {
  int32_t num_hidden_layers = 0;  // ViT blocks
  int32_t hidden_size = 0;        // tower width D
  int32_t num_attention_heads = 0;
  int32_t intermediate_size = 0;  // SwiGLU hidden width I
  int32_t patch_size = 0;         // p
  double rope_theta = 10000.0;    // 2-D RoPE base
  int32_t downsample_ratio = 0;   // r: r × r patches become one token
  int32_t max_image_tokens = 0;   // M: bound on a span's length, delimiters included
  int64_t min_pixels = 0;         // smaller images are planned larger

  bool operator==(const VisionConfig&) const = default;

  bool has_tower() const { return num_hidden_layers > 0; }
  int32_t head_dim() const { return hidden_size / num_attention_heads; }
  int32_t patch_values() const { return 3 * patch_size * patch_size; }  // 3p²
  ImagePlanParams plan_params() const {
    return ImagePlanParams{.patch_size = patch_size,
                           .downsample_ratio = downsample_ratio,
                           .max_image_tokens = max_image_tokens,
                           .min_pixels = min_pixels};
  }
};

// The text model's configuration, with HF names (model.md §1.2). Every size in the engine comes
// from here; nothing is hard-coded to the released values.
// The longest Engram n-gram a config may ask for (the lookback of one position lives on the
// stack of the step that hashes it).
inline constexpr int32_t kMaxEngramNgramSize = 16;

struct ModelConfig {
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_nextn_predict_layers = 0;  // DSpark stages
  int32_t num_attention_heads = 0;
  int32_t num_key_value_heads = 1;
  int32_t head_dim = 0;
  int32_t qk_rope_head_dim = 0;
  int32_t q_lora_rank = 0;
  int32_t o_groups = 0;
  int32_t o_lora_rank = 0;
  bool attention_bias = false;
  double rms_norm_eps = 1e-6;
  int32_t sliding_window = 0;
  std::vector<int32_t> compress_ratios;  // backbone only: exactly num_hidden_layers entries
  double rope_theta = 10000.0;           // `main` table
  double compress_rope_theta = 10000.0;  // `compress` table
  YarnConfig compress_yarn;              // YaRN of the `compress` table only
  int64_t max_position_embeddings = 0;

  std::vector<int32_t> kv_source_layer_ids;
  std::vector<int32_t> index_source_layer_ids;
  int32_t candidate_source_layer_id = -1;  // < 0: no candidate level
  int32_t candidate_topk_blocks = 1;
  int32_t candidate_block_size = 1;
  int32_t index_n_heads = 0;
  int32_t index_head_dim = 0;
  int32_t index_topk = 0;

  int32_t moe_intermediate_size = 0;
  int32_t n_routed_experts = 0;
  int32_t num_experts_per_tok = 0;
  int32_t n_shared_experts = 1;
  ScoringFunc scoring_func = ScoringFunc::kSqrtSoftplus;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  double gate_temp = 1.0;
  double swiglu_limit = 0.0;  // <= 0: no clamp
  std::string hidden_act = "silu";

  int32_t hc_mult = 4;
  int32_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;

  std::vector<int32_t> engram_layer_ids;
  std::vector<int64_t> engram_num_embeddings;
  int32_t engram_max_ngram_size = 0;  // 2 .. kMaxEngramNgramSize
  int64_t engram_vocab_size = 0;      // start of the prime search, not a row count
  int32_t engram_n_heads = 0;
  int32_t engram_head_dim = 0;
  int32_t engram_pad_token_id = 2;
  int64_t engram_compressed_vocab_size = 0;

  int32_t dspark_block_size = 0;
  int32_t dspark_noise_token_id = 0;
  std::vector<int32_t> dspark_target_layer_ids;
  int32_t dspark_markov_rank = 0;
  int32_t dspark_n_routed_experts = 0;
  int32_t dspark_num_experts_per_tok = 0;

  int32_t bos_token_id = 0;
  int32_t eos_token_id = 1;
  int32_t pad_token_id = 2;
  int32_t image_token_id = -1;  // top-level `image_token_id`; < 0: absent

  QuantizationConfig quantization;
  VisionConfig vision;

  bool operator==(const ModelConfig&) const = default;

  // Derived constants (model.md §1.5).
  int32_t nope_dim() const { return head_dim - qk_rope_head_dim; }
  int32_t heads_per_group() const { return num_attention_heads / o_groups; }
  int32_t group_in() const { return heads_per_group() * head_dim; }
  int32_t wo_a_out() const { return o_groups * o_lora_rank; }
  int32_t hc_mix_rows() const { return (2 + hc_mult) * hc_mult; }
  int32_t hc_dim() const { return hc_mult * hidden_size; }
  int32_t n_hash_cols() const { return (engram_max_ngram_size - 1) * engram_n_heads; }
  int32_t engram_in() const { return n_hash_cols() * engram_head_dim; }
  int32_t engram_out() const { return hidden_size * (hc_mult + 1); }
  int32_t dspark_in() const {
    return static_cast<int32_t>(dspark_target_layer_ids.size()) * hidden_size;
  }
  int32_t confidence_in() const { return hidden_size + dspark_markov_rank; }
};

// Builds a ModelConfig from parsed JSON: `config_json` is config.json (composite or bare text
// config); `inference_json` is inference/config.json (flat reference names); fields present in
// both must agree. Every field is looked up under all of its spellings (model.md §1.2) in both
// files; JSON null counts as absent. Applies the defaults of model.md §1.6 and then validates
// (ValidateConfig). Errors are InvalidArgument naming the file and the field, e.g. "config.json:
// text_config.hidden_size: want an integer, got string \"256\"". `inference_name` is how errors
// name the second file.
Result<ModelConfig> ParseModelConfig(const Json& config_json, const Json& inference_json,
                                     std::string_view inference_name = "inference/config.json");
// The same from config.json alone.
Result<ModelConfig> ParseModelConfig(const Json& config_json);
// The same from inference/config.json alone.
Result<ModelConfig> ParseInferenceConfig(const Json& inference_json,
                                         std::string_view inference_name = "inference/config.json");

// Reads `dir`/config.json and/or `dir`/inference/config.json (also `inference_config.json`).
Result<ModelConfig> LoadModelConfig(const std::string& dir);

// Every validation rule of model.md §1.6 except the token-map class count (checked where the map is
// built), plus the sizes the inventory needs (positive dimensions, supported quantisation). Returns
// the first violation as InvalidArgument "<HF field name>: <why>"; logs a warning when the YaRN
// product differs from max_position_embeddings.
Status ValidateConfig(const ModelConfig& config);

// Writes the config as a composite HF config.json (top level + text_config +
// quantization_config when quantized; vision_config with a tower), and as the flat
// inference/config.json,
// with the field order of the release. compress_ratios are written with the DSpark stages' zeros
// (n + num_nextn_predict_layers entries). ParseModelConfig of either output gives `config` back
// (the inference form carries HF-only fields such as norm_topk_prob only when they differ from
// the defaults, and expresses quantisation only as dtype/expert_dtype).
OrderedJson ConfigToHfJson(const ModelConfig& config);
OrderedJson ConfigToInferenceJson(const ModelConfig& config);

// The released DeepSeek-V4.1-Flash configuration (model.md §1.2), without its vision tower.
ModelConfig ReleasedConfig();
// The released vision_config (vision.md §1): 32 layers, width 1024.
VisionConfig ReleasedVisionConfig();

}  // namespace dsv41

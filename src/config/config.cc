#include "config/config.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <variant>

#include "base/log.h"
#include "config/config_rules.h"

namespace dsv41 {
namespace {

// A pointer to the ModelConfig field a JSON value is read into.
using FieldRef = std::variant<int32_t*, int64_t*, double*, bool*, std::string*,
                              std::vector<int32_t>*, std::vector<int64_t>*>;

struct FieldSpec {
  std::string_view name;                    // HF name; messages and defaults use it
  std::vector<std::string_view> spellings;  // every spelling; dotted = nested objects
  FieldRef (*ref)(ModelConfig&);
  bool top_level_too = false;  // also looked up at the top level of a composite config.json
};

#define DSV41_FIELD(member) [](ModelConfig& c) -> FieldRef { return &c.member; }

// Sizes of the backbone and its attention.
std::vector<FieldSpec> ShapeAndAttentionFields() {
  return {
      {"vocab_size", {"vocab_size"}, DSV41_FIELD(vocab_size)},
      {"hidden_size", {"hidden_size", "dim"}, DSV41_FIELD(hidden_size)},
      {"num_hidden_layers", {"num_hidden_layers", "n_layers"}, DSV41_FIELD(num_hidden_layers)},
      {"num_nextn_predict_layers",
       {"num_nextn_predict_layers", "n_mtp_layers"},
       DSV41_FIELD(num_nextn_predict_layers)},
      {"num_attention_heads", {"num_attention_heads", "n_heads"}, DSV41_FIELD(num_attention_heads)},
      {"num_key_value_heads", {"num_key_value_heads"}, DSV41_FIELD(num_key_value_heads)},
      {"head_dim", {"head_dim"}, DSV41_FIELD(head_dim)},
      {"qk_rope_head_dim", {"qk_rope_head_dim", "rope_head_dim"}, DSV41_FIELD(qk_rope_head_dim)},
      {"q_lora_rank", {"q_lora_rank"}, DSV41_FIELD(q_lora_rank)},
      {"o_groups", {"o_groups"}, DSV41_FIELD(o_groups)},
      {"o_lora_rank", {"o_lora_rank"}, DSV41_FIELD(o_lora_rank)},
      {"attention_bias", {"attention_bias"}, DSV41_FIELD(attention_bias)},
      {"rms_norm_eps", {"rms_norm_eps", "norm_eps"}, DSV41_FIELD(rms_norm_eps)},
      {"sliding_window", {"sliding_window", "window_size"}, DSV41_FIELD(sliding_window)},
  };
}

// RoPE bases and the YaRN scaling of the compressed layers (model.md §6.2).
std::vector<FieldSpec> RopeFields() {
  return {
      {"rope_theta", {"rope_theta", "rope_parameters.main.rope_theta"}, DSV41_FIELD(rope_theta)},
      {"compress_rope_theta",
       {"compress_rope_theta", "rope_parameters.compress.rope_theta"},
       DSV41_FIELD(compress_rope_theta)},
      {"rope_scaling.factor",
       {"rope_scaling.factor", "rope_parameters.compress.factor", "rope_factor"},
       DSV41_FIELD(compress_yarn.factor)},
      {"rope_scaling.original_max_position_embeddings",
       {"rope_scaling.original_max_position_embeddings",
        "rope_parameters.compress.original_max_position_embeddings", "original_seq_len"},
       DSV41_FIELD(compress_yarn.original_max_position_embeddings)},
      {"rope_scaling.beta_fast",
       {"rope_scaling.beta_fast", "rope_parameters.compress.beta_fast", "beta_fast"},
       DSV41_FIELD(compress_yarn.beta_fast)},
      {"rope_scaling.beta_slow",
       {"rope_scaling.beta_slow", "rope_parameters.compress.beta_slow", "beta_slow"},
       DSV41_FIELD(compress_yarn.beta_slow)},
      {"max_position_embeddings",
       {"max_position_embeddings"},
       DSV41_FIELD(max_position_embeddings)},
  };
}

// Compressor, indexer and candidate-pool sources.
std::vector<FieldSpec> SparseAttentionFields() {
  return {
      {"kv_source_layer_ids",
       {"kv_source_layer_ids", "kv_source_layers"},
       DSV41_FIELD(kv_source_layer_ids)},
      {"index_source_layer_ids",
       {"index_source_layer_ids", "index_source_layers"},
       DSV41_FIELD(index_source_layer_ids)},
      {"candidate_source_layer_id",
       {"candidate_source_layer_id", "candidate_source_layer"},
       DSV41_FIELD(candidate_source_layer_id)},
      {"candidate_topk_blocks", {"candidate_topk_blocks"}, DSV41_FIELD(candidate_topk_blocks)},
      {"candidate_block_size", {"candidate_block_size"}, DSV41_FIELD(candidate_block_size)},
      {"index_n_heads", {"index_n_heads"}, DSV41_FIELD(index_n_heads)},
      {"index_head_dim", {"index_head_dim"}, DSV41_FIELD(index_head_dim)},
      {"index_topk", {"index_topk"}, DSV41_FIELD(index_topk)},
  };
}

// The routed and shared experts.
std::vector<FieldSpec> MoeFields() {
  return {
      {"moe_intermediate_size",
       {"moe_intermediate_size", "moe_inter_dim"},
       DSV41_FIELD(moe_intermediate_size)},
      {"n_routed_experts", {"n_routed_experts"}, DSV41_FIELD(n_routed_experts)},
      {"num_experts_per_tok",
       {"num_experts_per_tok", "n_activated_experts"},
       DSV41_FIELD(num_experts_per_tok)},
      {"n_shared_experts", {"n_shared_experts"}, DSV41_FIELD(n_shared_experts)},
      {"norm_topk_prob", {"norm_topk_prob"}, DSV41_FIELD(norm_topk_prob)},
      {"routed_scaling_factor",
       {"routed_scaling_factor", "route_scale"},
       DSV41_FIELD(routed_scaling_factor)},
      {"gate_temp", {"gate_temp"}, DSV41_FIELD(gate_temp)},
      {"swiglu_limit", {"swiglu_limit"}, DSV41_FIELD(swiglu_limit)},
      {"hidden_act", {"hidden_act"}, DSV41_FIELD(hidden_act)},
  };
}

// mHC (hyper-connection) residual streams.
std::vector<FieldSpec> HyperConnectionFields() {
  return {
      {"hc_mult", {"hc_mult"}, DSV41_FIELD(hc_mult)},
      {"hc_sinkhorn_iters", {"hc_sinkhorn_iters"}, DSV41_FIELD(hc_sinkhorn_iters)},
      {"hc_eps", {"hc_eps"}, DSV41_FIELD(hc_eps)},
  };
}

// Engram n-gram tables.
std::vector<FieldSpec> EngramFields() {
  return {
      {"engram_layer_ids", {"engram_layer_ids"}, DSV41_FIELD(engram_layer_ids)},
      {"engram_num_embeddings", {"engram_num_embeddings"}, DSV41_FIELD(engram_num_embeddings)},
      {"engram_max_ngram_size", {"engram_max_ngram_size"}, DSV41_FIELD(engram_max_ngram_size)},
      {"engram_vocab_size", {"engram_vocab_size"}, DSV41_FIELD(engram_vocab_size)},
      {"engram_n_heads", {"engram_n_heads"}, DSV41_FIELD(engram_n_heads)},
      {"engram_head_dim", {"engram_head_dim"}, DSV41_FIELD(engram_head_dim)},
      {"engram_pad_token_id",
       {"engram_pad_token_id", "engram_pad_id"},
       DSV41_FIELD(engram_pad_token_id)},
      {"engram_compressed_vocab_size",
       {"engram_compressed_vocab_size"},
       DSV41_FIELD(engram_compressed_vocab_size)},
  };
}

// DSpark draft stages.
std::vector<FieldSpec> DsparkFields() {
  return {
      {"dspark_block_size", {"dspark_block_size"}, DSV41_FIELD(dspark_block_size)},
      {"dspark_noise_token_id", {"dspark_noise_token_id"}, DSV41_FIELD(dspark_noise_token_id)},
      {"dspark_target_layer_ids",
       {"dspark_target_layer_ids"},
       DSV41_FIELD(dspark_target_layer_ids)},
      {"dspark_markov_rank", {"dspark_markov_rank"}, DSV41_FIELD(dspark_markov_rank)},
      {"dspark_n_routed_experts",
       {"dspark_n_routed_experts"},
       DSV41_FIELD(dspark_n_routed_experts)},
      {"dspark_num_experts_per_tok",
       {"dspark_num_experts_per_tok", "dspark_n_activated_experts"},
       DSV41_FIELD(dspark_num_experts_per_tok)},
  };
}

// Special token ids; composite configs may carry them at the top level too.
std::vector<FieldSpec> TokenIdFields() {
  return {
      {"bos_token_id", {"bos_token_id"}, DSV41_FIELD(bos_token_id), true},
      {"eos_token_id", {"eos_token_id"}, DSV41_FIELD(eos_token_id), true},
      {"pad_token_id", {"pad_token_id"}, DSV41_FIELD(pad_token_id), true},
      {"image_token_id", {"image_token_id"}, DSV41_FIELD(image_token_id), true},
  };
}

// model.md §1.2: every field with all of its spellings; the alias table is the spec's. The groups
// keep the table's order, in which fields are read and their errors reported.
const std::vector<FieldSpec>& Fields() {
  static const std::vector<FieldSpec> kFields = [] {
    std::vector<FieldSpec> fields;
    for (std::vector<FieldSpec> (*group)() :
         {ShapeAndAttentionFields, RopeFields, SparseAttentionFields, MoeFields,
          HyperConnectionFields, EngramFields, DsparkFields, TokenIdFields}) {
      std::vector<FieldSpec> group_fields = group();
      fields.insert(fields.end(), group_fields.begin(), group_fields.end());
    }
    return fields;
  }();
  return kFields;
}

#undef DSV41_FIELD

// Fields without a default (model.md §1.6 gives none): absent in every file is an error.
constexpr std::string_view kRequiredFields[] = {
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "head_dim",
    "qk_rope_head_dim",
    "q_lora_rank",
    "o_groups",
    "o_lora_rank",
    "sliding_window",
    "moe_intermediate_size",
    "n_routed_experts",
    "num_experts_per_tok",
};

// Far above any real model; keeps a hostile config from sizing per-layer lists in the billions.
constexpr int32_t kMaxLayers = 4096;

// Keys that are known but not read into ModelConfig fields (no debug log for them).
constexpr std::string_view kOtherKnownKeys[] = {
    "architectures",
    "model_type",
    "dtype",
    "torch_dtype",
    "tie_word_embeddings",
    "quantization_config",
    "text_config",
    "vision_config",
    "transformers_version",
    "topk_method",
    "rope_scaling",
    "rope_parameters",
    "scoring_func",
    "score_func",
    "compress_ratios",
    "expert_dtype",
    "vision_n_layers",
    "vision_dim",
    "vision_n_heads",
    "vision_inter_dim",
    "vision_patch_size",
    "vision_rope_theta",
    "vision_downsample_ratio",
    "vision_max_n_token",
    "vision_min_pixels",
    "vision_max_wh_ratio",
};

// One JSON object values are looked up in.
struct Source {
  const Json* root = nullptr;
  std::string file;    // "config.json"
  std::string prefix;  // "text_config." or ""
};

struct Found {
  const Json* value;
  std::string where;  // "config.json: text_config.hidden_size"
};

const Json* LookupPath(const Json& root, std::string_view path) {
  const Json* node = &root;
  while (true) {
    if (!node->is_object()) return nullptr;
    const size_t dot = path.find('.');
    const std::string key(path.substr(0, dot));
    const auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
    if (dot == std::string_view::npos) return node;
    path.remove_prefix(dot + 1);
  }
}

std::vector<Found> FindAll(const std::vector<Source>& sources,
                           const std::vector<std::string_view>& spellings) {
  std::vector<Found> found;
  for (const Source& source : sources) {
    for (const std::string_view spelling : spellings) {
      const Json* value = LookupPath(*source.root, spelling);
      if (value == nullptr || value->is_null()) continue;
      found.push_back({value, source.file + ": " + source.prefix + std::string(spelling)});
    }
  }
  return found;
}

// "string \"256\"" — a short description of a JSON value for messages (never throws).
std::string Describe(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(value.type_name()) + " " + text;
}

std::string Dump(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

Status ReadInt(const Json& value, const std::string& where, int64_t lo, int64_t hi, int64_t* out) {
  int64_t v = 0;
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) {
      return InvalidArgumentError("%s: %s is out of range", where.c_str(), Dump(value).c_str());
    }
    v = static_cast<int64_t>(u);
  } else if (value.is_number_integer()) {
    v = value.get<int64_t>();
  } else if (value.is_number_float()) {
    // Integral floats ("16.0") are accepted; 2^63 is the first double beyond int64.
    const double d = value.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < -9.2e18 || d > 9.2e18) {
      return InvalidArgumentError("%s: want an integer, got %s", where.c_str(),
                                  Describe(value).c_str());
    }
    v = static_cast<int64_t>(d);
  } else {
    return InvalidArgumentError("%s: want an integer, got %s", where.c_str(),
                                Describe(value).c_str());
  }
  if (v < lo || v > hi) {
    return InvalidArgumentError("%s: %lld is out of range [%lld, %lld]", where.c_str(),
                                static_cast<long long>(v), static_cast<long long>(lo),
                                static_cast<long long>(hi));
  }
  *out = v;
  return OkStatus();
}

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

Status ReadValue(const Json& value, const std::string& where, int32_t* out) {
  int64_t v = 0;
  DSV41_RETURN_IF_ERROR(ReadInt(value, where, kInt32Min, kInt32Max, &v));
  *out = static_cast<int32_t>(v);
  return OkStatus();
}

Status ReadValue(const Json& value, const std::string& where, int64_t* out) {
  return ReadInt(value, where, kInt64Min, kInt64Max, out);
}

Status ReadValue(const Json& value, const std::string& where, double* out) {
  if (!value.is_number()) {
    return InvalidArgumentError("%s: want a number, got %s", where.c_str(),
                                Describe(value).c_str());
  }
  *out = value.get<double>();
  return OkStatus();
}

Status ReadValue(const Json& value, const std::string& where, bool* out) {
  if (!value.is_boolean()) {
    return InvalidArgumentError("%s: want true or false, got %s", where.c_str(),
                                Describe(value).c_str());
  }
  *out = value.get<bool>();
  return OkStatus();
}

Status ReadValue(const Json& value, const std::string& where, std::string* out) {
  if (!value.is_string()) {
    return InvalidArgumentError("%s: want a string, got %s", where.c_str(),
                                Describe(value).c_str());
  }
  *out = value.get<std::string>();
  return OkStatus();
}

template <typename T>
Status ReadValue(const Json& value, const std::string& where, std::vector<T>* out) {
  if (!value.is_array()) {
    return InvalidArgumentError("%s: want a list of integers, got %s", where.c_str(),
                                Describe(value).c_str());
  }
  std::vector<T> items(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    DSV41_RETURN_IF_ERROR(ReadValue(value[i], StrFormat("%s[%zu]", where.c_str(), i), &items[i]));
  }
  *out = std::move(items);
  return OkStatus();
}

// Reads the first spelling found into `*out`; every other one must hold the same value
// (model.md §1.1 rule 3). Returns the where of the first, or "" when absent.
template <typename T>
Result<std::string> ReadAgreeing(const std::vector<Found>& found, T* out) {
  if (found.empty()) return std::string();
  DSV41_RETURN_IF_ERROR(ReadValue(*found[0].value, found[0].where, out));
  for (size_t i = 1; i < found.size(); ++i) {
    T other{};
    DSV41_RETURN_IF_ERROR(ReadValue(*found[i].value, found[i].where, &other));
    if (!(other == *out)) {
      return InvalidArgumentError("%s = %s disagrees with %s = %s", found[0].where.c_str(),
                                  Dump(*found[0].value).c_str(), found[i].where.c_str(),
                                  Dump(*found[i].value).c_str());
    }
  }
  return found[0].where;
}

Result<ScoringFunc> ScoringFuncFromName(const std::string& name, const std::string& where) {
  if (name == "sqrtsoftplus") return ScoringFunc::kSqrtSoftplus;
  if (name == "softmax") return ScoringFunc::kSoftmax;
  if (name == "sigmoid") return ScoringFunc::kSigmoid;
  return InvalidArgumentError("%s: \"%s\" is not one of sqrtsoftplus, softmax, sigmoid",
                              where.c_str(), name.c_str());
}

const char* ScoringFuncName(ScoringFunc func) {
  switch (func) {
    case ScoringFunc::kSqrtSoftplus:
      return "sqrtsoftplus";
    case ScoringFunc::kSoftmax:
      return "softmax";
    case ScoringFunc::kSigmoid:
      return "sigmoid";
  }
  return "sqrtsoftplus";
}

// The standard FP8 + MXFP4 quantisation of the release (model.md §1.3), minus expert_dtype.
QuantizationConfig Fp8Quantization(std::string expert_dtype) {
  QuantizationConfig q;
  q.quantized = true;
  q.quant_method = "fp8";
  q.activation_scheme = "dynamic";
  q.weight_block_rows = 32;
  q.weight_block_cols = 32;
  q.scale_fmt = "ue8m0";
  q.expert_dtype = std::move(expert_dtype);
  return q;
}

// An HF `quantization_config` object; absent keys take the release's values.
Status ReadQuantizationObject(const Json& object, const std::string& where,
                              QuantizationConfig* out) {
  if (!object.is_object()) {
    return InvalidArgumentError("%s: want an object, got %s", where.c_str(),
                                Describe(object).c_str());
  }
  QuantizationConfig q = Fp8Quantization("");
  const auto read_string = [&](const char* key, std::string* field) -> Status {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return OkStatus();
    return ReadValue(*it, where + "." + key, field);
  };
  DSV41_RETURN_IF_ERROR(read_string("quant_method", &q.quant_method));
  DSV41_RETURN_IF_ERROR(read_string("activation_scheme", &q.activation_scheme));
  DSV41_RETURN_IF_ERROR(read_string("scale_fmt", &q.scale_fmt));
  DSV41_RETURN_IF_ERROR(read_string("expert_dtype", &q.expert_dtype));
  const auto block = object.find("weight_block_size");
  if (block != object.end() && !block->is_null()) {
    std::vector<int32_t> size;
    DSV41_RETURN_IF_ERROR(ReadValue(*block, where + ".weight_block_size", &size));
    if (size.size() != 2) {
      return InvalidArgumentError("%s.weight_block_size: want 2 entries [rows, cols], got %zu",
                                  where.c_str(), size.size());
    }
    q.weight_block_rows = size[0];
    q.weight_block_cols = size[1];
  }
  *out = std::move(q);
  return OkStatus();
}

// The reference's flat `dtype: fp8|bf16` + `expert_dtype: fp4|null` (model.md §1.3).
Result<std::optional<QuantizationConfig>> ReadReferenceQuantization(const Json& inference,
                                                                    const std::string& file) {
  const auto dtype = inference.find("dtype");
  if (dtype == inference.end() || dtype->is_null()) return std::optional<QuantizationConfig>();
  std::string name;
  DSV41_RETURN_IF_ERROR(ReadValue(*dtype, file + ": dtype", &name));
  if (name == "bf16") return std::optional<QuantizationConfig>(QuantizationConfig{});
  if (name != "fp8") {
    return InvalidArgumentError("%s: dtype: \"%s\" is not fp8 or bf16", file.c_str(), name.c_str());
  }
  std::string expert_dtype;
  const auto expert = inference.find("expert_dtype");
  if (expert != inference.end() && !expert->is_null()) {
    DSV41_RETURN_IF_ERROR(ReadValue(*expert, file + ": expert_dtype", &expert_dtype));
  }
  return std::optional<QuantizationConfig>(Fp8Quantization(expert_dtype));
}

std::vector<int32_t> ReleasedCompressRatios() {
  std::vector<int32_t> ratios = {0, 0};
  ratios.insert(ratios.end(), 18, 2);
  ratios.insert(ratios.end(), 20, 1);
  return ratios;
}

// model.md §1.6 defaults of compress_ratios.
std::vector<int32_t> DefaultCompressRatios(int32_t n) {
  if (n == 40) return ReleasedCompressRatios();
  std::vector<int32_t> ratios = {0, 0};
  ratios.insert(ratios.end(), static_cast<size_t>(std::max(0, (n - 1) / 2)), 2);
  while (static_cast<int32_t>(ratios.size()) < n) ratios.push_back(1);
  ratios.resize(static_cast<size_t>(std::max(0, n)));
  return ratios;
}

const std::vector<int32_t> kReleasedKvSources = {2, 8, 14, 20};
const std::vector<int32_t> kReleasedIndexSources = {2, 8, 14, 20, 24, 28, 32, 36};

std::vector<int32_t> DefaultKvSources(const std::vector<int32_t>& ratios) {
  if (ratios == ReleasedCompressRatios()) return kReleasedKvSources;
  std::vector<int32_t> sources;
  for (size_t l = 0; l < ratios.size(); ++l) {
    if (ratios[l] > 0 && (l == 0 || ratios[l - 1] != ratios[l])) {
      sources.push_back(static_cast<int32_t>(l));
    }
  }
  return sources;
}

std::vector<int32_t> DefaultDsparkTargets(const ModelConfig& c) {
  std::vector<int32_t> targets;
  const std::set<int32_t> kv(c.kv_source_layer_ids.begin(), c.kv_source_layer_ids.end());
  for (int32_t l = c.num_hidden_layers - 1; l >= 0 && targets.size() < 3; --l) {
    if (kv.count(l) == 0) targets.insert(targets.begin(), l);
  }
  return targets;
}

// compress_ratios of n or n + mtp entries (model.md §1.4); returns the backbone part.
Result<std::vector<int32_t>> ReadCompressRatios(const Found& found, int32_t n, int32_t mtp) {
  std::vector<int32_t> ratios;
  DSV41_RETURN_IF_ERROR(ReadValue(*found.value, found.where, &ratios));
  const size_t len = ratios.size();
  if (len < static_cast<size_t>(n) || len > static_cast<size_t>(n) + static_cast<size_t>(mtp)) {
    return InvalidArgumentError(
        "%s: %zu entries; want num_hidden_layers (%d) to num_hidden_layers + "
        "num_nextn_predict_layers (%d)",
        found.where.c_str(), len, n, n + mtp);
  }
  for (size_t i = static_cast<size_t>(n); i < len; ++i) {
    if (ratios[i] != 0) {
      return InvalidArgumentError(
          "%s: entry %zu (DSpark stage %zu) is %d; DSpark stages are SWA-only (ratio 0)",
          found.where.c_str(), i, i - static_cast<size_t>(n), ratios[i]);
    }
  }
  ratios.resize(static_cast<size_t>(n));
  return ratios;
}

void LogUnknownKeys(const Json& object, const std::string& what,
                    const std::set<std::string_view>& known) {
  if (!object.is_object()) return;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (known.count(it.key()) == 0) {
      DSV41_LOG_DEBUG("%s: ignoring unknown field '%s'", what.c_str(), it.key().c_str());
    }
  }
}

std::set<std::string_view> KnownKeys() {
  std::set<std::string_view> known(std::begin(kOtherKnownKeys), std::end(kOtherKnownKeys));
  for (const FieldSpec& field : Fields()) {
    for (const std::string_view spelling : field.spellings) {
      known.insert(spelling.substr(0, spelling.find('.')));
    }
  }
  return known;
}

// HF name -> where it was read ("config.json: text_config.hidden_size"), for validation messages.
using WhereByField = std::map<std::string, std::string, std::less<>>;

// The JSON objects one ParseModelConfig call looks values up in.
struct ConfigSources {
  const Json* config_json = nullptr;     // config.json, or null
  const Json* inference_json = nullptr;  // the reference's inference config, or null
  std::string ref_file;                  // the inference config's name, for messages
  const Json* text = nullptr;            // text_config, else config.json's top level; or null
  bool composite = false;                // config.json holds a text_config
  std::vector<Source> sources;           // text config, then inference
  std::vector<Source> token_sources;     // text config, composite top level, then inference

  // Where a missing or defaulted model field is reported.
  const Source& primary() const { return sources.front(); }
};

// Both inputs, where given, must be JSON objects; at least one must be given.
Status CheckTopLevelObjects(const Json* config_json, const Json* inference_json,
                            std::string_view inference_name) {
  if (config_json == nullptr && inference_json == nullptr) {
    return InvalidArgumentError("no config.json and no %.*s",
                                static_cast<int>(inference_name.size()), inference_name.data());
  }
  if (config_json != nullptr && !config_json->is_object()) {
    return InvalidArgumentError("config.json: want a JSON object, got %s",
                                Describe(*config_json).c_str());
  }
  if (inference_json != nullptr && !inference_json->is_object()) {
    return InvalidArgumentError("%.*s: want a JSON object, got %s",
                                static_cast<int>(inference_name.size()), inference_name.data(),
                                Describe(*inference_json).c_str());
  }
  return OkStatus();
}

// model.md §1.1: the model fields come from text_config when present, else from the top level.
Result<ConfigSources> CollectSources(const Json* config_json, const Json* inference_json,
                                     std::string ref_file) {
  ConfigSources all;
  all.config_json = config_json;
  all.inference_json = inference_json;
  all.ref_file = std::move(ref_file);
  if (config_json != nullptr) {
    const auto it = config_json->find("text_config");
    all.composite = it != config_json->end() && !it->is_null();
    if (all.composite && !it->is_object()) {
      return InvalidArgumentError("config.json: text_config: want an object, got %s",
                                  Describe(*it).c_str());
    }
    all.text = all.composite ? &*it : config_json;
    all.sources.push_back({all.text, "config.json", all.composite ? "text_config." : ""});
    all.token_sources.push_back(all.sources.back());
    if (all.composite) all.token_sources.push_back({config_json, "config.json", ""});
  }
  if (inference_json != nullptr) {
    all.sources.push_back({inference_json, all.ref_file, ""});
    all.token_sources.push_back(all.sources.back());
  }
  return all;
}

void LogUnknownKeysOfSources(const ConfigSources& all) {
  const std::set<std::string_view> known = KnownKeys();
  if (all.text != nullptr) LogUnknownKeys(*all.text, "config.json", known);
  if (all.composite) LogUnknownKeys(*all.config_json, "config.json (top level)", known);
  if (all.inference_json != nullptr) LogUnknownKeys(*all.inference_json, all.ref_file, known);
}

// Reads every field of the table that some source holds, then requires those without a default.
Status ReadTableFields(const ConfigSources& all, ModelConfig& config,
                       WhereByField& where_by_field) {
  for (const FieldSpec& field : Fields()) {
    const std::vector<Found> found =
        FindAll(field.top_level_too ? all.token_sources : all.sources, field.spellings);
    DSV41_ASSIGN_OR_RETURN(
        std::string where,
        std::visit([&](auto* target) { return ReadAgreeing(found, target); }, field.ref(config)));
    if (!where.empty()) where_by_field.emplace(std::string(field.name), where);
  }
  const Source& primary = all.primary();
  for (const std::string_view name : kRequiredFields) {
    if (where_by_field.count(name) == 0) {
      return InvalidArgumentError("%s: %s%.*s: missing (the field has no default)",
                                  primary.file.c_str(), primary.prefix.c_str(),
                                  static_cast<int>(name.size()), name.data());
    }
  }
  return OkStatus();
}

// rope_scaling.rope_type: only YaRN is defined for this model (model.md §6.2).
Status CheckRopeType(const std::vector<Source>& sources) {
  for (const Found& found : FindAll(sources, {"rope_scaling.rope_type", "rope_scaling.type",
                                              "rope_parameters.compress.rope_type"})) {
    std::string type;
    DSV41_RETURN_IF_ERROR(ReadValue(*found.value, found.where, &type));
    if (type != "yarn") {
      return InvalidArgumentError("%s: \"%s\" is not supported (want \"yarn\")",
                                  found.where.c_str(), type.c_str());
    }
  }
  return OkStatus();
}

// model.md §1, "absent on purpose": V4.1 has no group-limited routing, no hash-routed or dense
// layers and no learned head mix, so a config that asks for them is another model (a V4 file, a
// converter's mistake), not one to run with those keys ignored (real-weight-traps.md L7). Their
// neutral values pass: n_group / topk_group 1, num_hash_layers / first_k_dense_replace 0.
Status CheckAbsentOnPurpose(const std::vector<Source>& sources) {
  struct Neutral {
    const char* key;
    int64_t value;
    const char* means;
  };
  static constexpr Neutral kNeutral[] = {
      {"n_group", 1, "group-limited routing"},
      {"topk_group", 1, "group-limited routing"},
      {"num_hash_layers", 0, "hash-routed layers"},
      {"first_k_dense_replace", 0, "dense FFN layers"},
  };
  for (const Neutral& n : kNeutral) {
    for (const Found& found : FindAll(sources, {n.key})) {
      if (found.value->is_null()) continue;
      int64_t value = 0;
      DSV41_RETURN_IF_ERROR(ReadInt(*found.value, found.where, INT32_MIN, INT32_MAX, &value));
      if (value != n.value) {
        return InvalidArgumentError("%s = %lld: DeepSeek-V4.1 has no %s (want %lld or no field)",
                                    found.where.c_str(), static_cast<long long>(value), n.means,
                                    static_cast<long long>(n.value));
      }
    }
  }
  for (const Source& source : sources) {
    if (source.root == nullptr || !source.root->is_object()) continue;
    for (auto it = source.root->begin(); it != source.root->end(); ++it) {
      if (it.key().starts_with("hc_head_")) {
        return InvalidArgumentError("%s: %s%s: DeepSeek-V4.1 has no learned head mix",
                                    source.file.c_str(), source.prefix.c_str(), it.key().c_str());
      }
    }
  }
  return OkStatus();
}

Status ReadScoringFunc(const std::vector<Source>& sources, ModelConfig& config,
                       WhereByField& where_by_field) {
  std::string name;
  const std::vector<Found> found = FindAll(sources, {"scoring_func", "score_func"});
  DSV41_ASSIGN_OR_RETURN(std::string where, ReadAgreeing(found, &name));
  if (!where.empty()) {
    DSV41_ASSIGN_OR_RETURN(config.scoring_func, ScoringFuncFromName(name, where));
    where_by_field.emplace("scoring_func", where);
  }
  return OkStatus();
}

// The per-layer lists are sized from these counts: bound them before building any.
Status CheckLayerCounts(const ModelConfig& config, WhereByField& where_by_field) {
  if (config.num_hidden_layers < 1 || config.num_hidden_layers > kMaxLayers) {
    return InvalidArgumentError("%s: %d; want 1..%d", where_by_field["num_hidden_layers"].c_str(),
                                config.num_hidden_layers, kMaxLayers);
  }
  if (config.num_nextn_predict_layers < 0 || config.num_nextn_predict_layers > kMaxLayers) {
    return InvalidArgumentError("%s: %d; want 0..%d",
                                where_by_field["num_nextn_predict_layers"].c_str(),
                                config.num_nextn_predict_layers, kMaxLayers);
  }
  return OkStatus();
}

// compress_ratios from every source, which must agree; model.md §1.6's default when absent.
Status ReadCompressRatiosField(const std::vector<Source>& sources, ModelConfig& config,
                               WhereByField& where_by_field) {
  const std::vector<Found> found = FindAll(sources, {"compress_ratios"});
  for (size_t i = 0; i < found.size(); ++i) {
    DSV41_ASSIGN_OR_RETURN(
        std::vector<int32_t> ratios,
        ReadCompressRatios(found[i], config.num_hidden_layers, config.num_nextn_predict_layers));
    if (i == 0) {
      config.compress_ratios = std::move(ratios);
      where_by_field.emplace("compress_ratios", found[0].where);
    } else if (ratios != config.compress_ratios) {
      return InvalidArgumentError("%s = %s disagrees with %s = %s", found[0].where.c_str(),
                                  Dump(*found[0].value).c_str(), found[i].where.c_str(),
                                  Dump(*found[i].value).c_str());
    }
  }
  if (found.empty()) config.compress_ratios = DefaultCompressRatios(config.num_hidden_layers);
  return OkStatus();
}

// config.json's quantisation: the top-level quantization_config first, then text_config's;
// unquantised when neither is there. *hf stays empty without a config.json.
Status ReadHfQuantization(const ConfigSources& all, std::optional<QuantizationConfig>* hf,
                          std::string* hf_where) {
  if (all.config_json == nullptr) return OkStatus();
  std::vector<Source> quant_sources;
  if (all.composite) quant_sources.push_back({all.config_json, "config.json", ""});
  quant_sources.push_back(all.sources.front());
  const std::vector<Found> found = FindAll(quant_sources, {"quantization_config"});
  hf->emplace();
  if (found.empty()) {
    *hf_where = "config.json: (no quantization_config)";
    return OkStatus();
  }
  *hf_where = found[0].where;
  return ReadQuantizationObject(*found[0].value, *hf_where, &**hf);
}

// model.md §1.3: config.json's quantisation, then the reference's flat dtype, which must agree
// when config.json exists.
Status ReadQuantization(const ConfigSources& all, ModelConfig& config,
                        WhereByField& where_by_field) {
  std::optional<QuantizationConfig> hf;
  std::string hf_where;
  DSV41_RETURN_IF_ERROR(ReadHfQuantization(all, &hf, &hf_where));
  std::optional<QuantizationConfig> ref;
  if (all.inference_json != nullptr) {
    DSV41_ASSIGN_OR_RETURN(ref, ReadReferenceQuantization(*all.inference_json, all.ref_file));
  }
  if (hf.has_value() && ref.has_value() &&
      (hf->quantized != ref->quantized || hf->expert_dtype != ref->expert_dtype)) {
    return InvalidArgumentError(
        "%s (quantized %s, expert_dtype \"%s\") disagrees with %s: dtype/expert_dtype "
        "(quantized %s, expert_dtype \"%s\")",
        hf_where.c_str(), hf->quantized ? "yes" : "no", hf->expert_dtype.c_str(),
        all.ref_file.c_str(), ref->quantized ? "yes" : "no", ref->expert_dtype.c_str());
  }
  if (hf.has_value()) {
    config.quantization = *hf;
    where_by_field.emplace("quantization_config", hf_where);
  } else if (ref.has_value()) {
    config.quantization = *ref;
    where_by_field.emplace("quantization_config", all.ref_file + ": dtype");
  }
  return OkStatus();
}

// model.md §1.6 defaults of the fields no source gave, derived from those read.
void ApplyDerivedDefaults(ModelConfig& config, const WhereByField& where_by_field) {
  if (where_by_field.count("kv_source_layer_ids") == 0) {
    config.kv_source_layer_ids = DefaultKvSources(config.compress_ratios);
  }
  if (where_by_field.count("index_source_layer_ids") == 0) {
    config.index_source_layer_ids = config.kv_source_layer_ids == kReleasedKvSources
                                        ? kReleasedIndexSources
                                        : config.kv_source_layer_ids;
  }
  if (where_by_field.count("dspark_target_layer_ids") == 0) {
    config.dspark_target_layer_ids = DefaultDsparkTargets(config);
  }
  if (where_by_field.count("max_position_embeddings") == 0 &&
      config.compress_yarn.original_max_position_embeddings > 0) {
    const double product =
        static_cast<double>(config.compress_yarn.original_max_position_embeddings) *
        config.compress_yarn.factor;
    if (std::isfinite(product) && product >= 0 && product < 4.0e18) {
      config.max_position_embeddings = static_cast<int64_t>(product);
    }
  }
  if (config.dspark_n_routed_experts <= 0) config.dspark_n_routed_experts = config.n_routed_experts;
  if (config.dspark_num_experts_per_tok <= 0) {
    config.dspark_num_experts_per_tok = config.num_experts_per_tok;
  }
}

// The rules of config_rules.h; a failure names where its field was read, or its default.
Status CheckConfigRules(const ModelConfig& config, const WhereByField& where_by_field,
                        const Source& primary) {
  if (const std::optional<ConfigIssue> issue = FindConfigIssue(config)) {
    const auto it = where_by_field.find(issue->field);
    const std::string where = it != where_by_field.end() ? it->second
                                                         : primary.file + ": " + primary.prefix +
                                                               issue->field + " (default)";
    return InvalidArgumentError("%s: %s", where.c_str(), issue->why.c_str());
  }
  return OkStatus();
}

// One field of the vision tower: its name in vision_config and in the flat inference config.
struct VisionFieldSpec {
  std::string_view name;  // in vision_config
  std::string_view flat;  // in inference/config.json
  std::variant<int32_t*, int64_t*, double*> (*ref)(VisionConfig&);
  bool required = true;  // when the tower exists
};

#define DSV41_VISION_FIELD(member) \
  [](VisionConfig& v) -> std::variant<int32_t*, int64_t*, double*> { return &v.member; }

// vision.md §1's table, num_hidden_layers first.
const std::vector<VisionFieldSpec>& VisionFields() {
  static const std::vector<VisionFieldSpec> kFields = {
      {"num_hidden_layers", "vision_n_layers", DSV41_VISION_FIELD(num_hidden_layers)},
      {"hidden_size", "vision_dim", DSV41_VISION_FIELD(hidden_size)},
      {"num_attention_heads", "vision_n_heads", DSV41_VISION_FIELD(num_attention_heads)},
      {"intermediate_size", "vision_inter_dim", DSV41_VISION_FIELD(intermediate_size)},
      {"patch_size", "vision_patch_size", DSV41_VISION_FIELD(patch_size)},
      {"rope_theta", "vision_rope_theta", DSV41_VISION_FIELD(rope_theta), false},
      {"downsample_ratio", "vision_downsample_ratio", DSV41_VISION_FIELD(downsample_ratio)},
      {"max_image_tokens", "vision_max_n_token", DSV41_VISION_FIELD(max_image_tokens)},
      {"min_pixels", "vision_min_pixels", DSV41_VISION_FIELD(min_pixels)},
  };
  return kFields;
}

// vision_config of config.json and the vision_* names of the inference config (they must
// agree). Without a tower nothing else is read; with one, every field but rope_theta must be
// given, and max_wh_ratio must be null (an aspect cap is not specified).
Status ReadVisionConfig(const ConfigSources& all, ModelConfig& config,
                        WhereByField& where_by_field) {
  std::vector<Source> nested;
  std::vector<Source> flat;
  if (all.config_json != nullptr) {
    const auto it = all.config_json->find("vision_config");
    if (it != all.config_json->end() && !it->is_null()) {
      if (!it->is_object()) {
        return InvalidArgumentError("config.json: vision_config: want an object, got %s",
                                    Describe(*it).c_str());
      }
      nested.push_back({&*it, "config.json", "vision_config."});
    }
  }
  if (all.inference_json != nullptr) flat.push_back({all.inference_json, all.ref_file, ""});
  for (const VisionFieldSpec& field : VisionFields()) {
    std::vector<Found> found = FindAll(nested, {field.name});
    for (Found& f : FindAll(flat, {field.flat})) found.push_back(std::move(f));
    DSV41_ASSIGN_OR_RETURN(std::string where,
                           std::visit([&](auto* target) { return ReadAgreeing(found, target); },
                                      field.ref(config.vision)));
    if (config.vision.num_hidden_layers < 0) {
      return InvalidArgumentError("%s: %d: want 0 (no tower) or more", where.c_str(),
                                  config.vision.num_hidden_layers);
    }
    if (!config.vision.has_tower()) {
      config.vision = VisionConfig{};
      if (!where.empty()) where_by_field.emplace("vision_config.num_hidden_layers", where);
      return OkStatus();
    }
    if (where.empty() && field.required) {
      return InvalidArgumentError("%s: vision_config.%.*s: missing (needed with a vision tower)",
                                  nested.empty() ? all.ref_file.c_str() : "config.json",
                                  static_cast<int>(field.name.size()), field.name.data());
    }
    if (!where.empty()) where_by_field.emplace("vision_config." + std::string(field.name), where);
  }
  for (const Found& cap : FindAll(nested, {"max_wh_ratio"})) {
    return InvalidArgumentError("%s: %s: an aspect cap is not supported (want null)",
                                cap.where.c_str(), Dump(*cap.value).c_str());
  }
  for (const Found& cap : FindAll(flat, {"vision_max_wh_ratio"})) {
    return InvalidArgumentError("%s: %s: an aspect cap is not supported (want null)",
                                cap.where.c_str(), Dump(*cap.value).c_str());
  }
  return OkStatus();
}

// The fields of VisionFields() into `out` under their vision_config (or flat) names.
void WriteVisionFields(const VisionConfig& vision, bool flat, OrderedJson& out) {
  VisionConfig copy = vision;
  for (const VisionFieldSpec& field : VisionFields()) {
    const std::string key(flat ? field.flat : field.name);
    std::visit([&](auto* value) { out[key] = *value; }, field.ref(copy));
  }
}

// ParseModelConfig over either file or both (at least one is given; null: the file is absent).
Result<ModelConfig> ParseConfigFiles(const Json* config_json, const Json* inference_json,
                                     std::string_view inference_name) {
  DSV41_RETURN_IF_ERROR(CheckTopLevelObjects(config_json, inference_json, inference_name));
  DSV41_ASSIGN_OR_RETURN(const ConfigSources all,
                         CollectSources(config_json, inference_json, std::string(inference_name)));
  LogUnknownKeysOfSources(all);

  ModelConfig config;
  WhereByField where_by_field;
  DSV41_RETURN_IF_ERROR(ReadTableFields(all, config, where_by_field));
  DSV41_RETURN_IF_ERROR(CheckRopeType(all.sources));
  DSV41_RETURN_IF_ERROR(CheckAbsentOnPurpose(all.sources));
  DSV41_RETURN_IF_ERROR(ReadScoringFunc(all.sources, config, where_by_field));
  DSV41_RETURN_IF_ERROR(CheckLayerCounts(config, where_by_field));
  DSV41_RETURN_IF_ERROR(ReadCompressRatiosField(all.sources, config, where_by_field));
  DSV41_RETURN_IF_ERROR(ReadQuantization(all, config, where_by_field));
  DSV41_RETURN_IF_ERROR(ReadVisionConfig(all, config, where_by_field));
  ApplyDerivedDefaults(config, where_by_field);
  DSV41_RETURN_IF_ERROR(CheckConfigRules(config, where_by_field, all.primary()));
  WarnAboutConfig(config);
  return config;
}

}  // namespace

Result<ModelConfig> ParseModelConfig(const Json& config_json, const Json& inference_json,
                                     std::string_view inference_name) {
  return ParseConfigFiles(&config_json, &inference_json, inference_name);
}

Result<ModelConfig> ParseModelConfig(const Json& config_json) {
  return ParseConfigFiles(&config_json, nullptr, "inference/config.json");
}

Result<ModelConfig> ParseInferenceConfig(const Json& inference_json,
                                         std::string_view inference_name) {
  return ParseConfigFiles(nullptr, &inference_json, inference_name);
}

Result<ModelConfig> LoadModelConfig(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path root(dir);
  std::optional<Json> config_json;
  std::optional<Json> inference_json;
  std::string inference_name = "inference/config.json";
  if (fs::exists(root / "config.json", error)) {
    DSV41_ASSIGN_OR_RETURN(config_json, ReadJsonFile((root / "config.json").string()));
  }
  if (fs::exists(root / "inference" / "config.json", error)) {
    DSV41_ASSIGN_OR_RETURN(inference_json,
                           ReadJsonFile((root / "inference" / "config.json").string()));
  } else if (fs::exists(root / "inference_config.json", error)) {
    inference_name = "inference_config.json";
    DSV41_ASSIGN_OR_RETURN(inference_json, ReadJsonFile((root / "inference_config.json").string()));
  }
  if (!config_json.has_value() && !inference_json.has_value()) {
    return NotFoundError("%s: no config.json, inference/config.json or inference_config.json",
                         dir.c_str());
  }
  Result<ModelConfig> config =
      ParseConfigFiles(config_json ? &*config_json : nullptr,
                       inference_json ? &*inference_json : nullptr, inference_name);
  if (!config.ok()) return config.status().WithPrefix(dir);
  return config;
}

Status ValidateConfig(const ModelConfig& config) {
  if (const std::optional<ConfigIssue> issue = FindConfigIssue(config)) {
    return InvalidArgumentError("%s: %s", issue->field.c_str(), issue->why.c_str());
  }
  WarnAboutConfig(config);
  return OkStatus();
}

namespace {

// compress_ratios as the release writes them: backbone, then one 0 per DSpark stage.
OrderedJson RatiosWithStages(const ModelConfig& c) {
  OrderedJson ratios = c.compress_ratios;
  for (int32_t i = 0; i < c.num_nextn_predict_layers; ++i) ratios.push_back(0);
  return ratios;
}

}  // namespace

OrderedJson ConfigToHfJson(const ModelConfig& c) {
  OrderedJson text;
  text["model_type"] = "deepseek_v41_text";
  text["vocab_size"] = c.vocab_size;
  text["hidden_size"] = c.hidden_size;
  text["moe_intermediate_size"] = c.moe_intermediate_size;
  text["num_hidden_layers"] = c.num_hidden_layers;
  text["num_attention_heads"] = c.num_attention_heads;
  text["num_key_value_heads"] = c.num_key_value_heads;
  text["head_dim"] = c.head_dim;
  text["qk_rope_head_dim"] = c.qk_rope_head_dim;
  text["q_lora_rank"] = c.q_lora_rank;
  text["o_lora_rank"] = c.o_lora_rank;
  text["o_groups"] = c.o_groups;
  text["hidden_act"] = c.hidden_act;
  text["swiglu_limit"] = c.swiglu_limit;
  text["rms_norm_eps"] = c.rms_norm_eps;
  text["tie_word_embeddings"] = false;
  text["attention_bias"] = c.attention_bias;
  text["max_position_embeddings"] = c.max_position_embeddings;
  text["rope_theta"] = c.rope_theta;
  if (!(c.compress_yarn == YarnConfig{})) {
    OrderedJson scaling;
    scaling["rope_type"] = "yarn";
    scaling["factor"] = c.compress_yarn.factor;
    scaling["beta_fast"] = c.compress_yarn.beta_fast;
    scaling["beta_slow"] = c.compress_yarn.beta_slow;
    scaling["original_max_position_embeddings"] = c.compress_yarn.original_max_position_embeddings;
    text["rope_scaling"] = std::move(scaling);
  }
  text["n_routed_experts"] = c.n_routed_experts;
  text["n_shared_experts"] = c.n_shared_experts;
  text["num_experts_per_tok"] = c.num_experts_per_tok;
  text["scoring_func"] = ScoringFuncName(c.scoring_func);
  text["topk_method"] = "noaux_tc";
  text["norm_topk_prob"] = c.norm_topk_prob;
  text["routed_scaling_factor"] = c.routed_scaling_factor;
  if (c.gate_temp != 1.0) text["gate_temp"] = c.gate_temp;
  text["sliding_window"] = c.sliding_window;
  text["compress_ratios"] = RatiosWithStages(c);
  text["compress_rope_theta"] = c.compress_rope_theta;
  text["kv_source_layer_ids"] = c.kv_source_layer_ids;
  text["index_source_layer_ids"] = c.index_source_layer_ids;
  text["index_n_heads"] = c.index_n_heads;
  text["index_head_dim"] = c.index_head_dim;
  text["index_topk"] = c.index_topk;
  text["candidate_source_layer_id"] = c.candidate_source_layer_id;
  text["candidate_topk_blocks"] = c.candidate_topk_blocks;
  text["candidate_block_size"] = c.candidate_block_size;
  text["hc_mult"] = c.hc_mult;
  text["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  text["hc_eps"] = c.hc_eps;
  text["engram_layer_ids"] = c.engram_layer_ids;
  text["engram_num_embeddings"] = c.engram_num_embeddings;
  text["engram_max_ngram_size"] = c.engram_max_ngram_size;
  text["engram_vocab_size"] = c.engram_vocab_size;
  text["engram_n_heads"] = c.engram_n_heads;
  text["engram_head_dim"] = c.engram_head_dim;
  text["engram_pad_token_id"] = c.engram_pad_token_id;
  text["engram_compressed_vocab_size"] = c.engram_compressed_vocab_size;
  text["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  text["dspark_block_size"] = c.dspark_block_size;
  text["dspark_noise_token_id"] = c.dspark_noise_token_id;
  text["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
  text["dspark_markov_rank"] = c.dspark_markov_rank;
  text["dspark_n_routed_experts"] = c.dspark_n_routed_experts;
  text["dspark_num_experts_per_tok"] = c.dspark_num_experts_per_tok;
  text["bos_token_id"] = c.bos_token_id;
  text["eos_token_id"] = c.eos_token_id;
  text["pad_token_id"] = c.pad_token_id;

  OrderedJson top;
  top["architectures"] = {"DeepseekV41ForCausalLM"};
  top["model_type"] = "deepseek_v41";
  top["dtype"] = "bfloat16";
  top["bos_token_id"] = c.bos_token_id;
  top["eos_token_id"] = c.eos_token_id;
  top["pad_token_id"] = c.pad_token_id;
  if (c.image_token_id >= 0) top["image_token_id"] = c.image_token_id;
  top["tie_word_embeddings"] = false;
  if (c.quantization.quantized) {
    const QuantizationConfig& q = c.quantization;
    OrderedJson quant;
    quant["quant_method"] = q.quant_method;
    quant["activation_scheme"] = q.activation_scheme;
    quant["weight_block_size"] = {q.weight_block_rows, q.weight_block_cols};
    quant["scale_fmt"] = q.scale_fmt;
    if (!q.expert_dtype.empty()) quant["expert_dtype"] = q.expert_dtype;
    top["quantization_config"] = std::move(quant);
  }
  top["text_config"] = std::move(text);
  if (c.vision.has_tower()) {
    OrderedJson vision;
    vision["model_type"] = "deepseek_v41_vision";
    WriteVisionFields(c.vision, /*flat=*/false, vision);
    vision["max_wh_ratio"] = nullptr;
    top["vision_config"] = std::move(vision);
  }
  return top;
}

OrderedJson ConfigToInferenceJson(const ModelConfig& c) {
  OrderedJson j;
  j["vocab_size"] = c.vocab_size;
  j["dim"] = c.hidden_size;
  j["moe_inter_dim"] = c.moe_intermediate_size;
  j["n_layers"] = c.num_hidden_layers;
  j["n_mtp_layers"] = c.num_nextn_predict_layers;
  j["dspark_block_size"] = c.dspark_block_size;
  j["dspark_noise_token_id"] = c.dspark_noise_token_id;
  j["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
  j["dspark_markov_rank"] = c.dspark_markov_rank;
  j["dspark_n_routed_experts"] = c.dspark_n_routed_experts;
  j["dspark_n_activated_experts"] = c.dspark_num_experts_per_tok;
  j["n_heads"] = c.num_attention_heads;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["n_activated_experts"] = c.num_experts_per_tok;
  j["score_func"] = ScoringFuncName(c.scoring_func);
  j["route_scale"] = c.routed_scaling_factor;
  j["swiglu_limit"] = c.swiglu_limit;
  j["q_lora_rank"] = c.q_lora_rank;
  j["head_dim"] = c.head_dim;
  j["rope_head_dim"] = c.qk_rope_head_dim;
  j["norm_eps"] = c.rms_norm_eps;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["window_size"] = c.sliding_window;
  j["kv_source_layers"] = c.kv_source_layer_ids;
  j["index_source_layers"] = c.index_source_layer_ids;
  j["original_seq_len"] = c.compress_yarn.original_max_position_embeddings;
  j["rope_theta"] = c.rope_theta;
  j["rope_factor"] = c.compress_yarn.factor;
  j["beta_fast"] = c.compress_yarn.beta_fast;
  j["beta_slow"] = c.compress_yarn.beta_slow;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["candidate_source_layer"] = c.candidate_source_layer_id;
  j["candidate_topk_blocks"] = c.candidate_topk_blocks;
  j["candidate_block_size"] = c.candidate_block_size;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["engram_layer_ids"] = c.engram_layer_ids;
  j["engram_vocab_size"] = c.engram_vocab_size;
  j["engram_num_embeddings"] = c.engram_num_embeddings;
  j["engram_max_ngram_size"] = c.engram_max_ngram_size;
  j["engram_pad_id"] = c.engram_pad_token_id;
  j["engram_compressed_vocab_size"] = c.engram_compressed_vocab_size;
  j["dtype"] = c.quantization.quantized ? "fp8" : "bf16";
  if (c.quantization.quantized && !c.quantization.expert_dtype.empty()) {
    j["expert_dtype"] = c.quantization.expert_dtype;
  } else {
    j["expert_dtype"] = nullptr;
  }
  j["compress_rope_theta"] = c.compress_rope_theta;
  j["compress_ratios"] = RatiosWithStages(c);
  if (c.image_token_id >= 0) j["image_token_id"] = c.image_token_id;
  j["engram_n_heads"] = c.engram_n_heads;
  j["engram_head_dim"] = c.engram_head_dim;
  if (c.vision.has_tower()) {
    WriteVisionFields(c.vision, /*flat=*/true, j);
    j["vision_max_wh_ratio"] = nullptr;
  }
  // Fields the reference file does not carry, written only when the defaults would not give them
  // back.
  if (!c.norm_topk_prob) j["norm_topk_prob"] = false;
  if (c.gate_temp != 1.0) j["gate_temp"] = c.gate_temp;
  const double derived_max_pos =
      static_cast<double>(c.compress_yarn.original_max_position_embeddings) *
      c.compress_yarn.factor;
  if (c.compress_yarn.original_max_position_embeddings <= 0
          ? c.max_position_embeddings != 0
          : static_cast<double>(c.max_position_embeddings) != derived_max_pos) {
    j["max_position_embeddings"] = c.max_position_embeddings;
  }
  if (c.bos_token_id != 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id != 1) j["eos_token_id"] = c.eos_token_id;
  if (c.pad_token_id != 2) j["pad_token_id"] = c.pad_token_id;
  return j;
}

ModelConfig ReleasedConfig() {
  ModelConfig c;
  c.vocab_size = 129280;
  c.hidden_size = 5120;
  c.num_hidden_layers = 40;
  c.num_nextn_predict_layers = 3;
  c.num_attention_heads = 64;
  c.num_key_value_heads = 1;
  c.head_dim = 512;
  c.qk_rope_head_dim = 64;
  c.q_lora_rank = 1280;
  c.o_groups = 8;
  c.o_lora_rank = 1024;
  c.attention_bias = false;
  c.rms_norm_eps = 1e-20;
  c.sliding_window = 128;
  c.compress_ratios = ReleasedCompressRatios();
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.compress_yarn.factor = 16;
  c.compress_yarn.original_max_position_embeddings = 65536;
  c.compress_yarn.beta_fast = 32;
  c.compress_yarn.beta_slow = 1;
  c.max_position_embeddings = 1048576;
  c.kv_source_layer_ids = kReleasedKvSources;
  c.index_source_layer_ids = kReleasedIndexSources;
  c.candidate_source_layer_id = 20;
  c.candidate_topk_blocks = 2048;
  c.candidate_block_size = 8;
  c.index_n_heads = 32;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.moe_intermediate_size = 2304;
  c.n_routed_experts = 384;
  c.num_experts_per_tok = 6;
  c.n_shared_experts = 1;
  c.scoring_func = ScoringFunc::kSqrtSoftplus;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 1.5;
  c.gate_temp = 1.0;
  c.swiglu_limit = 10.0;
  c.hidden_act = "silu";
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.engram_layer_ids = {1, 14};
  c.engram_num_embeddings = {384006168, 384016682};
  c.engram_max_ngram_size = 4;
  c.engram_vocab_size = 16000000;
  c.engram_n_heads = 8;
  c.engram_head_dim = 256;
  c.engram_pad_token_id = 2;
  c.engram_compressed_vocab_size = 99092;
  c.dspark_block_size = 5;
  c.dspark_noise_token_id = 128799;
  c.dspark_target_layer_ids = {37, 38, 39};
  c.dspark_markov_rank = 256;
  c.dspark_n_routed_experts = 128;
  c.dspark_num_experts_per_tok = 3;
  c.bos_token_id = 0;
  c.eos_token_id = 1;
  c.pad_token_id = 2;
  c.image_token_id = 129264;
  c.quantization = Fp8Quantization("fp4");
  return c;
}

VisionConfig ReleasedVisionConfig() {
  return VisionConfig{.num_hidden_layers = 32,
                      .hidden_size = 1024,
                      .num_attention_heads = 16,
                      .intermediate_size = 2816,
                      .patch_size = 14,
                      .rope_theta = 10000.0,
                      .downsample_ratio = 3,
                      .max_image_tokens = 1024,
                      .min_pixels = 295936};
}

}  // namespace dsv41

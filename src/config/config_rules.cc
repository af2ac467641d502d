#include "config/config_rules.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/log.h"
#include "config/engram_primes.h"
#include "kernels/index_score_tile.h"

namespace dsv41 {
namespace {

// Returns the first rule that fails from the enclosing function.
#define DSV41_RULE(cond, field, ...) \
  if (!(cond)) return ConfigIssue {  \
      field, StrFormat(__VA_ARGS__)  \
    }

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The largest element of the sorted `ids` that is <= l, or -1.
int32_t Latest(const std::vector<int32_t>& ids, int32_t l) {
  int32_t latest = -1;
  for (const int32_t id : ids) {
    if (id <= l) latest = id;
  }
  return latest;
}

// Sorted, unique, in [0, n), ratio > 0 (model.md §1.6).
std::optional<ConfigIssue> CheckSourceList(const ModelConfig& c, const char* field,
                                           const std::vector<int32_t>& ids, const char* role) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t l = ids[i];
    DSV41_RULE(l >= 0 && l < c.num_hidden_layers, field, "layer %d is out of range [0, %d)", l,
               c.num_hidden_layers);
    DSV41_RULE(i == 0 || ids[i - 1] < l, field,
               "must be sorted and unique; layer %d follows layer %d", l, ids[i - 1]);
    DSV41_RULE(c.compress_ratios[static_cast<size_t>(l)] > 0, field,
               "layer %d has compress ratio 0; a %s needs ratio > 0", l, role);
  }
  return std::nullopt;
}

std::optional<ConfigIssue> CheckSizes(const ModelConfig& c) {
  DSV41_RULE(c.num_hidden_layers >= 1, "num_hidden_layers", "%d; want >= 1", c.num_hidden_layers);
  DSV41_RULE(c.num_nextn_predict_layers >= 0, "num_nextn_predict_layers", "%d; want >= 0",
             c.num_nextn_predict_layers);
  DSV41_RULE(c.vocab_size >= 1, "vocab_size", "%d; want >= 1", c.vocab_size);
  DSV41_RULE(c.hidden_size >= 1, "hidden_size", "%d; want >= 1", c.hidden_size);
  DSV41_RULE(c.num_attention_heads >= 1, "num_attention_heads", "%d; want >= 1",
             c.num_attention_heads);
  DSV41_RULE(c.head_dim >= 1, "head_dim", "%d; want >= 1", c.head_dim);
  DSV41_RULE(c.q_lora_rank >= 1, "q_lora_rank", "%d; want >= 1", c.q_lora_rank);
  DSV41_RULE(c.o_groups >= 1, "o_groups", "%d; want >= 1", c.o_groups);
  DSV41_RULE(c.o_lora_rank >= 1, "o_lora_rank", "%d; want >= 1", c.o_lora_rank);
  DSV41_RULE(c.sliding_window >= 1, "sliding_window", "%d; want >= 1", c.sliding_window);
  DSV41_RULE(c.moe_intermediate_size >= 1, "moe_intermediate_size", "%d; want >= 1",
             c.moe_intermediate_size);
  DSV41_RULE(c.n_routed_experts >= 1, "n_routed_experts", "%d; want >= 1", c.n_routed_experts);
  DSV41_RULE(c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.n_routed_experts,
             "num_experts_per_tok", "%d; want 1..n_routed_experts (%d)", c.num_experts_per_tok,
             c.n_routed_experts);
  DSV41_RULE(c.hc_mult >= 1, "hc_mult", "%d; want >= 1", c.hc_mult);
  DSV41_RULE(c.hc_sinkhorn_iters >= 1, "hc_sinkhorn_iters", "%d; want >= 1", c.hc_sinkhorn_iters);
  DSV41_RULE(c.rms_norm_eps > 0, "rms_norm_eps", "%g; want > 0", c.rms_norm_eps);
  DSV41_RULE(c.hc_eps >= 0, "hc_eps", "%g; want >= 0", c.hc_eps);
  DSV41_RULE(c.rope_theta > 0, "rope_theta", "%g; want > 0", c.rope_theta);
  DSV41_RULE(c.compress_rope_theta > 0, "compress_rope_theta", "%g; want > 0",
             c.compress_rope_theta);
  DSV41_RULE(c.compress_yarn.original_max_position_embeddings >= 0,
             "rope_scaling.original_max_position_embeddings", "%lld; want >= 0",
             static_cast<long long>(c.compress_yarn.original_max_position_embeddings));
  DSV41_RULE(c.compress_yarn.original_max_position_embeddings == 0 || c.compress_yarn.factor >= 1,
             "rope_scaling.factor", "%g; want >= 1", c.compress_yarn.factor);
  DSV41_RULE(c.max_position_embeddings >= 0, "max_position_embeddings", "%lld; want >= 0",
             static_cast<long long>(c.max_position_embeddings));
  for (const auto& [field, id] :
       {std::pair{"bos_token_id", c.bos_token_id}, std::pair{"eos_token_id", c.eos_token_id},
        std::pair{"pad_token_id", c.pad_token_id}}) {
    DSV41_RULE(id >= 0 && id < c.vocab_size, field, "%d is not a token id of vocab_size %d", id,
               c.vocab_size);
  }
  DSV41_RULE(c.image_token_id < c.vocab_size, "image_token_id",
             "%d is not a token id of vocab_size %d", c.image_token_id, c.vocab_size);
  return std::nullopt;
}

// model.md §1.6 "Structure": ratios, sources, candidate level.
std::optional<ConfigIssue> CheckStructure(const ModelConfig& c) {
  const int32_t n = c.num_hidden_layers;
  DSV41_RULE(c.compress_ratios.size() == static_cast<size_t>(n), "compress_ratios",
             "%zu backbone entries; want num_hidden_layers = %d", c.compress_ratios.size(), n);
  for (int32_t l = 0; l < n; ++l) {
    const int32_t r = c.compress_ratios[static_cast<size_t>(l)];
    DSV41_RULE(r == 0 || r == 1 || r == 2, "compress_ratios",
               "layer %d has ratio %d; only 0, 1 and 2 are supported", l, r);
  }
  if (auto issue = CheckSourceList(c, "kv_source_layer_ids", c.kv_source_layer_ids, "kv source")) {
    return issue;
  }
  if (auto issue =
          CheckSourceList(c, "index_source_layer_ids", c.index_source_layer_ids, "index source")) {
    return issue;
  }
  for (const int32_t l : c.kv_source_layer_ids) {
    DSV41_RULE(Contains(c.index_source_layer_ids, l), "index_source_layer_ids",
               "kv source layer %d is not an index source; every kv source runs an indexer", l);
  }
  for (int32_t l = 0; l < n; ++l) {
    const int32_t r = c.compress_ratios[static_cast<size_t>(l)];
    if (r == 0) continue;
    const int32_t kv = Latest(c.kv_source_layer_ids, l);
    DSV41_RULE(kv >= 0, "kv_source_layer_ids",
               "layer %d has ratio %d but no kv source at or below it", l, r);
    DSV41_RULE(Latest(c.index_source_layer_ids, l) >= 0, "index_source_layer_ids",
               "layer %d has ratio %d but no index source at or below it", l, r);
    const int32_t kv_ratio = c.compress_ratios[static_cast<size_t>(kv)];
    DSV41_RULE(r == kv_ratio, "compress_ratios",
               "layer %d has ratio %d but its kv source layer %d has ratio %d; a layer reads its "
               "source's compressed cache",
               l, r, kv, kv_ratio);
  }
  const int32_t cand = c.candidate_source_layer_id;
  if (cand >= 0) {
    DSV41_RULE(Contains(c.index_source_layer_ids, cand), "candidate_source_layer_id",
               "layer %d is not an index source", cand);
    DSV41_RULE(Contains(c.kv_source_layer_ids, cand), "candidate_source_layer_id",
               "layer %d is not a kv source", cand);
    const int32_t cand_ratio = c.compress_ratios[static_cast<size_t>(cand)];
    for (const int32_t l : c.kv_source_layer_ids) {
      const int32_t r = c.compress_ratios[static_cast<size_t>(l)];
      DSV41_RULE(l <= cand || r == cand_ratio, "kv_source_layer_ids",
                 "kv source layer %d (ratio %d) follows candidate source layer %d (ratio %d); "
                 "index sources after the candidate source filter entry by entry, so the "
                 "ratios must match",
                 l, r, cand, cand_ratio);
    }
    DSV41_RULE(c.candidate_topk_blocks >= 1, "candidate_topk_blocks", "%d; want >= 1",
               c.candidate_topk_blocks);
    DSV41_RULE(c.candidate_block_size >= 1, "candidate_block_size", "%d; want >= 1",
               c.candidate_block_size);
    const int64_t pool = (static_cast<int64_t>(c.candidate_topk_blocks) - 1) *
                             static_cast<int64_t>(c.candidate_block_size) +
                         1;
    DSV41_RULE(pool >= c.index_topk, "candidate_topk_blocks",
               "(candidate_topk_blocks - 1) * candidate_block_size + 1 = %lld < index_topk %d; "
               "the candidate pool must hold the top-k",
               static_cast<long long>(pool), c.index_topk);
  } else {
    DSV41_RULE(c.candidate_topk_blocks >= 1, "candidate_topk_blocks", "%d; want >= 1",
               c.candidate_topk_blocks);
    DSV41_RULE(c.candidate_block_size >= 1, "candidate_block_size", "%d; want >= 1",
               c.candidate_block_size);
  }
  return std::nullopt;
}

// Attention, indexer and MoE shapes and the block divisibility the reference asserts.
std::optional<ConfigIssue> CheckShapes(const ModelConfig& c) {
  DSV41_RULE(c.num_key_value_heads == 1, "num_key_value_heads",
             "%d; the model has one shared K=V latent (must be 1)", c.num_key_value_heads);
  DSV41_RULE(!c.attention_bias, "attention_bias", "true; must be false");
  DSV41_RULE(c.num_attention_heads % c.o_groups == 0, "o_groups",
             "num_attention_heads %d is not a multiple of o_groups %d", c.num_attention_heads,
             c.o_groups);
  DSV41_RULE(c.qk_rope_head_dim >= 0 && c.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim",
             "%d; want an even number >= 0", c.qk_rope_head_dim);
  DSV41_RULE(c.qk_rope_head_dim < c.head_dim, "qk_rope_head_dim", "%d; want < head_dim %d",
             c.qk_rope_head_dim, c.head_dim);
  DSV41_RULE(c.hidden_act == "silu", "hidden_act", "\"%s\"; only \"silu\" is defined",
             c.hidden_act.c_str());
  DSV41_RULE(c.n_shared_experts == 1, "n_shared_experts", "%d; must be 1", c.n_shared_experts);
  // The input width of every FP8/FP4 GEMM is a multiple of 32 (activation quantisation blocks);
  // an unquantised checkpoint has no such GEMM.
  if (c.quantization.quantized) {
    DSV41_RULE(c.hidden_size % 32 == 0, "hidden_size",
               "%d is not a multiple of 32 (input width of wq_a, wkv, experts w1/w3)",
               c.hidden_size);
    DSV41_RULE(c.q_lora_rank % 32 == 0, "q_lora_rank",
               "%d is not a multiple of 32 (input width of wq_b)", c.q_lora_rank);
    const int64_t wo_a_out = static_cast<int64_t>(c.o_groups) * c.o_lora_rank;
    DSV41_RULE(wo_a_out % 32 == 0, "o_lora_rank",
               "o_groups * o_lora_rank = %lld is not a multiple of 32 (input width of wo_b)",
               static_cast<long long>(wo_a_out));
    DSV41_RULE(c.moe_intermediate_size % 32 == 0, "moe_intermediate_size",
               "%d is not a multiple of 32 (input width of w2)", c.moe_intermediate_size);
  }
  // QAT fake-quant blocks: FP8 blocks of 32 on SWA KV, FP4 blocks of 16 on compressed KV.
  DSV41_RULE(c.head_dim % 32 == 0, "head_dim",
             "%d is not a multiple of 32 (FP8 fake-quant blocks of the KV cache)", c.head_dim);
  if (!c.index_source_layer_ids.empty()) {
    DSV41_RULE(c.index_n_heads >= 1, "index_n_heads", "%d; want >= 1", c.index_n_heads);
    DSV41_RULE(c.index_head_dim >= 1 && c.index_head_dim % 32 == 0, "index_head_dim",
               "%d is not a positive multiple of 32 (FP4 fake-quant blocks of index keys)",
               c.index_head_dim);
    DSV41_RULE(c.index_head_dim <= static_cast<int32_t>(kIndexKeyMaxDim), "index_head_dim",
               "%d; the indexer's key tiles hold at most %zu", c.index_head_dim, kIndexKeyMaxDim);
    DSV41_RULE(c.qk_rope_head_dim <= c.index_head_dim, "qk_rope_head_dim",
               "%d > index_head_dim %d; the indexer rotates its last qk_rope_head_dim dims",
               c.qk_rope_head_dim, c.index_head_dim);
    DSV41_RULE(c.index_topk >= 1, "index_topk", "%d; want >= 1", c.index_topk);
  }
  return std::nullopt;
}

std::optional<ConfigIssue> CheckEngram(const ModelConfig& c) {
  const std::vector<int32_t>& ids = c.engram_layer_ids;
  for (size_t i = 0; i < ids.size(); ++i) {
    DSV41_RULE(ids[i] >= 0 && ids[i] < c.num_hidden_layers, "engram_layer_ids",
               "layer %d is out of range [0, %d)", ids[i], c.num_hidden_layers);
    for (size_t j = 0; j < i; ++j) {
      DSV41_RULE(ids[j] != ids[i], "engram_layer_ids", "layer %d is listed twice", ids[i]);
    }
  }
  DSV41_RULE(c.engram_num_embeddings.size() == ids.size(), "engram_num_embeddings",
             "%zu entries; want one per engram_layer_ids entry (%zu)",
             c.engram_num_embeddings.size(), ids.size());
  if (ids.empty()) return std::nullopt;
  DSV41_RULE(c.engram_max_ngram_size >= 2 && c.engram_max_ngram_size <= kMaxEngramNgramSize,
             "engram_max_ngram_size", "%d; want 2 .. %d", c.engram_max_ngram_size,
             kMaxEngramNgramSize);
  DSV41_RULE(c.engram_n_heads >= 1, "engram_n_heads", "%d; want >= 1", c.engram_n_heads);
  DSV41_RULE(c.engram_head_dim >= 32 && c.engram_head_dim % 32 == 0, "engram_head_dim",
             "%d is not a positive multiple of 32 (one table scale per 32 values)",
             c.engram_head_dim);
  DSV41_RULE(c.engram_vocab_size >= 1, "engram_vocab_size", "%lld; want >= 1",
             static_cast<long long>(c.engram_vocab_size));
  DSV41_RULE(c.engram_compressed_vocab_size >= 1, "engram_compressed_vocab_size", "%lld; want >= 1",
             static_cast<long long>(c.engram_compressed_vocab_size));
  DSV41_RULE(c.engram_pad_token_id >= 0 && c.engram_pad_token_id < c.vocab_size,
             "engram_pad_token_id", "%d is not a token id of vocab_size %d", c.engram_pad_token_id,
             c.vocab_size);
  const int64_t columns = static_cast<int64_t>(c.engram_max_ngram_size - 1) * c.engram_n_heads;
  DSV41_RULE(columns <= 65536, "engram_n_heads",
             "(engram_max_ngram_size - 1) * engram_n_heads = %lld hash columns; want <= 65536",
             static_cast<long long>(columns));
  Result<std::vector<EngramLayerPrimes>> primes =
      ComputeEngramPrimes(ids, c.engram_max_ngram_size, c.engram_n_heads, c.engram_vocab_size);
  if (!primes.ok()) return ConfigIssue{"engram_vocab_size", primes.status().message()};
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t want = (*primes)[i].num_rows;
    DSV41_RULE(c.engram_num_embeddings[i] == want, "engram_num_embeddings",
               "entry %zu (layer %d) is %lld, but that layer's primes sum to %lld (model.md §9.3)",
               i, ids[i], static_cast<long long>(c.engram_num_embeddings[i]),
               static_cast<long long>(want));
  }
  return std::nullopt;
}

std::optional<ConfigIssue> CheckDspark(const ModelConfig& c) {
  for (const int32_t l : c.dspark_target_layer_ids) {
    DSV41_RULE(l >= 0 && l < c.num_hidden_layers, "dspark_target_layer_ids",
               "layer %d is out of range [0, %d)", l, c.num_hidden_layers);
  }
  if (c.num_nextn_predict_layers == 0) return std::nullopt;
  DSV41_RULE(!c.dspark_target_layer_ids.empty(), "dspark_target_layer_ids",
             "empty; DSpark stages need at least one target layer");
  DSV41_RULE(c.dspark_block_size >= 1, "dspark_block_size", "%d; want >= 1", c.dspark_block_size);
  DSV41_RULE(c.dspark_noise_token_id >= 0 && c.dspark_noise_token_id < c.vocab_size,
             "dspark_noise_token_id", "%d is not a token id of vocab_size %d",
             c.dspark_noise_token_id, c.vocab_size);
  DSV41_RULE(c.dspark_markov_rank >= 1, "dspark_markov_rank", "%d; want >= 1",
             c.dspark_markov_rank);
  DSV41_RULE(c.dspark_n_routed_experts >= 1, "dspark_n_routed_experts", "%d; want >= 1",
             c.dspark_n_routed_experts);
  DSV41_RULE(c.dspark_num_experts_per_tok >= 1 &&
                 c.dspark_num_experts_per_tok <= c.dspark_n_routed_experts,
             "dspark_num_experts_per_tok", "%d; want 1..dspark_n_routed_experts (%d)",
             c.dspark_num_experts_per_tok, c.dspark_n_routed_experts);
  DSV41_RULE(!c.quantization.quantized ||
                 static_cast<int64_t>(c.dspark_target_layer_ids.size()) * c.hidden_size % 32 == 0,
             "dspark_target_layer_ids",
             "len(dspark_target_layer_ids) * hidden_size = %lld is not a multiple of 32 (input "
             "width of main_proj)",
             static_cast<long long>(c.dspark_target_layer_ids.size()) * c.hidden_size);
  return std::nullopt;
}

std::optional<ConfigIssue> CheckQuantization(const ModelConfig& c) {
  const QuantizationConfig& q = c.quantization;
  if (!q.quantized) return std::nullopt;
  DSV41_RULE(q.quant_method == "fp8", "quantization_config.quant_method",
             "\"%s\"; only \"fp8\" is supported", q.quant_method.c_str());
  DSV41_RULE(q.activation_scheme == "dynamic", "quantization_config.activation_scheme",
             "\"%s\"; only \"dynamic\" is supported", q.activation_scheme.c_str());
  DSV41_RULE(q.scale_fmt == "ue8m0", "quantization_config.scale_fmt",
             "\"%s\"; only \"ue8m0\" is supported", q.scale_fmt.c_str());
  // V4.1 tiles FP8 weights 32×32 (V4 used 128×128); the kernels decode 32×32 tiles, so any other
  // size is refused rather than read with the wrong scale per weight (trap L1).
  DSV41_RULE(q.weight_block_rows == 32 && q.weight_block_cols == 32,
             "quantization_config.weight_block_size", "[%d, %d]; only [32, 32] is supported",
             q.weight_block_rows, q.weight_block_cols);
  DSV41_RULE(q.expert_dtype.empty() || q.expert_dtype == "fp4", "quantization_config.expert_dtype",
             "\"%s\"; want \"fp4\" or absent", q.expert_dtype.c_str());
  return std::nullopt;
}

// vision.md §1: a tower's sizes, in ranges that keep every plan and buffer size in 64 bits.
std::optional<ConfigIssue> CheckVision(const ModelConfig& c) {
  const VisionConfig& v = c.vision;
  if (!v.has_tower()) return std::nullopt;
  DSV41_RULE(v.num_hidden_layers <= 4096, "vision_config.num_hidden_layers", "%d; want <= 4096",
             v.num_hidden_layers);
  DSV41_RULE(v.hidden_size >= 1 && v.hidden_size <= 65536, "vision_config.hidden_size",
             "%d; want 1 .. 65536", v.hidden_size);
  DSV41_RULE(v.num_attention_heads >= 1 && v.hidden_size % v.num_attention_heads == 0 &&
                 v.head_dim() % 4 == 0 && v.head_dim() <= kMaxVisionHeadDim,
             "vision_config.num_attention_heads",
             "%d; want a divisor of hidden_size (%d) giving a head_dim that is a multiple of 4, "
             "at most %d",
             v.num_attention_heads, v.hidden_size, kMaxVisionHeadDim);
  DSV41_RULE(v.intermediate_size >= 1 && v.intermediate_size <= 1 << 20,
             "vision_config.intermediate_size", "%d; want 1 .. 2^20", v.intermediate_size);
  DSV41_RULE(v.patch_size >= 1 && v.patch_size <= 1024, "vision_config.patch_size",
             "%d; want 1 .. 1024", v.patch_size);
  DSV41_RULE(v.downsample_ratio >= 1 && v.downsample_ratio <= 64, "vision_config.downsample_ratio",
             "%d; want 1 .. 64", v.downsample_ratio);
  DSV41_RULE(v.max_image_tokens >= 4 && v.max_image_tokens <= 1 << 20,
             "vision_config.max_image_tokens", "%d; want 4 .. 2^20", v.max_image_tokens);
  DSV41_RULE(v.min_pixels >= 0 && v.min_pixels <= int64_t{1} << 40, "vision_config.min_pixels",
             "%lld; want 0 .. 2^40", static_cast<long long>(v.min_pixels));
  DSV41_RULE(v.rope_theta > 0 && v.rope_theta < 1e300, "vision_config.rope_theta", "%g; want > 0",
             v.rope_theta);
  DSV41_RULE(c.image_token_id >= 0 && c.image_token_id < c.vocab_size, "image_token_id",
             "%d; a vision tower needs an image token id in [0, %d)", c.image_token_id,
             c.vocab_size);
  return std::nullopt;
}

#undef DSV41_RULE

}  // namespace

std::optional<ConfigIssue> FindConfigIssue(const ModelConfig& config) {
  for (auto check : {CheckSizes, CheckStructure, CheckShapes, CheckEngram, CheckDspark,
                     CheckQuantization, CheckVision}) {
    if (std::optional<ConfigIssue> issue = check(config)) return issue;
  }
  return std::nullopt;
}

void WarnAboutConfig(const ModelConfig& c) {
  const YarnConfig& yarn = c.compress_yarn;
  if (yarn.original_max_position_embeddings > 0 &&
      static_cast<double>(yarn.original_max_position_embeddings) * yarn.factor !=
          static_cast<double>(c.max_position_embeddings)) {
    DSV41_LOG_WARN(
        "config: rope_scaling.original_max_position_embeddings (%lld) x factor (%g) != "
        "max_position_embeddings (%lld)",
        static_cast<long long>(yarn.original_max_position_embeddings), yarn.factor,
        static_cast<long long>(c.max_position_embeddings));
  }
}

}  // namespace dsv41

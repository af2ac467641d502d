#include "tiny/tiny_presets.h"

namespace dsv41 {
namespace {

// checkpoint.md §8.2 "tiny-v41": 10 layers whose plan is SWA, SWA+Engram, Full r2, Reuse,
// Full r2+Engram, Reuse, Full r1 + candidate source, Reuse, Reindex (filter), Reuse.
ModelConfig TinyConfig() {
  ModelConfig c;
  c.vocab_size = 512;
  c.hidden_size = 256;
  c.num_hidden_layers = 10;
  c.num_nextn_predict_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;
  c.head_dim = 64;
  c.qk_rope_head_dim = 16;
  c.q_lora_rank = 64;
  c.o_groups = 2;
  c.o_lora_rank = 32;
  c.rms_norm_eps = 1e-20;
  c.sliding_window = 8;
  c.compress_ratios = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1};
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  // A context an agent's prompt fits in (Claude Code's first request is ~50k tokens); YaRN's
  // product original × factor equals it, as in the release.
  c.compress_yarn = {
      .factor = 16, .original_max_position_embeddings = 8192, .beta_fast = 32, .beta_slow = 1};
  c.max_position_embeddings = 131072;
  c.kv_source_layer_ids = {2, 4, 6};
  c.index_source_layer_ids = {2, 4, 6, 8};
  c.candidate_source_layer_id = 6;
  c.candidate_topk_blocks = 3;
  c.candidate_block_size = 2;
  c.index_n_heads = 4;
  c.index_head_dim = 32;
  c.index_topk = 4;
  c.moe_intermediate_size = 64;
  c.n_routed_experts = 8;
  c.num_experts_per_tok = 2;
  c.n_shared_experts = 1;
  c.scoring_func = ScoringFunc::kSqrtSoftplus;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  c.hc_eps = 1e-6;
  c.engram_layer_ids = {1, 4};
  c.engram_max_ngram_size = 4;
  c.engram_vocab_size = 31;  // primes 31..79: tables of 252 and 410 rows
  c.engram_n_heads = 2;
  c.engram_head_dim = 32;
  c.engram_pad_token_id = 2;
  c.dspark_block_size = 5;
  c.dspark_target_layer_ids = {7, 8, 9};
  c.dspark_markov_rank = 32;
  c.dspark_n_routed_experts = 4;
  c.dspark_num_experts_per_tok = 2;
  c.quantization = ReleasedConfig().quantization;
  // A small vision tower with the released tensor names (vision.md §1, §2): tiny-v's sizes.
  c.vision = VisionConfig{.num_hidden_layers = 2,
                          .hidden_size = 64,
                          .num_attention_heads = 4,
                          .intermediate_size = 128,
                          .patch_size = 14,
                          .rope_theta = 10000.0,
                          .downsample_ratio = 3,
                          .max_image_tokens = 120,
                          .min_pixels = 40000};
  // Filled in by the writer from the tokenizer it generates: engram_num_embeddings (primes),
  // engram_compressed_vocab_size (token map), dspark_noise_token_id.
  return c;
}

// The same plan at realistic per-matrix sizes (~1.2 GB), for the speed baseline.
ModelConfig SmallConfig() {
  ModelConfig c = TinyConfig();
  c.vocab_size = 16384;
  c.hidden_size = 1024;
  c.num_attention_heads = 16;
  c.head_dim = 128;
  c.qk_rope_head_dim = 32;
  c.q_lora_rank = 256;
  c.o_groups = 4;
  c.o_lora_rank = 256;
  c.sliding_window = 64;
  c.index_n_heads = 8;
  c.index_head_dim = 64;
  c.index_topk = 32;
  c.candidate_topk_blocks = 16;
  c.candidate_block_size = 4;
  c.moe_intermediate_size = 512;
  c.n_routed_experts = 128;
  c.num_experts_per_tok = 6;
  c.engram_n_heads = 4;
  c.engram_head_dim = 64;
  c.engram_vocab_size = 50000;
  c.dspark_markov_rank = 64;
  c.dspark_n_routed_experts = 16;
  c.dspark_num_experts_per_tok = 3;
  // A quarter of the released tower's width, an eighth of its depth, a quarter of its span.
  c.vision.num_hidden_layers = 4;
  c.vision.hidden_size = 256;
  c.vision.num_attention_heads = 4;
  c.vision.intermediate_size = 704;
  c.vision.max_image_tokens = 256;
  return c;
}

// The released shapes in four layers (see TinyPreset).
ModelConfig FlashConfig() {
  ModelConfig c = ReleasedConfig();
  c.num_hidden_layers = 4;
  c.compress_ratios = {0, 2, 1, 1};
  c.kv_source_layer_ids = {1, 2};
  c.index_source_layer_ids = {1, 2};
  c.candidate_source_layer_id = 2;
  c.n_routed_experts = 16;
  c.num_experts_per_tok = 6;
  c.engram_layer_ids = {1, 3};
  c.num_nextn_predict_layers = 3;
  c.dspark_target_layer_ids = {1, 2, 3};
  c.dspark_n_routed_experts = 16;
  c.dspark_num_experts_per_tok = 3;
  return c;
}

}  // namespace

Status SetEngramTableGib(ModelConfig& config, double gib) {
  const int64_t num_layers = static_cast<int64_t>(config.engram_layer_ids.size());
  const int64_t primes_per_layer =
      static_cast<int64_t>(config.engram_max_ngram_size - 1) * config.engram_n_heads;
  if (num_layers == 0 || primes_per_layer <= 0) {
    return InvalidArgumentError("--engram-gib: the config has no Engram tables");
  }
  const double row_bytes = config.engram_head_dim + config.engram_head_dim / 32.0;
  const double rows_per_table =
      gib * static_cast<double>(int64_t{1} << 30) / (row_bytes * static_cast<double>(num_layers));
  // Each table holds one prime-sized segment per (order, head), primes from engram_vocab_size up.
  const auto start = static_cast<int64_t>(rows_per_table / static_cast<double>(primes_per_layer));
  if (!(gib > 0) || start < 2) return InvalidArgumentError("--engram-gib %g is too small", gib);
  config.engram_vocab_size = start;
  return Status();
}

void MakeUnquantized(ModelConfig& config) { config.quantization = QuantizationConfig{}; }

std::vector<std::string_view> TinyPresetNames() {
  return {"tiny", "tiny-bf16", "tiny-strict", "tiny-real", "small", "flash"};
}

Result<TinySpec> TinyPreset(std::string_view name) {
  TinySpec spec;
  if (name == "tiny") {
    spec.config = TinyConfig();
  } else if (name == "tiny-bf16") {
    spec.config = TinyConfig();
    MakeUnquantized(spec.config);
  } else if (name == "tiny-strict") {
    spec.config = TinyConfig();
    spec.config.hidden_size = 224;
    spec.config.q_lora_rank = 96;
    spec.format = TinySpec::Format::kStrict;
    spec.num_shards = 48;
  } else if (name == "tiny-real") {
    spec.config = TinyConfig();
    spec.released_magnitudes = true;
  } else if (name == "small") {
    spec.config = SmallConfig();
    spec.num_shards = 4;
  } else if (name == "flash") {
    spec.config = FlashConfig();
    DSV41_RETURN_IF_ERROR(SetEngramTableGib(spec.config, 8.0));
    spec.num_shards = 12;
    spec.bulk_values = true;
  } else {
    std::string known;
    for (std::string_view n : TinyPresetNames())
      known += (known.empty() ? "" : ", ") + std::string(n);
    return InvalidArgumentError("unknown preset '%.*s' (known: %s)", static_cast<int>(name.size()),
                                name.data(), known.c_str());
  }
  return spec;
}

}  // namespace dsv41

// `dsv41 tiny`: writes a synthetic checkpoint in the released layout.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/progress_printer.h"
#include "tiny/tiny_checkpoint.h"
#include "tiny/tiny_presets.h"

namespace dsv41 {
namespace {

struct TinyFlags {
  std::string out;
  std::string preset = "tiny";
  bool bf16 = false;
  std::optional<std::string> format, scale_dtype;
  bool released_magnitudes = false;
  std::optional<int32_t> moe_intermediate;
  uint64_t seed = 1;
  std::optional<int32_t> shards;
  std::optional<int32_t> layers, hidden, vocab, window, experts, experts_per_tok, topk;
  std::optional<int32_t> candidate_source, candidate_blocks, candidate_block_size, dspark_stages;
  std::optional<int32_t> engram_heads, engram_ngram;
  std::optional<int32_t> vision_layers, vision_hidden;
  std::optional<int64_t> engram_prime_start, max_positions;
  std::optional<double> engram_gib;
  std::optional<std::vector<int32_t>> ratios, kv_sources, index_sources, engram_layers,
      dspark_targets;
};

template <typename T>
void Override(const std::optional<T>& flag, T& field) {
  if (flag) field = *flag;
}

int RunTiny(const TinyFlags& flags) {
  Result<TinySpec> preset = TinyPreset(flags.preset);
  if (!preset.ok()) {
    std::fprintf(stderr, "dsv41 tiny: --preset: %s\n", preset.status().message().c_str());
    return 2;
  }
  TinySpec spec = std::move(preset).value();
  ModelConfig& c = spec.config;
  spec.seed = flags.seed;
  Override(flags.shards, spec.num_shards);
  Override(flags.layers, c.num_hidden_layers);
  Override(flags.hidden, c.hidden_size);
  Override(flags.vocab, c.vocab_size);
  Override(flags.window, c.sliding_window);
  Override(flags.experts, c.n_routed_experts);
  Override(flags.experts_per_tok, c.num_experts_per_tok);
  Override(flags.topk, c.index_topk);
  Override(flags.candidate_source, c.candidate_source_layer_id);
  Override(flags.candidate_blocks, c.candidate_topk_blocks);
  Override(flags.candidate_block_size, c.candidate_block_size);
  Override(flags.dspark_stages, c.num_nextn_predict_layers);
  Override(flags.engram_heads, c.engram_n_heads);
  Override(flags.engram_ngram, c.engram_max_ngram_size);
  Override(flags.engram_prime_start, c.engram_vocab_size);
  Override(flags.ratios, c.compress_ratios);
  Override(flags.kv_sources, c.kv_source_layer_ids);
  Override(flags.index_sources, c.index_source_layer_ids);
  Override(flags.engram_layers, c.engram_layer_ids);
  Override(flags.dspark_targets, c.dspark_target_layer_ids);
  Override(flags.vision_layers, c.vision.num_hidden_layers);
  Override(flags.vision_hidden, c.vision.hidden_size);
  if (!c.vision.has_tower()) c.vision = VisionConfig{};  // a text-only checkpoint
  if (flags.max_positions) {
    if (*flags.max_positions < c.compress_yarn.factor) {
      std::fprintf(stderr, "dsv41 tiny: --max-position-embeddings %lld: want >= %g\n",
                   static_cast<long long>(*flags.max_positions), c.compress_yarn.factor);
      return 2;
    }
    // YaRN's original context follows, so that original × factor stays the context.
    c.max_position_embeddings = *flags.max_positions;
    c.compress_yarn.original_max_position_embeddings =
        static_cast<int64_t>(static_cast<double>(*flags.max_positions) / c.compress_yarn.factor);
  }
  Override(flags.moe_intermediate, c.moe_intermediate_size);
  if (flags.format)
    spec.format = *flags.format == "strict" ? TinySpec::Format::kStrict : TinySpec::Format::kSimple;
  if (flags.released_magnitudes) spec.released_magnitudes = true;
  if (flags.scale_dtype)
    spec.scale_dtype = *flags.scale_dtype == "u8" ? DType::kU8 : DType::kF8E8M0;
  if (flags.bf16) MakeUnquantized(c);
  if (flags.engram_gib) {
    const Status s = SetEngramTableGib(c, *flags.engram_gib);
    if (!s.ok()) {
      std::fprintf(stderr, "dsv41 tiny: %s\n", s.message().c_str());
      return 2;
    }
  }

  ProgressPrinter printer;
  Result<TinyCheckpointSummary> summary = WriteTinyCheckpoint(spec, flags.out, printer.AsFn());
  printer.Done();
  if (!summary.ok()) {
    std::fprintf(stderr, "dsv41 tiny: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  std::printf("wrote %s: preset %s%s%s, seed %llu, %d layers, %zu tensors, %.1f MB of tensors\n",
              flags.out.c_str(), flags.preset.c_str(), flags.bf16 ? " (bf16)" : "",
              spec.format == TinySpec::Format::kStrict ? " (strict format)" : "",
              static_cast<unsigned long long>(flags.seed), summary->config.num_hidden_layers,
              summary->num_tensors, static_cast<double>(summary->tensor_bytes) / 1e6);
  return 0;
}

std::function<int()> SetupTiny(CLI::App& sub) {
  auto flags = std::make_shared<TinyFlags>();
  std::string presets;
  for (std::string_view n : TinyPresetNames())
    presets += (presets.empty() ? "" : ", ") + std::string(n);
  sub.add_option("-o,--out", flags->out, "directory to write (created)")->required();
  sub.add_option("--preset", flags->preset, "one of: " + presets);
  sub.add_flag("--bf16", flags->bf16, "unquantised BF16 weights (no .scale tensors)");
  sub.add_option(
         "--format", flags->format,
         "simple, or strict: the released format where the presets simplify (a gain per "
         "32x32 tile, distinct FP4 nibbles, experts in shards apart; tiny-strict's default)")
      ->check(CLI::IsMember({"simple", "strict"}));
  sub.add_option("--scale-dtype", flags->scale_dtype,
                 "dtype of the .scale tensors: e8m0 (F8_E8M0, as released) or u8 (same bytes)")
      ->check(CLI::IsMember({"e8m0", "u8"}));
  sub.add_flag("--released-magnitudes", flags->released_magnitudes,
               "the release's value ranges: FP8 weights within +-0.102, Engram rows within "
               "+-3.25, bell-shaped experts (tiny-real's default)");
  sub.add_option("-s,--seed", flags->seed, "seed of every drawn value");
  sub.add_option("--shards", flags->shards, "number of safetensors shards (1: model.safetensors)");
  sub.add_option("--layers", flags->layers, "num_hidden_layers");
  sub.add_option("--hidden", flags->hidden, "hidden_size");
  sub.add_option("--vocab", flags->vocab, "vocab_size (tokenizer size)");
  sub.add_option("--window", flags->window, "sliding_window");
  sub.add_option("--max-position-embeddings", flags->max_positions,
                 "max_position_embeddings, the context (default 131072 for tiny and small; "
                 "rope_scaling.original_max_position_embeddings follows as N / factor)");
  sub.add_option("--ratios", flags->ratios, "compress_ratios, one per layer")->delimiter(',');
  sub.add_option("--kv-sources", flags->kv_sources, "kv_source_layer_ids")->delimiter(',');
  sub.add_option("--index-sources", flags->index_sources, "index_source_layer_ids")->delimiter(',');
  sub.add_option("--candidate-source", flags->candidate_source,
                 "candidate_source_layer_id (-1: none)");
  sub.add_option("--candidate-blocks", flags->candidate_blocks, "candidate_topk_blocks");
  sub.add_option("--candidate-block-size", flags->candidate_block_size, "candidate_block_size");
  sub.add_option("--index-topk", flags->topk, "index_topk");
  sub.add_option("--experts", flags->experts, "n_routed_experts");
  sub.add_option("--experts-per-tok", flags->experts_per_tok, "num_experts_per_tok");
  sub.add_option("--moe-intermediate", flags->moe_intermediate,
                 "moe_intermediate_size (expert width; a multiple of 32)");
  sub.add_option("--engram-layers", flags->engram_layers, "engram_layer_ids")->delimiter(',');
  sub.add_option("--engram-heads", flags->engram_heads, "engram_n_heads");
  sub.add_option("--engram-max-ngram", flags->engram_ngram, "engram_max_ngram_size");
  sub.add_option("--engram-prime-start", flags->engram_prime_start,
                 "engram_vocab_size: where the prime search starts (sets the table sizes)");
  sub.add_option("--engram-gib", flags->engram_gib,
                 "total size of the Engram tables in GiB (sets engram_vocab_size; flash: 8)");
  sub.add_option("--dspark-stages", flags->dspark_stages, "num_nextn_predict_layers");
  sub.add_option("--vision-layers", flags->vision_layers,
                 "vision_config.num_hidden_layers (0: no vision tower, a text-only checkpoint)");
  sub.add_option("--vision-hidden", flags->vision_hidden, "vision_config.hidden_size");
  sub.add_option("--dspark-targets", flags->dspark_targets, "dspark_target_layer_ids")
      ->delimiter(',');
  return [flags] { return RunTiny(*flags); };
}

DSV41_REGISTER_COMMAND(kTinyCommand, "tiny",
                       "write a synthetic checkpoint in the released layout (FP8/MXFP4 or BF16)",
                       SetupTiny);

}  // namespace
}  // namespace dsv41

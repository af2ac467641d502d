#include "cli/engine_flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

namespace dsv41 {

void AddEngineFlags(CLI::App& app, EngineFlags& flags) {
  app.add_option("--block-size", flags.block_size,
                 "tokens per KV block (a multiple of every compress ratio)")
      ->capture_default_str();
  app.add_option("--kv-cache-gib", flags.kv_cache_gib, "KV cache budget in GiB")
      ->capture_default_str();
  app.add_option("--num-blocks", flags.num_blocks, "KV blocks (overrides --kv-cache-gib; 0: off)")
      ->capture_default_str();
  app.add_option("--kv-profile", flags.kv_profile, "KV row format: seed, compact or packed")
      ->capture_default_str();
  app.add_option("--max-num-seqs", flags.max_num_seqs, "requests per step at most")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", flags.max_num_batched_tokens,
                 "tokens per step at most (longer prompts are prefilled in chunks)")
      ->capture_default_str();
  app.add_option("--max-model-len", flags.max_model_len,
                 "longest request in tokens (0: the model's max_position_embeddings)")
      ->capture_default_str();
  app.add_flag("--no-prefix-caching", flags.no_prefix_caching,
               "recompute every prompt instead of reusing cached prefix blocks");
  app.add_option("-t,--threads", flags.threads, "compute threads (0: all cores)")
      ->capture_default_str();
  app.add_option("--speculative", flags.speculative,
                 "speculative decoding: dspark (the draft network), ngram (prompt lookup) or off")
      ->capture_default_str();
  app.add_option("--num-speculative-tokens", flags.num_speculative_tokens,
                 "drafts a verify step checks (dspark: 1 to the draft block size)")
      ->capture_default_str();
  app.add_option("--speculative-min-acceptance", flags.speculative_min_acceptance,
                 "pause drafting for a request whose recent draft acceptance rate is below this "
                 "(0: never)")
      ->capture_default_str();
  app.add_option("--speculative-confidence", flags.speculative_confidence,
                 "dspark: verify only the drafts before the first whose sigmoid(confidence) is "
                 "below this (0: all)")
      ->capture_default_str();
  app.add_option("--prompt-lookup-min", flags.prompt_lookup_min,
                 "ngram: shortest suffix to look up")
      ->capture_default_str();
  app.add_option("--prompt-lookup-max", flags.prompt_lookup_max, "ngram: longest suffix to look up")
      ->capture_default_str();
}

bool NeedsDspark(const EngineFlags& flags) { return flags.speculative == "dspark"; }

Result<EngineOptions> ToEngineOptions(const EngineFlags& flags) {
  EngineOptions options;
  DSV41_ASSIGN_OR_RETURN(options.profile, ParseKvProfile(flags.kv_profile));
  if (flags.block_size < 1) return InvalidArgumentError("--block-size %d", flags.block_size);
  if (!(flags.kv_cache_gib > 0) || flags.kv_cache_gib > 1 << 20) {
    return InvalidArgumentError("--kv-cache-gib %g must be positive", flags.kv_cache_gib);
  }
  if (flags.threads < 0) return InvalidArgumentError("-t %d must be >= 0", flags.threads);
  options.block_tokens = flags.block_size;
  options.kv_cache_bytes = static_cast<uint64_t>(std::llround(flags.kv_cache_gib * (1 << 30)));
  options.num_blocks = flags.num_blocks;
  options.max_num_seqs = flags.max_num_seqs;
  options.max_num_batched_tokens = flags.max_num_batched_tokens;
  options.max_model_len = flags.max_model_len;
  options.enable_prefix_caching = !flags.no_prefix_caching;
  SpeculativeOptions& spec = options.speculative;
  DSV41_ASSIGN_OR_RETURN(spec.method, ParseSpeculativeMethod(flags.speculative));
  spec.num_speculative_tokens = flags.num_speculative_tokens;
  spec.min_acceptance = flags.speculative_min_acceptance;
  spec.confidence_threshold = flags.speculative_confidence;
  spec.prompt_lookup_min = flags.prompt_lookup_min;
  spec.prompt_lookup_max = flags.prompt_lookup_max;
  return options;
}

int ComputeThreads(const EngineFlags& flags) {
  return flags.threads > 0 ? flags.threads
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void PrintEngineLayout(const Engine& engine, const EngineOptions& options) {
  const EngineLayout& l = engine.layout();
  std::fprintf(stderr,
               "kv cache: block %d tokens, %zu B per block id, %u blocks (%.3f GiB), longest "
               "request %lld tokens, profile %s, prefix caching %s\n",
               l.block_tokens, l.bytes_per_block_id, l.num_blocks,
               static_cast<double>(l.kv_cache_bytes) / (1 << 30),
               static_cast<long long>(l.max_request_tokens),
               std::string(KvProfileName(options.profile)).c_str(),
               options.enable_prefix_caching ? "on" : "off");
  const SpeculativeOptions& spec = options.speculative;
  if (spec.method != SpeculativeMethod::kOff) {
    std::fprintf(stderr, "speculative: %s, %d tokens, min acceptance %g\n",
                 std::string(SpeculativeMethodName(spec.method)).c_str(),
                 spec.num_speculative_tokens, spec.min_acceptance);
  }
}

}  // namespace dsv41

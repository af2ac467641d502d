#pragma once

// The engine flags every engine command shares (`dsv41 run`, `logits`, `bench`, later `serve`),
// named as vllm serve's so users' scripts carry over, and the start-up line that reports the
// resolved cache plan.

#include <cstdint>
#include <string>

#include "base/status.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dsv41 {

struct EngineFlags {
  int32_t block_size = 128;
  double kv_cache_gib = 1.0;
  uint32_t num_blocks = 0;
  std::string kv_profile = "seed";
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;
  bool no_prefix_caching = false;
  int threads = 0;
  std::string numerics = "fast";
  bool official_index_key_slot = false;
  std::string simd;  // empty: DSV41_SIMD, else best
  bool no_prefault = false;
  std::string weight_memory = "auto";
  std::string speculative = "off";
  int32_t num_speculative_tokens = SpeculativeOptions{}.num_speculative_tokens;
  double speculative_min_acceptance = SpeculativeOptions{}.min_acceptance;
  double speculative_confidence = SpeculativeOptions{}.confidence_threshold;
  int32_t prompt_lookup_min = SpeculativeOptions{}.prompt_lookup_min;
  int32_t prompt_lookup_max = SpeculativeOptions{}.prompt_lookup_max;
  std::string engram_storage = "mapped";
  double engram_cache_gib = 1.0;
  int32_t engram_io_threads = 16;
  std::string engram_prefetch = "on";
  bool engram_direct_io = false;
  // Under mpirun (docs/multinode.md): how long a rank waits for another before the job ends.
  double mpi_timeout_s = 300.0;
  // Not a flag: set on ranks other than 0 of a multi-process run, which print nothing but errors.
  bool quiet = false;
};

// Adds --block-size, --kv-cache-gib, --num-blocks, --kv-profile, --max-num-seqs,
// --max-num-batched-tokens, --max-model-len, --no-prefix-caching, -t/--threads, --numerics,
// --simd, --official-index-key-slot, --no-prefault, --weight-memory, the speculative decoding flags
// (--speculative dspark|ngram|off, --num-speculative-tokens, --speculative-min-acceptance,
// --speculative-confidence, --prompt-lookup-min/-max) and the Engram offload flags (serving.md
// §8.7): --engram-storage resident|mapped|disk, --engram-cache-gib, --engram-io-threads,
// --engram-prefetch on|off and --engram-direct-io, and --mpi-timeout.
void AddEngineFlags(CLI::App& app, EngineFlags& flags);
// Only the Engram offload flags (commands that load a model without running the engine).
void AddEngramFlags(CLI::App& app, EngineFlags& flags);

// Whether the flags need the DSpark stages loaded (LoadedTextModel::Load's with_dspark).
bool NeedsDspark(const EngineFlags& flags);

// The options the flags ask for; InvalidArgument naming the flag otherwise. Applies --simd (or
// DSV41_SIMD) and then DSV41_FAST_KERNEL, process-wide (kernels/simd_cap.h, kernels/linear.h).
Result<EngineOptions> ToEngineOptions(const EngineFlags& flags);

// --numerics NAME: fast, reference, fma or bf16-dot (InvalidArgument naming the flag otherwise, and
// for bf16-dot on a CPU without AVX512-BF16).
Result<Numerics> ParseNumerics(const std::string& name);

// Threads for the compute pool: the flag, or every core when it is 0.
int ComputeThreads(const EngineFlags& flags);

// The --weight-memory value: auto, copy or mapped; InvalidArgument naming the flag otherwise.
Result<LoadedTextModel::WeightMemory> ParseWeightMemory(const std::string& name);

// Unless --no-prefault: makes the model's weights resident when they fit, as --weight-memory asks
// (LoadedTextModel::ResideWeights), and says so on stderr — "weights: 5.80 GiB resident, copied
// into huge pages in 1.2 s (23.1 GiB were available)" or why not.
void ResideWeights(LoadedTextModel& model, ThreadPool& pool, const EngineFlags& flags);

// The Engram store options the flags ask for; InvalidArgument naming the flag otherwise.
Result<EngramStoreOptions> ToEngramStoreOptions(const EngineFlags& flags);

// Opens the model's Engram tables in the tier the flags ask for (the resident copy draws its
// progress on stderr) and prints the resolved choice on stderr — "engram: disk tier, 2 tables,
// 8.00 GiB in all, 1.00 GiB resident (hot-row cache), 16 I/O threads, prefetch on". Nothing for a
// model without Engram. Errors name the flag, file or tensor.
Status OpenEngramStorage(LoadedTextModel& model, ThreadPool& pool, const EngineFlags& flags);

// "numerics: bf16-dot weight products (exact products, fp32 accumulation), kernels AVX3" on stderr.
void PrintNumerics(const EngineOptions& options);

// The same lines are left out with flags.quiet (every helper above prints nothing then).
//
// "kv cache: block 128 tokens, 540928 B per block id, 1985 blocks (1.00 GiB), longest request
// 253952 tokens, profile seed, prefix caching on" on stderr, and with speculative decoding on
// "speculative: dspark, 5 tokens, min acceptance 0.3".
void PrintEngineLayout(const Engine& engine, const EngineOptions& options);

}  // namespace dsv41

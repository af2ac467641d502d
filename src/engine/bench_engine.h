#pragma once

// The offline engine benchmark behind `dsv41 bench`. At each concurrency level N it runs N
// independent requests with different synthetic prompts at once (continuous batching through the
// paged cache), in every configuration (an Engram tier and prefetch on or off) with the
// repetitions interleaved (one repetition of each in turn, so drift of a shared machine hits all
// alike), and reports medians over the repetitions: time to first token, prefill and decode
// tokens/s, time per output token, the Engram wait and traffic, and the figures against the
// machine's limits (STYLE.md §12) — the weight bytes the decode steps read (as the forward counts
// them) per second over the read bandwidth, and the prefill's weight-GEMM flops per second over
// the compute roof. With speculative decoding asked for, each repetition also runs it (after the
// plain run, same prompts); with `oracle`, the verify path with drafts that are always right.

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/communicator.h"
#include "base/machine_limits.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"

namespace dsv41 {

// One measured configuration: an Engram tier and prefetch on or off, and the engine options they
// resolve to (speculative decoding as asked; the plain runs turn it off). Every configuration
// asks for the same speculative method.
struct EngineBenchConfig {
  std::string engram_storage;  // the tier's name, a key of RunEngineBench's `storages`
  std::string engram_prefetch;
  EngineOptions options;
};

struct EngineBenchOptions {
  int32_t prompt_tokens = 128;
  int32_t decode_tokens = 32;  // tokens each request generates after its first
  int32_t repetitions = 5;
  std::vector<int32_t> concurrency = {1};  // the levels, in order
  // Before every run: drop the Engram table files from the page cache, empty the hot-row cache.
  bool cold = false;
  bool oracle = false;  // also measure the verify path with drafts that are always right
  std::vector<EngineBenchConfig> configs;
};

enum class EngineBenchRunKind { kPlain, kSpeculative, kOracle };

// One run as it ends (for progress lines).
struct EngineBenchRun {
  EngineBenchRunKind kind = EngineBenchRunKind::kPlain;
  int32_t concurrency = 0;
  size_t config_idx = 0;   // into EngineBenchOptions::configs
  int32_t repetition = 0;  // from 0
  double decode_tokens_per_s = 0;
  double prefill_tokens_per_s = 0;
  double engram_wait_ms_per_step = 0;
  double acceptance_rate = 0;  // of the drafts verified (0 in a plain run)
};

// The runs with drafts (speculative or oracle) of one configuration at one level.
struct SpeculativeFigures {
  double decode_tokens_per_s = 0;  // median
  double speedup = 0;              // over the plain runs' median decode tokens/s
  double acceptance_rate = 0;
  double mean_accepted_length = 0;  // 1 + accepted drafts per verify
  // A verify step's median time over the plain runs' median decode step; 0 when none verified.
  double verify_step_ratio = 0;
  // The same for this run's steps that did not verify (DSpark still seeds its windows).
  double plain_step_ratio = 0;
  size_t verify_steps = 0;
  std::vector<double> acceptance_rate_by_position;
};

// One rank of a multi-process run, at one level: medians over the plain runs (docs/multinode.md).
struct RankBenchFigures {
  int32_t rank = 0;
  double step_ms = 0;  // wall time inside the engine's steps, per run
  // Of that, the time the rank computed: the steps less their waits for the MoE gathers, rank 0's
  // tokens, the forward's Engram rows and (rank 0) sending its step headers.
  double compute_ms = 0;
  double engram_wait_ms = 0;  // the forward waiting for its Engram rows (their gathers included)
  // Time blocked per collective kind (CommKind order: setup, header, engram, moe, tokens); a
  // rank other than 0 counts its wait for rank 0's next command as header time, between steps.
  std::array<double, kNumCommKinds> blocked_ms{};
  double collectives_per_token = 0;  // over the tokens each run computed (prompt + generated)
  double bytes_per_token = 0;        // sent and received, every kind
};

// One configuration at one level: medians over the repetitions (TTFT and TPOT over every request
// of every repetition).
struct EngineBenchFigures {
  int32_t concurrency = 0;
  size_t config_idx = 0;  // into EngineBenchOptions::configs
  double ttft_ms = 0;
  double tpot_ms = 0;
  double prefill_tokens_per_s = 0;
  double decode_tokens_per_s = 0;
  double engram_wait_ms_per_step = 0;         // the forward's wait for rows, all steps
  double engram_decode_wait_ms_per_step = 0;  // the same over the decode steps
  double engram_cache_hit_rate = 0;           // hot-row cache hits / rows fetched (disk tier)
  double engram_read_mib = 0;                 // bytes read from the table files
  double decode_weight_bytes_per_token = 0;
  double decode_weight_bytes_per_s = 0;
  double read_bandwidth_ratio = 0;  // decode weight bytes/s over the machine's read bandwidth
  double prefill_flops_per_s = 0;   // 2 × weight-product MACs until the last first token / time
  double prefill_roof_ratio = 0;    // over the machine's compute roof
  // Σ over the prefill's weight products of max(flops / matrix unit peak, weight bytes / read
  // bandwidth), over the measured prefill time: products with a few rows (experts) are judged by
  // the bus, dense ones by the unit.
  double prefill_roofline_ratio = 0;
  // Decode tokens/s over the same configuration's at concurrency 1, once that level ran.
  std::optional<double> decode_vs_one_stream;
  std::optional<SpeculativeFigures> speculative;  // when the configurations ask for it
  std::optional<SpeculativeFigures> oracle;       // with EngineBenchOptions::oracle
  // Every step's logits folded together (LogitsDigest) over the first plain run: compare it with
  // another run's (one process against several) for a bit-identity check. Stable: every plain
  // repetition and every rank had the same.
  uint64_t logits_digest = 0;
  bool logits_digest_stable = true;
  // Multi-process runs (one entry per rank; empty in one process).
  std::vector<RankBenchFigures> ranks;
  // The busiest rank's routed (token, expert) rows per MoE call over the mean (1: even), median.
  double expert_imbalance = 0;
};

// Called as each run ends, and as each level ends with one figure set per configuration.
struct EngineBenchCallbacks {
  std::function<void(const EngineBenchRun&)> on_run;
  std::function<void(const std::vector<EngineBenchFigures>&)> on_level;
};

// Runs every level of `options` on `model`, on the ranks of `comm` (rank 0 calls this; the others
// run RunEngineFollower). `storages` holds each configuration's Engram tier by name (null for a
// model without Engram), lent to the model for each run and given back; the ratios divide by
// `limits`. Errors of an engine's creation or step, or of dropping the caches.
Status RunEngineBench(LoadedTextModel& model, ThreadPool& pool, Communicator& comm,
                      std::map<std::string, std::unique_ptr<EngramStorage>>& storages,
                      const MachineLimits& limits, const EngineBenchOptions& options,
                      const EngineBenchCallbacks& callbacks);

}  // namespace dsv41

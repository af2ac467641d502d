#pragma once

// The model runner (vLLM V1's GPUModelRunner, for CPUs): builds a step's Batch from the
// scheduler's output (token ids, block tables, Engram row ids, which rows need logits and
// main_hidden), fetches the step's Engram rows ahead of the forward, runs the one forward and owns
// its buffers: the step arena, the logits and main_hidden rows, the paged cache storage. The
// engine core decides what runs; the runner only runs it. Engine thread only.

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "base/exec_context.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/engram_prefetch.h"
#include "engine/loaded_model.h"
#include "engine/scheduler.h"
#include "engram/row_ids.h"
#include "engram/step_rows.h"
#include "kv/cache_plan.h"
#include "kv/kv_layout.h"
#include "model/batch.h"

namespace dsv41 {

// The learned rows of the span delimiters (VisionTower::image_start, ...), hidden_size each.
struct SpanDelimiterRows {
  std::span<const float> start = {};
  std::span<const float> newline = {};
  std::span<const float> end = {};
};

// One request's part of a step, by absolute position: positions [start, start + num_tokens) of
// its history run. Positions from logits_from on, and those before prompt_logits_end, want logits.
struct BatchSlice {
  std::span<const int32_t> token_ids;  // the request's history
  std::span<const int32_t> class_ids;  // its Engram class ids (read only with Engram layers)
  std::span<const uint8_t> dead;       // TokenHistory::dead(), or empty
  int32_t start = 0;
  int32_t num_tokens = 0;
  std::span<const std::vector<uint32_t>> block_tables;
  int64_t logits_from = std::numeric_limits<int64_t>::max();
  int64_t prompt_logits_end = 0;
  bool main_hidden = false;  // every row's DSpark main_hidden
  // Image spans (vision.md §10): the request's images and, per image, its first aligner row
  // (H · W rows of hidden_size floats follow), and the learned delimiter rows. Empty: no images.
  std::span<const RequestImage> images = {};
  std::span<const float* const> image_rows = {};
  SpanDelimiterRows delimiters = {};
};

// Appends `slice` to `batch` after the requests already in it: the one way a Batch is built (the
// runner, the draft dump and the tests). `engram` computes the Engram row ids when it has layers.
void AppendToBatch(const EngramHashConstants& engram, const BatchSlice& slice, Batch& batch);
// Empties `batch`, keeping its capacity.
void ClearBatch(Batch& batch);

struct ModelRunnerOptions {
  int32_t max_num_batched_tokens = 2048;
  Numerics numerics = Numerics::kFast;
  bool official_index_key_slot = false;  // ExecContext::official_index_key_slot
  bool engram_prefetch = true;      // fetch Engram rows ahead (off: each layer waits for its own)
  bool record_main_hidden = false;  // DSpark: the forward records every row's main_hidden
  RooflineRates roofline = {};      // ExecContext::roofline (benchmarks)
};

class ModelRunner {
 public:
  // Allocates the cache storage of `plan` for `num_blocks` block ids once; `model`, `pool` and
  // `comm` (the ranks of a multi-process run: ExecContext::comm) outlive the runner.
  ModelRunner(const LoadedTextModel& model, const CachePlan& plan, uint32_t num_blocks,
              const ModelRunnerOptions& options, ThreadPool& pool,
              Communicator& comm = Communicator::SingleProcess());

  // The step's batch: scheduled request i runs its next num_new_tokens positions; committed[i] is
  // its history length before the drafts it verifies were appended, and the rows from committed
  // − 1 on get logits when the step reaches the history's end (plus every prompt row of a request
  // that asked for prompt logits).
  void BuildBatch(const SchedulerOutput& scheduled, std::span<const int64_t> committed);
  // Runs the forward over the batch, the step's Engram rows (and those of the chunks the
  // prefilling requests run next) fetched ahead. An error is the forward's; with
  // engram_storage_failed() the Engram storage failed (a read error), not the batch.
  Status Run(const SchedulerOutput& scheduled);
  bool engram_storage_failed() const;

  const Batch& batch() const { return batch_; }
  // [batch().logit_rows.size(), vocab] and [batch().main_hidden_rows.size(), MainHiddenWidth].
  std::span<const float> logits() const { return logits_; }
  std::span<const float> main_hidden() const { return main_hidden_; }
  int64_t main_hidden_width() const { return main_hidden_width_; }
  const KvCacheView& cache() const { return storage_->view(); }
  // For the draft network's runs between forwards (same pool, arena and numerics).
  ExecContext& exec_context() { return ctx_; }
  const ExecStats& exec_stats() const { return ctx_.stats; }
  // The prefetcher's counters (zero without Engram layers) into `out`, reusing its buffers.
  void ReadEngramFetchStats(EngramFetchStats& out) const;

  // Image rows (vLLM's encoder cache): each image of a request is encoded once, when a step first
  // reaches its span, and its rows are kept until the request ends. Forget a request's rows.
  void ReleaseImages(uint64_t request_id);
  struct VisionStats {
    uint64_t images_encoded = 0;
    double encode_seconds = 0;
  };
  const VisionStats& vision_stats() const { return vision_stats_; }

 private:
  // The Engram rows of the chunks the prefilling requests of `scheduled` will run next step.
  void BuildEngramLookAhead(const SchedulerOutput& scheduled);
  // Encodes, in one tower call, every image whose span a scheduled slice reaches for the first
  // time (images given as rows are copied), into image_rows_.
  void EncodeImagesOfStep(const SchedulerOutput& scheduled);

  const LoadedTextModel& model_;
  ModelRunnerOptions options_;
  StepArena arena_;  // the forward's scratch, reset every step
  ExecContext ctx_;
  std::unique_ptr<KvCacheStorage> storage_;
  int64_t main_hidden_width_ = 0;
  // Reused every step (capacity kept), so a steady-state step allocates nothing.
  Batch batch_;
  std::vector<float> logits_;
  std::vector<float> main_hidden_;
  std::unique_ptr<EngramPrefetcher> engram_prefetch_;  // null without Engram layers
  SyncEngramStepRows no_engram_;                       // no tables: the rows of no Engram layer
  std::vector<int64_t> engram_ahead_;                  // look-ahead rows
  // Image rows by request id: per image its [H · W, hidden_size] rows (empty until encoded).
  std::map<uint64_t, std::vector<std::vector<float>>> image_rows_;
  StepArena vision_arena_;  // the tower's scratch, apart from the text step's
  VisionStats vision_stats_;
  std::vector<const float*> slice_image_rows_;  // per image of one slice (capacity kept)
};

}  // namespace dsv41

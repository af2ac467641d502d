#pragma once

// The Engram prefetch pipeline (serving.md §8.4): row ids depend only on token ids, so at step
// start the engine hands every scheduled token's rows to the prefetcher, which de-duplicates them
// per Engram layer and fetches them on its own thread, the first Engram layer first, while the
// forward runs the embedding and the layers before it; the forward waits for each layer's rows
// right before that layer's fusion (a per-layer completion). Rows of the next prefill chunk are
// then read into the store's hot-row cache while the step still runs. The fetch buffers are
// persistent and of fixed capacity (max tokens per step × rows per token, per layer); the
// destructor and every StartStep wait for whatever is in flight, so no read ever targets freed
// memory.
//
// With prefetch off (measurement only) the rows are read synchronously when the layer asks: the
// slowdown that prefetching removes.

#include <array>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "base/status.h"
#include "engine/engram_fetch_stats.h"
#include "engram/engram_store.h"
#include "engram/step_rows.h"
#include "model/engram_fusion.h"

namespace dsv41 {

class EngramPrefetcher final : public EngramStepRows {
 public:
  // `tables` in Engram slot order (not owned; they outlive the prefetcher). Steps of up to
  // `max_tokens` tokens with `num_cols` rows per token and layer. With a `comm` of several
  // ranks each rank reads only its rows of each table and gathers the others' rows
  // (EngramLayerRows::Fill); every rank must run the same steps.
  EngramPrefetcher(std::vector<const EngramRowSource*> tables, int32_t num_cols, int32_t max_tokens,
                   bool prefetch, Communicator& comm);
  ~EngramPrefetcher() override;
  EngramPrefetcher(const EngramPrefetcher&) = delete;
  EngramPrefetcher& operator=(const EngramPrefetcher&) = delete;

  // Starts the step: rows [num_tokens, num_tables, num_cols] (Batch::engram_rows). Waits for the
  // previous step's work first, de-duplicates each layer's rows and (prefetch on) submits them.
  // `ahead` [n, num_tables, num_cols]: rows of the next prefill chunks, read into the stores'
  // caches after this step's rows (at most max_tokens tokens' worth are taken).
  void StartStep(std::span<const int64_t> rows, int64_t num_tokens,
                 std::span<const int64_t> ahead = {});
  // The rows of `engram_slot` for this step, once in; the store's error if the fetch failed
  // (then the rows must not be used, and step_failed() is true).
  Result<EngramFetchedRows> WaitForLayer(int32_t engram_slot) override;
  // Waits until this step's own fetches are done (not the look-ahead).
  void FinishStep();
  // Whether a fetch of the current step failed.
  bool step_failed() const;

  bool prefetch() const { return prefetch_; }
  EngramFetchStats stats() const;
  // The same into `out`, reusing its buffers (no allocation once they have grown).
  void ReadStats(EngramFetchStats& out) const;

 private:
  struct Layer {
    Layer(int32_t row_dim, size_t capacity) : rows(row_dim, capacity), ahead(capacity) {}
    EngramLayerRows rows;        // persistent, fixed capacity: max_tokens × num_cols slots
    std::vector<int64_t> ahead;  // look-ahead rows, distinct (same capacity)
    size_t ahead_count = 0;
    bool done = false;
    Status status;
  };

  Status Fetch(size_t slot);
  void WorkerLoop();
  void WaitIdle(std::unique_lock<std::mutex>& lock);

  std::vector<const EngramRowSource*> tables_;
  Communicator& comm_;
  int32_t num_cols_;
  size_t capacity_;  // rows per layer
  bool prefetch_;
  std::vector<Layer> layers_;

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  // the worker waits for a job
  std::condition_variable done_cv_;  // layers and the job completing
  uint64_t submitted_ = 0;           // jobs submitted
  uint64_t finished_ = 0;            // jobs the worker finished (layers and look-ahead)
  bool stop_ = false;
  bool failed_ = false;
  EngramFetchStats stats_;
  std::thread worker_;
};

// The prefetcher over every table of `storage` (in Engram slot order), for steps of up to
// `max_tokens` tokens, on the ranks of `comm`.
std::unique_ptr<EngramPrefetcher> MakeEngramPrefetcher(const EngramStorage& storage,
                                                       int32_t num_cols, int32_t max_tokens,
                                                       bool prefetch, Communicator& comm);

}  // namespace dsv41

#include "engine/engram_prefetch.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "base/check.h"

namespace dsv41 {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

EngramPrefetcher::EngramPrefetcher(std::vector<const EngramRowSource*> tables, int32_t num_cols,
                                   int32_t max_tokens, bool prefetch, Communicator& comm)
    : tables_(std::move(tables)),
      comm_(comm),
      num_cols_(num_cols),
      capacity_(static_cast<size_t>(std::max(max_tokens, 1)) * static_cast<size_t>(num_cols)),
      prefetch_(prefetch) {
  for (const EngramRowSource* table : tables_) layers_.emplace_back(table->row_dim(), capacity_);
  stats_.wait_ms_per_layer.assign(tables_.size(), 0.0);
  if (prefetch_) worker_ = std::thread([this] { WorkerLoop(); });
}

EngramPrefetcher::~EngramPrefetcher() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    WaitIdle(lock);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void EngramPrefetcher::WaitIdle(std::unique_lock<std::mutex>& lock) {
  done_cv_.wait(lock, [this] { return finished_ == submitted_; });
}

void EngramPrefetcher::StartStep(std::span<const int64_t> rows, int64_t num_tokens,
                                 std::span<const int64_t> ahead) {
  std::unique_lock<std::mutex> lock(mutex_);
  WaitIdle(lock);
  const size_t num_tables = tables_.size();
  const size_t cols = static_cast<size_t>(num_cols_);
  DSV41_CHECK(rows.size() == static_cast<size_t>(num_tokens) * num_tables * cols,
              "Engram prefetch: %zu row ids for %lld tokens", rows.size(),
              static_cast<long long>(num_tokens));
  failed_ = false;
  ++stats_.steps;
  const size_t ahead_tokens =
      std::min(ahead.size() / std::max<size_t>(1, num_tables * cols), capacity_ / cols);
  for (size_t slot = 0; slot < num_tables; ++slot) {
    Layer& layer = layers_[slot];
    layer.rows.Dedupe(rows, num_tokens, slot, num_tables, cols);
    stats_.rows_requested += layer.rows.num_slots();
    stats_.rows_deduplicated += layer.rows.num_slots() - layer.rows.unique().size();
    layer.done = false;
    layer.status = OkStatus();
    layer.ahead_count = 0;
    if (prefetch_ && ahead_tokens > 0) {
      std::vector<int64_t>& a = layer.ahead;
      for (size_t t = 0; t < ahead_tokens; ++t) {
        std::copy_n(ahead.data() + (t * num_tables + slot) * cols, cols, a.data() + t * cols);
      }
      const auto a_end = a.begin() + static_cast<std::ptrdiff_t>(ahead_tokens * cols);
      std::sort(a.begin(), a_end);
      layer.ahead_count = static_cast<size_t>(std::unique(a.begin(), a_end) - a.begin());
      stats_.rows_ahead += layer.ahead_count;
    }
  }
  if (prefetch_) {
    ++submitted_;
    lock.unlock();
    work_cv_.notify_one();
  }
}

Status EngramPrefetcher::Fetch(size_t slot) {
  const auto t0 = std::chrono::steady_clock::now();
  const Status status = layers_[slot].rows.Fill(*tables_[slot], comm_);
  const double ms = MsSince(t0);
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bucket = 0;
  while (bucket < kEngramFetchLatencyBucketsMs.size() &&
         ms > kEngramFetchLatencyBucketsMs[bucket]) {
    ++bucket;
  }
  ++stats_.fetch_latency_counts[bucket];
  ++stats_.fetch_latency_count;
  stats_.fetch_latency_sum_ms += ms;
  return status;
}

void EngramPrefetcher::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || submitted_ > seen; });
      if (stop_ && submitted_ == seen) return;
      seen = submitted_;
    }
    // The first Engram layer first: it has the least slack.
    bool ok = true;
    for (size_t slot = 0; slot < layers_.size(); ++slot) {
      Status status = ok ? Fetch(slot) : CancelledError("an earlier Engram layer's fetch failed");
      ok = ok && status.ok();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        layers_[slot].status = std::move(status);
        layers_[slot].done = true;
      }
      done_cv_.notify_all();
    }
    // Then the next prefill chunk's rows, into the hot-row caches.
    for (size_t slot = 0; ok && slot < layers_.size(); ++slot) {
      const Layer& layer = layers_[slot];
      if (layer.ahead_count == 0) continue;
      // This rank's rows only (all of them in one process); they are sorted.
      const IndexRange owned =
          ShardEngramRows(tables_[slot]->num_rows(), RankShard{comm_.rank(), comm_.size()});
      const int64_t* first = layer.ahead.data();
      const int64_t* last = first + layer.ahead_count;
      if (comm_.size() > 1) {
        first = std::lower_bound(first, last, owned.begin);
        last = std::lower_bound(first, last, owned.end);
      }
      // A failed warm-up costs only speed; the step that needs the rows reads them again.
      (void)tables_[slot]->WarmRows(std::span<const int64_t>(first, last));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++finished_;
    }
    done_cv_.notify_all();
  }
}

Result<EngramFetchedRows> EngramPrefetcher::WaitForLayer(int32_t engram_slot) {
  DSV41_CHECK(engram_slot >= 0 && static_cast<size_t>(engram_slot) < layers_.size(),
              "WaitForLayer: slot %d of %zu", engram_slot, layers_.size());
  const size_t slot = static_cast<size_t>(engram_slot);
  Layer& layer = layers_[slot];
  const auto t0 = std::chrono::steady_clock::now();
  Status status;
  if (prefetch_) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return layer.done; });
    status = layer.status;
  } else {
    status = Fetch(slot);  // synchronous, inside the layer: measurement only
    std::lock_guard<std::mutex> lock(mutex_);
    layer.status = status;
    layer.done = true;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.wait_ms_per_layer[slot] += MsSince(t0);
    if (!status.ok() && !failed_) {
      failed_ = true;
      ++stats_.fetch_errors;
    }
  }
  if (!status.ok()) {
    return status.WithPrefix(StrFormat("reading the Engram rows of slot %d", engram_slot));
  }
  return layer.rows.fetched();
}

void EngramPrefetcher::FinishStep() {
  if (!prefetch_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] {
    return std::all_of(layers_.begin(), layers_.end(), [](const Layer& l) { return l.done; });
  });
}

bool EngramPrefetcher::step_failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}

void EngramPrefetcher::ReadStats(EngramFetchStats& out) const {
  std::lock_guard<std::mutex> lock(mutex_);
  out = stats_;
}

EngramFetchStats EngramPrefetcher::stats() const {
  EngramFetchStats s;
  ReadStats(s);
  return s;
}

std::unique_ptr<EngramPrefetcher> MakeEngramPrefetcher(const EngramStorage& storage,
                                                       int32_t num_cols, int32_t max_tokens,
                                                       bool prefetch, Communicator& comm) {
  std::vector<const EngramRowSource*> tables;
  for (int32_t slot = 0; slot < storage.num_tables(); ++slot)
    tables.push_back(&storage.table(slot));
  return std::make_unique<EngramPrefetcher>(std::move(tables), num_cols, max_tokens, prefetch,
                                            comm);
}

}  // namespace dsv41

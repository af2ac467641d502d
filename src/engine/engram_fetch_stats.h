#pragma once

// The Engram prefetcher's counters, as the engine's stats report them (a header of its own so
// that frontends read them without the prefetcher and the model below it).

#include <array>
#include <cstdint>
#include <vector>

namespace dsv41 {

// Bucket upper bounds (ms) of the per-layer fetch latency histogram; a last bucket is +Inf.
inline constexpr std::array<double, 10> kEngramFetchLatencyBucketsMs = {0.1, 0.25, 0.5, 1,   2.5,
                                                                        5,   10,   25,  100, 1000};

// Cumulative since the prefetcher was made.
struct EngramFetchStats {
  uint64_t steps = 0;
  uint64_t rows_requested = 0;     // token × column slots of every Engram layer
  uint64_t rows_deduplicated = 0;  // of those, repeats of a row already in the step (not fetched)
  uint64_t rows_ahead = 0;         // rows of next prefill chunks warmed into the cache
  uint64_t fetch_errors = 0;       // steps whose rows could not be read
  // Per layer fetch latency (submission to completion), histogram over the buckets above.
  std::array<uint64_t, kEngramFetchLatencyBucketsMs.size() + 1> fetch_latency_counts{};
  uint64_t fetch_latency_count = 0;
  double fetch_latency_sum_ms = 0;
  // Time the forward waited for rows, per Engram slot (ms, summed over steps).
  std::vector<double> wait_ms_per_layer;
};

}  // namespace dsv41

#pragma once

// Machine limits measured at run time, for benchmarks that report their figures as a fraction of
// what the machine can do (STYLE.md §12). Not used by the engine itself.

#include <cstdint>

namespace dsv41 {

class ThreadPool;

struct MachineLimits {
  int threads = 1;
  // Streaming read bandwidth from DRAM, all pool threads reading disjoint parts of a buffer much
  // larger than the last-level cache (best of several passes).
  double read_bytes_per_second = 0.0;
  // Peak fp32 multiply-add throughput of the best SIMD target, all pool threads, counting an FMA
  // as 2 flops per lane.
  double fma_flops_per_second = 0.0;
};

struct MachineLimitsOptions {
  // The streamed buffer (allocated, touched and freed): by default 1 GiB, several times the
  // largest last-level cache seen on the target machines (260 MB).
  int64_t read_buffer_bytes = int64_t{1} << 30;
  // Rounds of 16 independent FMA chains per thread and pass (3 passes).
  int64_t fma_iterations = 10'000'000;
};

// Measures both limits with every thread of `pool` (a few hundred ms with the defaults).
MachineLimits MeasureMachineLimits(ThreadPool& pool, const MachineLimitsOptions& options = {});

}  // namespace dsv41

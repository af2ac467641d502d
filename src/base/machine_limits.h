#pragma once

// Machine limits measured at run time, for benchmarks that report their figures as a fraction of
// what the machine can do (STYLE.md §12). Not used by the engine itself.

#include <cstdint>

namespace dsv41 {

class ThreadPool;

struct MachineLimits {
  int threads = 1;
  // Streaming read bandwidth from DRAM, all pool threads reading disjoint parts of a buffer much
  // larger than the last-level cache: the median of several passes (a shared machine's
  // neighbours make the best pass an outlier).
  double read_bytes_per_second = 0.0;
  // Peak fp32 multiply-add throughput of the best SIMD target, all pool threads, counting an FMA
  // as 2 flops per lane (best of 3 passes: a peak).
  double fma_flops_per_second = 0.0;
  // Peak of the bf16 dot product (VDPBF16PS: 2 flops per bf16 pair), all pool threads; 0 where
  // the CPU has none.
  double bf16_dot_flops_per_second = 0.0;

  // The faster of the two arithmetic peaks: the roof a weight GEMM can reach on this machine.
  double compute_roof_flops_per_second() const {
    return fma_flops_per_second > bf16_dot_flops_per_second ? fma_flops_per_second
                                                            : bf16_dot_flops_per_second;
  }
};

struct MachineLimitsOptions {
  // The streamed buffer (allocated, touched and freed): by default 1 GiB, several times the
  // largest last-level cache seen on the target machines (260 MB).
  int64_t read_buffer_bytes = int64_t{1} << 30;
  // Rounds of 16 independent FMA (and bf16 dot) chains per thread and pass (3 passes).
  int64_t fma_iterations = 10'000'000;
  // Passes over the read buffer (their median is reported).
  int read_passes = 7;
};

// Measures both limits with every thread of `pool` (a few hundred ms with the defaults).
MachineLimits MeasureMachineLimits(ThreadPool& pool, const MachineLimitsOptions& options = {});

}  // namespace dsv41

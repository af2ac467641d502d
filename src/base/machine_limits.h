#pragma once

// Machine limits measured at run time, for benchmarks that report their figures as a fraction of
// what the machine can do (STYLE.md §12). Not used by the engine itself.

#include <cstdint>

namespace dsv41 {

class ThreadPool;

// The units a weight product can run on exactly (kernels/linear.h: every weight and activation
// value is exact in bf16 and their products exact in fp32): fp32 FMA, the AVX-512 bf16 dot
// product, the AMX-BF16 tiles. AVX512-FP16 and AMX-INT8 are measured too but cannot hold the
// activations (bf16 values, fq8 codes with power-of-two scales) exactly.
enum class MatrixUnit { kFp32Fma, kAvx512Bf16, kAmxBf16 };
const char* MatrixUnitName(MatrixUnit unit);  // "fp32-fma", "avx512-bf16", "amx-bf16"

struct MachineLimits {
  int threads = 1;
  // Streaming read bandwidth from DRAM, all pool threads reading disjoint parts of a buffer much
  // larger than the last-level cache: the median of several passes (a shared machine's
  // neighbours make the best pass an outlier).
  double read_bytes_per_second = 0.0;
  // Peaks of each unit, all pool threads, best of 3 passes; 0 where the CPU lacks the unit.
  // fp32 multiply-add of the best SIMD target (2 flops per lane).
  double fma_flops_per_second = 0.0;
  // VDPBF16PS (2 flops per bf16 pair).
  double bf16_dot_flops_per_second = 0.0;
  // AVX512-FP16 multiply-add (2 flops per fp16 lane).
  double fp16_fma_flops_per_second = 0.0;
  // AMX TDPBF16PS (2 flops per bf16 pair) and TDPBSSD (2 ops per int8 pair).
  double amx_bf16_flops_per_second = 0.0;
  double amx_int8_ops_per_second = 0.0;

  // The fastest unit a weight product can use exactly (see MatrixUnit), and its peak: the
  // roof a weight GEMM can reach on this machine.
  MatrixUnit matrix_unit() const;
  double compute_roof_flops_per_second() const;
};

struct MachineLimitsOptions {
  // The streamed buffer (allocated, touched and freed): by default 1 GiB, several times the
  // largest last-level cache seen on the target machines (260 MB).
  int64_t read_buffer_bytes = int64_t{1} << 30;
  // Rounds of 16 independent FMA (bf16 dot, fp16 FMA) chains per thread and pass (3 passes); the
  // AMX tiles run a sixteenth of them (each round is 4 tile products of 16 × 16 × 32 pairs).
  int64_t fma_iterations = 10'000'000;
  // Passes over the read buffer (their median is reported).
  int read_passes = 7;
};

// Measures the limits with every thread of `pool` (a few hundred ms with the defaults).
MachineLimits MeasureMachineLimits(ThreadPool& pool, const MachineLimitsOptions& options = {});

}  // namespace dsv41

#include "base/machine_limits.h"

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "gtest/gtest.h"

namespace dsv41 {
namespace {

// Not a timing assertion: only that both measurements ran and produced finite positive rates
// with every pool thread (tiny sizes keep the sanitizer build fast).
TEST(MachineLimitsTest, MeasuresPositiveFiniteRatesWithAllThreads) {
  ThreadPool pool(2);
  const MachineLimits limits = MeasureMachineLimits(
      pool, MachineLimitsOptions{.read_buffer_bytes = 1 << 20, .fma_iterations = 1000});
  EXPECT_EQ(limits.threads, 2);
  EXPECT_GT(limits.read_bytes_per_second, 0.0);
  EXPECT_GT(limits.fma_flops_per_second, 0.0);
  EXPECT_LT(limits.read_bytes_per_second, 1e300);
  EXPECT_LT(limits.fma_flops_per_second, 1e300);
  EXPECT_GE(limits.bf16_dot_flops_per_second, 0.0);
  EXPECT_LT(limits.bf16_dot_flops_per_second, 1e300);
  EXPECT_GE(limits.compute_roof_flops_per_second(), limits.fma_flops_per_second);
  for (const double peak : {limits.fp16_fma_flops_per_second, limits.amx_bf16_flops_per_second,
                            limits.amx_int8_ops_per_second}) {
    EXPECT_GE(peak, 0.0);
    EXPECT_LT(peak, 1e300);
  }
  // A unit is measured exactly where the CPU has it.
  EXPECT_EQ(limits.fp16_fma_flops_per_second > 0, CpuHasAvx512Fp16());
  EXPECT_EQ(limits.amx_bf16_flops_per_second > 0, CpuHasAmxBf16());
  EXPECT_EQ(limits.amx_int8_ops_per_second > 0, CpuHasAmxInt8());
}

// The matrix unit is the fastest of the exact ones, whatever the faster inexact units measure.
TEST(MachineLimitsTest, MatrixUnitIsTheFastestExactUnit) {
  MachineLimits l;
  l.fma_flops_per_second = 100;
  EXPECT_EQ(l.matrix_unit(), MatrixUnit::kFp32Fma);
  l.bf16_dot_flops_per_second = 200;
  l.fp16_fma_flops_per_second = 400;
  l.amx_int8_ops_per_second = 5000;
  EXPECT_EQ(l.matrix_unit(), MatrixUnit::kAvx512Bf16);
  EXPECT_EQ(l.compute_roof_flops_per_second(), 200);
  l.amx_bf16_flops_per_second = 2500;
  EXPECT_EQ(l.matrix_unit(), MatrixUnit::kAmxBf16);
  EXPECT_EQ(l.compute_roof_flops_per_second(), 2500);
  EXPECT_STREQ(MatrixUnitName(l.matrix_unit()), "amx-bf16");
}

}  // namespace
}  // namespace dsv41

#include "base/machine_limits.h"

#include "base/thread_pool.h"
#include "gtest/gtest.h"

namespace dsv41 {
namespace {

// Not a timing assertion: only that both measurements ran and produced finite positive rates
// with every pool thread (tiny sizes keep the sanitizer build fast).
TEST(MachineLimitsTest, MeasuresPositiveFiniteRatesWithAllThreads) {
  ThreadPool pool(2);
  const MachineLimits limits =
      MeasureMachineLimits(pool, MachineLimitsOptions{.read_buffer_bytes = 1 << 20,
                                                      .fma_iterations = 1000});
  EXPECT_EQ(limits.threads, 2);
  EXPECT_GT(limits.read_bytes_per_second, 0.0);
  EXPECT_GT(limits.fma_flops_per_second, 0.0);
  EXPECT_LT(limits.read_bytes_per_second, 1e300);
  EXPECT_LT(limits.fma_flops_per_second, 1e300);
  EXPECT_GE(limits.bf16_dot_flops_per_second, 0.0);
  EXPECT_LT(limits.bf16_dot_flops_per_second, 1e300);
  EXPECT_GE(limits.compute_roof_flops_per_second(), limits.fma_flops_per_second);
}

}  // namespace
}  // namespace dsv41

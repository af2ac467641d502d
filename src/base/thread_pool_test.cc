#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace dsv41 {
namespace {

TEST(ThreadPoolTest, EveryIndexVisitedExactlyOnceForManyShapes) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
      for (int64_t grain : {1, 3, 32}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end, int t) {
          EXPECT_GE(t, 0);
          EXPECT_LT(t, threads);
          if (end < n) {
            EXPECT_EQ(end % grain, 0) << "chunk ends must be multiples of the grain";
          }
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
              << "threads " << threads << " n " << n << " grain " << grain << " index " << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ReusableAcrossManyCalls) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int call = 0; call < 200; ++call) {
    pool.ParallelFor(10, 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) sum += i;
    });
  }
  EXPECT_EQ(sum.load(), 200 * 45);
}

}  // namespace
}  // namespace dsv41

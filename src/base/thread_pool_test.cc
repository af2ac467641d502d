#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>
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

// With no spinning every hand-over goes through the sleeping path (futex wait and wake) on both
// sides: the workers waiting for work and the caller waiting for the last chunk.
TEST(ThreadPoolTest, SleepingHandOverLosesNoWork) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads, std::chrono::microseconds(0));
    int64_t total = 0;
    std::vector<int64_t> per_call(static_cast<size_t>(threads));
    for (int call = 0; call < 2000; ++call) {
      std::fill(per_call.begin(), per_call.end(), 0);
      pool.ParallelFor(threads * 3 + call % 5, 1, [&](int64_t begin, int64_t end, int t) {
        for (int64_t i = begin; i < end; ++i) per_call[static_cast<size_t>(t)] += i + 1;
      });
      for (int64_t v : per_call) total += v;
    }
    int64_t want = 0;
    for (int call = 0; call < 2000; ++call) {
      const int64_t n = threads * 3 + call % 5;
      want += n * (n + 1) / 2;
    }
    EXPECT_EQ(total, want) << threads << " threads";
  }
}

TEST(ThreadPoolTest, ChunksFollowTheDocumentedSplit) {
  ThreadPool pool(3);
  std::vector<std::pair<int64_t, int64_t>> got(3, {-1, -1});
  pool.ParallelFor(10, 1, [&](int64_t begin, int64_t end, int t) {
    got[static_cast<size_t>(t)] = {begin, end};
  });
  // 10 units over 3 threads: 4, 3, 3.
  EXPECT_EQ(got[0], (std::pair<int64_t, int64_t>{0, 4}));
  EXPECT_EQ(got[1], (std::pair<int64_t, int64_t>{4, 7}));
  EXPECT_EQ(got[2], (std::pair<int64_t, int64_t>{7, 10}));
}

}  // namespace
}  // namespace dsv41

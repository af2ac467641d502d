// The FMA kernel is compiled for every Highway target and dispatched once (STYLE.md §7).
#ifndef DSV41_BASE_MACHINE_LIMITS_CC_ONCE
#define DSV41_BASE_MACHINE_LIMITS_CC_ONCE

#include "base/machine_limits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/thread_pool.h"

#endif  // DSV41_BASE_MACHINE_LIMITS_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "base/machine_limits.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// `iters` rounds of 16 independent fp32 FMA chains (enough to cover latency × ports); returns a
// value derived from every lane so the work cannot be removed. Flops = iters · 16 · lanes · 2.
float FmaChains(int64_t iters, float seed) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr int kChains = 16;
  V acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = hn::Set(d, seed + 0.001f * static_cast<float>(c));
  const V mul = hn::Set(d, 0.999999f);  // |acc| stays bounded and normal
  const V add = hn::Set(d, 1e-3f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = hn::MulAdd(acc[c], mul, add);
  }
  V sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = hn::Add(sum, acc[c]);
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

size_t FloatLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(FmaChains);
HWY_EXPORT(FloatLanes);

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sums the 64-bit words of [p, p + n) with four independent chains.
uint64_t ReadWords(const uint64_t* p, int64_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 ^ s1 ^ s2 ^ s3;
}

double MeasureReadBandwidth(ThreadPool& pool, int64_t bytes) {
  const int64_t words = std::max<int64_t>(bytes / 8, 1024);
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[words]);
  // Touch every page in parallel (first-touch placement) with non-constant data.
  pool.ParallelFor(words, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i)
      buffer[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15u;
  });
  std::atomic<uint64_t> sink{0};
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    pool.ParallelFor(words, 4096, [&](int64_t begin, int64_t end, int) {
      sink.fetch_xor(ReadWords(buffer.get() + begin, end - begin), std::memory_order_relaxed);
    });
    const double s = Seconds(t0, Clock::now());
    if (s > 0.0) best = std::max(best, static_cast<double>(words) * 8.0 / s);
  }
  if (sink.load() == 0x1234) buffer[0] = 1;  // keeps the reads observable
  return best;
}

double MeasureFmaThroughput(ThreadPool& pool, int64_t iters) {
  const auto fma = HWY_DYNAMIC_DISPATCH(FmaChains);
  const double lanes = static_cast<double>(HWY_DYNAMIC_DISPATCH(FloatLanes)());
  const int threads = pool.num_threads();
  std::atomic<uint32_t> sink{0};
  double best = 0.0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = Clock::now();
    pool.ParallelFor(threads, 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        float v = fma(iters, 1.0f + static_cast<float>(t));
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        sink.fetch_xor(bits, std::memory_order_relaxed);
      }
    });
    const double s = Seconds(t0, Clock::now());
    const double flops = static_cast<double>(iters) * 16.0 * lanes * 2.0 * threads;
    if (s > 0.0) best = std::max(best, flops / s);
  }
  return best;
}

}  // namespace

MachineLimits MeasureMachineLimits(ThreadPool& pool, const MachineLimitsOptions& options) {
  MachineLimits limits;
  limits.threads = pool.num_threads();
  limits.read_bytes_per_second = MeasureReadBandwidth(pool, options.read_buffer_bytes);
  limits.fma_flops_per_second = MeasureFmaThroughput(pool, options.fma_iterations);
  return limits;
}

}  // namespace dsv41
#endif  // HWY_ONCE

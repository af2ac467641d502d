// The exact sums of model.md §12.8 (kernels/exact_sum.h) on one thread, in cache: the mHC mix
// dots of `small` (4 streams × 1024) and of the released model (4 × 4096), the widths every token
// dots 24 weight rows with in each sublayer. Counters: dots' terms per second and the ratio of
// the fused multiply-adds they take (two per term: the sum and the sum of magnitudes, in double)
// to the core's double FMA peak, measured in the same run (half its fp32 peak).
// Report medians: --benchmark_repetitions=5 --benchmark_report_aggregates_only=true.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "base/machine_limits.h"
#include "base/thread_pool.h"
#include "kernels/exact_sum.h"

namespace dsv41 {
namespace {

double DoubleFmaPerSecondOneCore() {
  static const double peak = [] {
    ThreadPool pool(1);
    MachineLimitsOptions options;
    options.read_buffer_bytes = int64_t{64} << 20;  // only the FMA peak is used
    const MachineLimits limits = MeasureMachineLimits(pool, options);
    std::fprintf(stderr, "one core: peak fp32 FMA %.1f GFLOP/s\n",
                 limits.fma_flops_per_second / 1e9);
    return limits.fma_flops_per_second / 2.0 / 2.0;  // flops → FMAs, fp32 lanes → fp64 lanes
  }();
  return peak;
}

// Values of mixed signs over many binades, as the residual streams and the mix weights hold.
std::vector<float> RandomValues(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 2);
  std::vector<float> v(n);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  return v;
}

// 24 weight rows against one token's streams, as ComputeMixRows runs them.
void BM_ExactDot(benchmark::State& state) {
  const size_t width = static_cast<size_t>(state.range(0));
  constexpr int kMixRows = 24;
  const std::vector<float> weights = RandomValues(kMixRows * width, 1);
  const std::vector<float> streams = RandomValues(width, 2);
  const double peak = DoubleFmaPerSecondOneCore();
  for (auto _ : state) {
    for (int r = 0; r < kMixRows; ++r) {
      benchmark::DoNotOptimize(
          ExactDotSimd(std::span<const float>(weights.data() + r * width, width),
                       std::span<const float>(streams)));
    }
  }
  const double terms = static_cast<double>(state.iterations()) * kMixRows * width;
  state.counters["terms_per_s"] = benchmark::Counter(terms, benchmark::Counter::kIsRate);
  state.counters["fma_frac"] = benchmark::Counter(2.0 * terms / peak, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ExactDot)->Arg(4096)->Arg(16384)->ArgName("width");

// The same 24 dots in groups of four rows sharing each pass over the streams
// (ExactDotsUnalignedSimd), as ComputeMixRows runs them.
void BM_ExactDotsOfFourRows(benchmark::State& state) {
  const size_t width = static_cast<size_t>(state.range(0));
  constexpr int kMixRows = 24;
  constexpr int kRowsPerCall = 4;
  const std::vector<float> weights = RandomValues(kMixRows * width, 1);
  const std::vector<float> streams = RandomValues(width, 2);
  const auto bytes = std::as_bytes(std::span<const float>(weights));
  const double peak = DoubleFmaPerSecondOneCore();
  float dots[kMixRows];
  for (auto _ : state) {
    for (int first = 0; first < kMixRows; first += kRowsPerCall) {
      ExactDotsUnalignedSimd(
          bytes.subspan(first * width * sizeof(float), kRowsPerCall * width * sizeof(float)),
          streams, std::span<float>(dots + first, kRowsPerCall));
    }
    benchmark::DoNotOptimize(dots);
  }
  const double terms = static_cast<double>(state.iterations()) * kMixRows * width;
  state.counters["terms_per_s"] = benchmark::Counter(terms, benchmark::Counter::kIsRate);
  state.counters["fma_frac"] = benchmark::Counter(2.0 * terms / peak, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ExactDotsOfFourRows)->Arg(4096)->Arg(16384)->ArgName("width");

// The 24 dots of each of `tokens` tokens (a prefill's streams), four rows and the tokens sharing
// each pass (ExactDotsOfTokensUnalignedSimd), as ComputeMixRows runs them for token pairs.
void BM_ExactDotsOfTokens(benchmark::State& state) {
  const size_t width = static_cast<size_t>(state.range(0));
  const size_t tokens = static_cast<size_t>(state.range(1));
  constexpr int kMixRows = 24;
  constexpr int kRowsPerCall = 4;
  const std::vector<float> weights = RandomValues(kMixRows * width, 1);
  const std::vector<float> streams = RandomValues(tokens * width, 2);
  const auto bytes = std::as_bytes(std::span<const float>(weights));
  const double peak = DoubleFmaPerSecondOneCore();
  std::vector<float> dots(tokens * kMixRows);
  for (auto _ : state) {
    for (int first = 0; first < kMixRows; first += kRowsPerCall) {
      ExactDotsOfTokensUnalignedSimd(
          bytes.subspan(first * width * sizeof(float), kRowsPerCall * width * sizeof(float)),
          kRowsPerCall, streams, tokens, std::span<float>(dots).subspan(first), kMixRows);
    }
    benchmark::DoNotOptimize(dots.data());
  }
  const double terms = static_cast<double>(state.iterations()) * kMixRows * width * tokens;
  state.counters["terms_per_s"] = benchmark::Counter(terms, benchmark::Counter::kIsRate);
  state.counters["fma_frac"] = benchmark::Counter(2.0 * terms / peak, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ExactDotsOfTokens)->Args({4096, 1})->Args({4096, 2})->ArgNames({"width", "tokens"});

}  // namespace
}  // namespace dsv41

BENCHMARK_MAIN();

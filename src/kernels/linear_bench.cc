// Linear over the stored formats on random bytes: shapes of the `small` preset and of the real
// model, rows = 1 (decode) to 64 (prefill chunks). Counters: weight GB/s and its ratio to the
// read bandwidth measured in the same run (bw_frac), GFLOP/s and its ratio to peak FMA
// (flop_frac). Each benchmark cycles over enough copies of its matrix (≥ 768 MB in all) that the
// weights come from DRAM, not from the 260 MB L3, as they do in a real decode.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "base/machine_limits.h"
#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "numerics/block_quant.h"

namespace dsv41 {
namespace {

ThreadPool& Pool() {
  static ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return pool;
}

const MachineLimits& Limits() {
  static const MachineLimits limits = [] {
    const MachineLimits l = MeasureMachineLimits(Pool());
    std::fprintf(stderr, "machine: %d threads, read %.1f GB/s, peak fp32 FMA %.1f GFLOP/s\n",
                 l.threads, l.read_bytes_per_second / 1e9, l.fma_flops_per_second / 1e9);
    return l;
  }();
  return limits;
}

// Fills with a fast generator; FP8 bytes avoid the NaN codes, scale bytes are realistic.
void FillWeight(WeightFormat format, std::vector<uint8_t>& weight, std::vector<uint8_t>& scale,
                uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < weight.size(); i += 8) {
    uint64_t v = rng();
    if (format == WeightFormat::kFp8Block) v &= 0xF7F7F7F7F7F7F7F7ull;  // clears bit 3: never 0x7F
    if (format == WeightFormat::kBf16) v &= 0xBFFFBFFFBFFFBFFFull;      // finite, moderate
    for (size_t b = 0; b < 8 && i + b < weight.size(); ++b) weight[i + b] = (v >> (8 * b)) & 0xFF;
  }
  for (auto& s : scale) s = static_cast<uint8_t>(118 + rng() % 8);
}

struct Matrices {
  WeightFormat format;
  int64_t out, in;
  std::vector<std::vector<uint8_t>> weights, scales;
  size_t bytes_each = 0;
};

void BM_Linear(benchmark::State& state, WeightFormat format, int64_t out, int64_t in) {
  const int64_t rows = state.range(0);
  const MachineLimits& limits = Limits();
  int64_t weight_bytes = 0, scale_bytes = 0;
  switch (format) {
    case WeightFormat::kBf16:
      weight_bytes = 2 * out * in;
      break;
    case WeightFormat::kF32:
      weight_bytes = 4 * out * in;
      break;
    case WeightFormat::kFp8Block:
      weight_bytes = out * in;
      scale_bytes = NumTiles(out) * NumTiles(in);
      break;
    case WeightFormat::kMxfp4:
      weight_bytes = out * in / 2;
      scale_bytes = out * in / 32;
      break;
  }
  const int64_t bytes = weight_bytes + scale_bytes;
  const int64_t copies = std::max<int64_t>(1, (768LL << 20) / bytes);
  std::vector<std::vector<uint8_t>> weights(copies), scales(copies);
  for (int64_t c = 0; c < copies; ++c) {
    weights[c].resize(weight_bytes);
    scales[c].resize(scale_bytes);
    FillWeight(format, weights[c], scales[c], 1000 + c);
  }
  std::vector<float> x(rows * in);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (auto& v : x) v = value(rng);
  std::vector<float> y(rows * out);
  const LinearOptions options{.quantize_activations = format == WeightFormat::kFp8Block ||
                                                      format == WeightFormat::kMxfp4};
  int64_t c = 0;
  for (auto _ : state) {
    LinearWeight w{format, out, in, std::as_bytes(std::span<const uint8_t>(weights[c])),
                   std::as_bytes(std::span<const uint8_t>(scales[c]))};
    Linear(w, x, rows, y, options, &Pool());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    c = (c + 1) % copies;
  }
  using benchmark::Counter;
  const double flops = 2.0 * static_cast<double>(out) * static_cast<double>(in) * rows;
  state.counters["GB/s"] = Counter(bytes / 1e9, Counter::kIsIterationInvariantRate);
  state.counters["bw_frac"] =
      Counter(bytes / limits.read_bytes_per_second, Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = Counter(flops / 1e9, Counter::kIsIterationInvariantRate);
  state.counters["flop_frac"] =
      Counter(flops / limits.fma_flops_per_second, Counter::kIsIterationInvariantRate);
}

void Rows(benchmark::internal::Benchmark* b) {
  for (const int64_t rows : {1, 4, 16, 64}) b->Arg(rows);
  b->ArgName("rows")->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// The `small` preset (hidden 1024, q_lora 256, 16 heads × 128, experts 512, vocab 16384).
BENCHMARK_CAPTURE(BM_Linear, small_expert_w1_mxfp4, WeightFormat::kMxfp4, 512, 1024)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, small_wq_b_fp8, WeightFormat::kFp8Block, 2048, 256)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, small_head_bf16, WeightFormat::kBf16, 16384, 1024)->Apply(Rows);
// The real model (hidden 5120).
BENCHMARK_CAPTURE(BM_Linear, expert_w1_mxfp4, WeightFormat::kMxfp4, 2304, 5120)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, wq_b_fp8, WeightFormat::kFp8Block, 32768, 1280)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, head_bf16, WeightFormat::kBf16, 129280, 5120)
    ->Arg(1)
    ->ArgName("rows")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Linear, gate_f32, WeightFormat::kF32, 384, 5120)->Apply(Rows);

}  // namespace
}  // namespace dsv41

BENCHMARK_MAIN();

// Linear over the stored formats on random bytes: shapes of the `small` preset and of the real
// model, rows = 1 (decode) to 64 (prefill chunks). Counters: weight GB/s and its ratio to the
// read bandwidth measured in the same run (bw_frac), GFLOP/s and its ratio to peak FMA
// (flop_frac). Each benchmark cycles over enough copies of its matrix (≥ 512 MB in all) that the
// weights come from DRAM, as they do in a real decode (the `_hot` variants keep one copy in cache).
// Report medians: --benchmark_repetitions=5 --benchmark_report_aggregates_only=true.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "base/check.h"
#include "base/exec_context.h"
#include "base/machine_limits.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// All cores, or DSV41_BENCH_THREADS of them.
ThreadPool& Pool() {
  static ThreadPool pool([] {
    const char* env = std::getenv("DSV41_BENCH_THREADS");
    return env != nullptr ? std::max(1, std::atoi(env))
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

StepArena& Arena() {
  static StepArena arena;
  return arena;
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

// Random stored bytes with realistic magnitudes: FP8 codes have uniform signs, mantissas and
// normal exponents (1..15, no NaN code; a quantised checkpoint's subnormal codes are rare, ~3e-5
// of `small`'s), MXFP4 bytes uniform, bf16/f32 values have exponents 2^-15..2^0 (no
// subnormal products, which would measure the CPU's microcode assists instead of the kernel);
// scale bytes 2^-9..2^-2.
void FillWeight(WeightFormat format, std::span<uint8_t> weight, std::span<uint8_t> scale,
                uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto fill = [&](auto transform) {
    for (size_t i = 0; i < weight.size(); i += 8) {
      const uint64_t v = transform(rng());
      for (size_t b = 0; b < 8 && i + b < weight.size(); ++b) weight[i + b] = (v >> (8 * b)) & 0xFF;
    }
  };
  switch (format) {
    case WeightFormat::kFp8Block:
      fill([](uint64_t v) {
        uint64_t codes = 0;
        for (int b = 0; b < 8; ++b) {
          const uint64_t byte = (v >> (8 * b)) & 0xFF;
          const uint64_t exponent = 1 + ((byte >> 3) & 0xF) % 15;
          const uint64_t mantissa = exponent == 15 ? (byte & 7) % 7 : byte & 7;
          codes |= ((byte & 0x80) | exponent << 3 | mantissa) << (8 * b);
        }
        return codes;
      });
      break;
    case WeightFormat::kMxfp4:
      fill([](uint64_t v) { return v; });
      break;
    case WeightFormat::kBf16:  // per 16 bits: sign, exponent 112..127, mantissa
      fill([](uint64_t v) {
        return (v & 0x807F807F807F807Full) | 0x3800380038003800ull | ((v & 0x0780078007800780ull));
      });
      break;
    case WeightFormat::kF32:  // per 32 bits: sign, exponent 112..127, mantissa
      fill([](uint64_t v) {
        return (v & 0x807FFFFF807FFFFFull) | 0x3800000038000000ull | (v & 0x0780000007800000ull);
      });
      break;
  }
  for (auto& s : scale) s = static_cast<uint8_t>(118 + rng() % 8);
}

// The matrices of the running benchmark, kept across its repetitions and row counts: `copies`
// random matrices of one shape, cycled so that (for `dram`) their total exceeds any cache, each
// copy's weights and scales back to back in 2 MiB huge pages where the kernel has them, as the
// engine holds a checkpoint's (--weight-memory copy).
struct Matrices {
  WeightFormat format = WeightFormat::kBf16;
  int64_t out = 0, in = 0;
  bool dram = false;
  int64_t weight_bytes = 0, scale_bytes = 0;
  AnonymousMemory memory;
  std::vector<std::span<uint8_t>> weights, scales;
};

const Matrices& GetMatrices(WeightFormat format, int64_t out, int64_t in, bool dram) {
  static Matrices m;
  if (m.format == format && m.out == out && m.in == in && m.dram == dram && !m.weights.empty()) {
    return m;
  }
  m = Matrices{};
  m.format = format;
  m.out = out;
  m.in = in;
  m.dram = dram;
  switch (format) {
    case WeightFormat::kBf16:
      m.weight_bytes = 2 * out * in;
      break;
    case WeightFormat::kF32:
      m.weight_bytes = 4 * out * in;
      break;
    case WeightFormat::kFp8Block:
      m.weight_bytes = out * in;
      m.scale_bytes = NumTiles(out) * NumTiles(in);
      break;
    case WeightFormat::kMxfp4:
      m.weight_bytes = out * in / 2;
      m.scale_bytes = out * in / 32;
      break;
  }
  const int64_t copies =
      dram ? std::max<int64_t>(1, (512LL << 20) / (m.weight_bytes + m.scale_bytes)) : 1;
  const int64_t copy_bytes = m.weight_bytes + m.scale_bytes;
  Result<AnonymousMemory> memory = AnonymousMemory::Allocate(copies * copy_bytes, "bench weights");
  DSV41_CHECK(memory.ok(), "%s", memory.status().ToString().c_str());
  m.memory = std::move(memory).value();
  const auto bytes = reinterpret_cast<uint8_t*>(m.memory.bytes().data());
  for (int64_t c = 0; c < copies; ++c) {
    m.weights.emplace_back(bytes + c * copy_bytes, m.weight_bytes);
    m.scales.emplace_back(bytes + c * copy_bytes + m.weight_bytes, m.scale_bytes);
    FillWeight(format, m.weights[c], m.scales[c], 1000 + c);
  }
  return m;
}

// Random bf16 inputs in [-1, 1], the same in every benchmark.
std::vector<float> BenchInputs(int64_t n) {
  std::vector<float> x(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (auto& v : x) v = Bf16Round(value(rng));
  return x;
}

// The model's options for products with weights of `format`.
LinearOptions BenchOptions(WeightFormat format) {
  return LinearOptions{
      .quantize_activations = format == WeightFormat::kFp8Block || format == WeightFormat::kMxfp4,
      .bf16_inputs = true};
}

void BM_Linear(benchmark::State& state, WeightFormat format, int64_t out, int64_t in, bool dram,
               Numerics numerics = Numerics::kFast) {
  const int64_t rows = state.range(0);
  const MachineLimits& limits = Limits();
  const Matrices& m = GetMatrices(format, out, in, dram);
  const int64_t bytes = m.weight_bytes + m.scale_bytes;
  const int64_t copies = static_cast<int64_t>(m.weights.size());
  const std::vector<float> x = BenchInputs(rows * in);
  std::vector<float> y(rows * out);
  const LinearOptions options = BenchOptions(format);
  ExecContext ctx{Pool(), Arena(), numerics};
  const LinearWeight probe{format, out, in, {}, {}};
  state.SetLabel(GemmKernelName(SelectGemmKernel(probe, options, numerics)));
  int64_t c = 0;
  for (auto _ : state) {
    const LinearWeight w{format, out, in, std::as_bytes(std::span<const uint8_t>(m.weights[c])),
                         std::as_bytes(std::span<const uint8_t>(m.scales[c]))};
    Linear(w, x, rows, y, options, ctx);
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

// One batch of `num_jobs` products with distinct matrices of one shape and `rows` rows each, in
// one RunLinearJobs call: a decode step's routed experts (at 8 streams, ~42 distinct experts per
// `small` layer, most with one row). Counters as BM_Linear's, over all the jobs' bytes.
void BM_Jobs(benchmark::State& state, WeightFormat format, int64_t out, int64_t in,
             int64_t num_jobs) {
  const int64_t rows = state.range(0);
  const MachineLimits& limits = Limits();
  const Matrices& m = GetMatrices(format, out, in, /*dram=*/true);
  const int64_t bytes = m.weight_bytes + m.scale_bytes;
  const int64_t copies = static_cast<int64_t>(m.weights.size());
  const std::vector<float> x = BenchInputs(rows * in);
  std::vector<float> y(num_jobs * rows * out);
  const LinearOptions options = BenchOptions(format);
  ExecContext ctx{Pool(), Arena(), Numerics::kFast};
  std::vector<LinearWeight> weights(num_jobs);
  std::vector<LinearJob> jobs(num_jobs);
  int64_t c = 0;
  for (auto _ : state) {
    ArenaScope scope(ctx.arena);
    for (int64_t j = 0; j < num_jobs; ++j) {
      weights[j] =
          LinearWeight{format, out, in, std::as_bytes(std::span<const uint8_t>(m.weights[c])),
                       std::as_bytes(std::span<const uint8_t>(m.scales[c]))};
      jobs[j] =
          PrepareLinearJob(weights[j], x, rows,
                           std::span<float>(y).subspan(j * rows * out, rows * out), options, ctx);
      c = (c + 1) % copies;
    }
    RunLinearJobs(jobs, ctx);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  using benchmark::Counter;
  const double all_bytes = static_cast<double>(bytes * num_jobs);
  state.counters["GB/s"] = Counter(all_bytes / 1e9, Counter::kIsIterationInvariantRate);
  state.counters["bw_frac"] =
      Counter(all_bytes / limits.read_bytes_per_second, Counter::kIsIterationInvariantRate);
}

// The same 512 MiB read in two orders, one 64-byte line per step (one word of it read), split over
// the pool by 4 KiB blocks, each line asked for 32 KiB ahead as the register tiles do: `sequential`
// in address order; `across_rows` as a tile of 8 rows of 512 bytes (`small`'s MXFP4 expert rows)
// read across them, a line of each row in turn — what the one-row MXFP4 tiles did before they ran
// row-major. The gap between the two is the hardware prefetcher's: 8 interleaved streams of 8
// lines each are too short for it to follow.
void BM_ReadOrder(benchmark::State& state, bool across_rows) {
  constexpr int64_t kBytes = 512LL << 20, kRowBytes = 512, kRows = 8, kBlock = kRows * kRowBytes;
  const MachineLimits& limits = Limits();
  static const AnonymousMemory memory = [] {
    Result<AnonymousMemory> m = AnonymousMemory::Allocate(kBytes, "read-order buffer");
    DSV41_CHECK(m.ok(), "%s", m.status().ToString().c_str());
    auto* words = reinterpret_cast<uint64_t*>(m->bytes().data());
    for (int64_t i = 0; i < kBytes / 8; ++i)
      words[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15u;
    return std::move(m).value();
  }();
  const auto* base = reinterpret_cast<const uint8_t*>(memory.bytes().data());
  std::vector<uint64_t> sinks(Pool().num_threads());
  for (auto _ : state) {
    Pool().ParallelFor(kBytes / kBlock, 1, [&](int64_t begin, int64_t end, int t) {
      uint64_t sink = 0;
      for (int64_t b = begin; b < end; ++b) {
        const uint8_t* block = base + b * kBlock;
        for (int64_t step = 0; step < kBlock / 64; ++step) {
          const int64_t offset =
              across_rows ? (step % kRows) * kRowBytes + (step / kRows) * 64 : step * 64;
          const uint8_t* line = block + offset;
          __builtin_prefetch(line + 32768, 0, 2);
          uint64_t word;  // one word brings in the line
          std::memcpy(&word, line, 8);
          sink ^= word;
        }
      }
      sinks[t] ^= sink;
    });
    benchmark::DoNotOptimize(sinks.data());
  }
  using benchmark::Counter;
  state.counters["GB/s"] = Counter(kBytes / 1e9, Counter::kIsIterationInvariantRate);
  state.counters["bw_frac"] =
      Counter(kBytes / limits.read_bytes_per_second, Counter::kIsIterationInvariantRate);
}
BENCHMARK_CAPTURE(BM_ReadOrder, sequential, false)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReadOrder, across_rows, true)->UseRealTime()->Unit(benchmark::kMillisecond);

void Rows(benchmark::internal::Benchmark* b) {
  for (const int64_t rows : {1, 2, 3, 4, 8, 16, 64, 256}) b->Arg(rows);
  b->ArgName("rows")->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// The `small` preset (hidden 1024, q_lora 256, 16 heads × 128, experts 512, vocab 16384), from
// DRAM and, for reference, cache-resident (one copy).
BENCHMARK_CAPTURE(BM_Linear, small_expert_w1_mxfp4, WeightFormat::kMxfp4, 512, 1024, true)
    ->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, small_expert_w1_mxfp4_hot, WeightFormat::kMxfp4, 512, 1024, false)
    ->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, small_wq_b_fp8, WeightFormat::kFp8Block, 2048, 256, true)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, small_wq_b_fp8_hot, WeightFormat::kFp8Block, 2048, 256, false)
    ->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, small_head_bf16, WeightFormat::kBf16, 16384, 1024, true)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Jobs, small_42_experts_w1_mxfp4, WeightFormat::kMxfp4, 512, 1024, 42)
    ->Arg(1)
    ->Arg(2)
    ->ArgName("rows")
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
// The real model (hidden 5120): a routed expert, the FP8 query up-projection, the head, the
// router gate.
BENCHMARK_CAPTURE(BM_Linear, expert_w1_mxfp4, WeightFormat::kMxfp4, 2304, 5120, true)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, wq_b_fp8, WeightFormat::kFp8Block, 32768, 1280, true)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, head_bf16, WeightFormat::kBf16, 129280, 5120, true)
    ->Arg(1)
    ->ArgName("rows")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Linear, gate_f32, WeightFormat::kF32, 384, 5120, true)->Apply(Rows);
// Cache-resident slices of real shapes: the kernels' compute speed without DRAM.
BENCHMARK_CAPTURE(BM_Linear, wo_b_slice_fp8_hot, WeightFormat::kFp8Block, 512, 8192, false)
    ->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, expert_slice_mxfp4_hot, WeightFormat::kMxfp4, 256, 5120, false)
    ->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, head_slice_bf16_hot, WeightFormat::kBf16, 256, 5120, false)
    ->Apply(Rows);
// The same real shapes on the fp32-FMA kernel where the bf16 dot product is the default.
BENCHMARK_CAPTURE(BM_Linear, expert_w1_mxfp4_fma, WeightFormat::kMxfp4, 2304, 5120, true,
                  Numerics::kFastFma)
    ->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, wq_b_fp8_fma, WeightFormat::kFp8Block, 32768, 1280, true,
                  Numerics::kFastFma)
    ->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, wo_b_fp8, WeightFormat::kFp8Block, 5120, 8192, true)->Apply(Rows);
BENCHMARK_CAPTURE(BM_Linear, wo_b_fp8_fma, WeightFormat::kFp8Block, 5120, 8192, true,
                  Numerics::kFastFma)
    ->Apply(Rows);

}  // namespace
}  // namespace dsv41

BENCHMARK_MAIN();

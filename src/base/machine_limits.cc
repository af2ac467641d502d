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

#include "base/cpu_features.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start their masked builtins from _mm512_undefined_*() and then warn
// about it where they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

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

// XOR of the 64-bit words of [p, p + n) with four independent vector chains (n a multiple of
// 4 vectors; the rest by scalar reads).
uint64_t ReadWordsSimd(const uint64_t* p, int64_t n) {
  const hn::ScalableTag<uint64_t> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Xor(a0, hn::LoadU(d, p + i));
    a1 = hn::Xor(a1, hn::LoadU(d, p + i + lanes));
    a2 = hn::Xor(a2, hn::LoadU(d, p + i + 2 * lanes));
    a3 = hn::Xor(a3, hn::LoadU(d, p + i + 3 * lanes));
  }
  HWY_ALIGN uint64_t lanes_out[hn::MaxLanes(d)];
  hn::Store(hn::Xor(hn::Xor(a0, a1), hn::Xor(a2, a3)), d, lanes_out);
  uint64_t s = 0;
  for (int64_t l = 0; l < lanes; ++l) s ^= lanes_out[l];
  for (; i < n; ++i) s ^= p[i];
  return s;
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(FmaChains);
HWY_EXPORT(FloatLanes);
HWY_EXPORT(ReadWordsSimd);

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double MeasureReadBandwidth(ThreadPool& pool, int64_t bytes, int passes) {
  const int64_t words = std::max<int64_t>(bytes / 8, 1024);
  // In huge pages where the kernel grants them, as the engine holds its weights (--weight-memory
  // auto) and scratch: the read is judged against a stream of the same pages, and its first touch
  // faults once per 2 MiB instead of ~260 000 times for 1 GiB.
  std::unique_ptr<uint64_t[]> heap;
  Result<AnonymousMemory> mapped =
      AnonymousMemory::Allocate(static_cast<size_t>(words) * 8, "read bandwidth probe");
  if (!mapped.ok()) heap.reset(new uint64_t[words]);
  uint64_t* const buffer =
      mapped.ok() ? reinterpret_cast<uint64_t*>(mapped->bytes().data()) : heap.get();
  // Touch every page in parallel (first-touch placement) with non-constant data.
  pool.ParallelFor(words, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i)
      buffer[i] = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15u;
  });
  const auto read = HWY_DYNAMIC_DISPATCH(ReadWordsSimd);
  std::atomic<uint64_t> sink{0};
  std::vector<double> rates;
  for (int pass = 0; pass < std::max(1, passes); ++pass) {
    const auto t0 = Clock::now();
    pool.ParallelFor(words, 4096, [&](int64_t begin, int64_t end, int) {
      sink.fetch_xor(read(buffer + begin, end - begin), std::memory_order_relaxed);
    });
    const double s = Seconds(t0, Clock::now());
    if (s > 0.0) rates.push_back(static_cast<double>(words) * 8.0 / s);
  }
  if (sink.load() == 0x1234) buffer[0] = 1;  // keeps the reads observable
  return Median(rates);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// `iters` rounds of 16 independent VDPBF16PS chains (32 bf16 pairs each); the value of every lane.
__attribute__((target("avx512f,avx512bf16"))) float Bf16DotChains(int64_t iters, float seed) {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(seed + 0.001f * static_cast<float>(c));
  const __m512i a = _mm512_set1_epi16(0x3F80);  // 1.0
  const __m512i b = _mm512_set1_epi16(0x3A83);  // ~1e-3
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], (__m512bh)a, (__m512bh)b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}
bool HasBf16Dot() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
}

// `iters` rounds of 16 independent AVX512-FP16 multiply-add chains (32 halves each).
__attribute__((target("avx512fp16"))) float Fp16FmaChains(int64_t iters, float seed) {
  constexpr int kChains = 16;
  __m512h acc[kChains];
  for (int c = 0; c < kChains; ++c) {
    acc[c] = _mm512_set1_ph(static_cast<_Float16>(seed + 0.001f * static_cast<float>(c)));
  }
  const __m512h mul = _mm512_set1_ph(static_cast<_Float16>(0.999f));
  const __m512h add = _mm512_set1_ph(static_cast<_Float16>(1e-3f));
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ph(acc[c], mul, add);
  }
  __m512h sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ph(sum, acc[c]);
  return static_cast<float>(_mm512_reduce_add_ph(sum));
}

// `iters` rounds of 4 independent tile products (accumulators tmm0..3, operands tmm4..7), each
// 16 × 16 outputs over 32 bf16 pairs (`int8`: TDPBSSD, 64 int8 pairs); a value of the results.
template <bool kInt8>
__attribute__((target("amx-tile,amx-bf16,amx-int8"))) float AmxChains(int64_t iters, float seed) {
  const AmxTileConfig config;
  _tile_loadconfig(&config);
  alignas(64) uint16_t operand[16 * 32];
  for (uint16_t& v : operand) v = kInt8 ? 0x0101 : 0x3A83;  // int8 1s, or bf16 ~1e-3
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < iters; ++i) {
    if constexpr (kInt8) {
      _tile_dpbssd(0, 4, 6);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbssd(2, 5, 6);
      _tile_dpbssd(3, 5, 7);
    } else {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float out[16 * 16];
  _tile_stored(3, out, 64);
  _tile_release();
  return seed + out[0] + out[255];
}
#else
float Bf16DotChains(int64_t, float) { return 0.0f; }
bool HasBf16Dot() { return false; }
float Fp16FmaChains(int64_t, float) { return 0.0f; }
template <bool kInt8>
float AmxChains(int64_t, float) {
  return 0.0f;
}
#endif

// Best of 3 passes of `chain(iters, seed)` on every thread; flops_per_round: per thread and round.
template <typename Chain>
double MeasurePeak(ThreadPool& pool, int64_t iters, double flops_per_round, const Chain& chain) {
  const int threads = pool.num_threads();
  std::atomic<uint32_t> sink{0};
  double best = 0.0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = Clock::now();
    pool.ParallelFor(threads, 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        float v = chain(iters, 1.0f + static_cast<float>(t));
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        sink.fetch_xor(bits, std::memory_order_relaxed);
      }
    });
    const double s = Seconds(t0, Clock::now());
    const double flops = static_cast<double>(iters) * flops_per_round * threads;
    if (s > 0.0) best = std::max(best, flops / s);
  }
  return best;
}

}  // namespace

MachineLimits MeasureMachineLimits(ThreadPool& pool, const MachineLimitsOptions& options) {
  MachineLimits limits;
  limits.threads = pool.num_threads();
  limits.read_bytes_per_second =
      MeasureReadBandwidth(pool, options.read_buffer_bytes, options.read_passes);
  const double lanes = static_cast<double>(HWY_DYNAMIC_DISPATCH(FloatLanes)());
  limits.fma_flops_per_second = MeasurePeak(pool, options.fma_iterations, 16.0 * lanes * 2.0,
                                            HWY_DYNAMIC_DISPATCH(FmaChains));
  if (HasBf16Dot()) {
    // 16 chains × 32 bf16 pairs × 2 flops per round.
    limits.bf16_dot_flops_per_second =
        MeasurePeak(pool, options.fma_iterations, 16.0 * 32.0 * 2.0, Bf16DotChains);
  }
  if (CpuHasAvx512Fp16()) {
    limits.fp16_fma_flops_per_second =
        MeasurePeak(pool, options.fma_iterations, 16.0 * 32.0 * 2.0, Fp16FmaChains);
  }
  // 4 tile products × 16 × 16 outputs × 32 bf16 (64 int8) pairs × 2 per round.
  const int64_t tile_rounds = std::max<int64_t>(1, options.fma_iterations / 16);
  if (CpuHasAmxBf16()) {
    limits.amx_bf16_flops_per_second =
        MeasurePeak(pool, tile_rounds, 4.0 * 16 * 16 * 32 * 2, AmxChains<false>);
  }
  if (CpuHasAmxInt8()) {
    limits.amx_int8_ops_per_second =
        MeasurePeak(pool, tile_rounds, 4.0 * 16 * 16 * 64 * 2, AmxChains<true>);
  }
  return limits;
}

const char* MatrixUnitName(MatrixUnit unit) {
  switch (unit) {
    case MatrixUnit::kFp32Fma:
      return "fp32-fma";
    case MatrixUnit::kAvx512Bf16:
      return "avx512-bf16";
    case MatrixUnit::kAmxBf16:
      return "amx-bf16";
  }
  return "?";
}

MatrixUnit MachineLimits::matrix_unit() const {
  MatrixUnit best = MatrixUnit::kFp32Fma;
  double peak = fma_flops_per_second;
  if (bf16_dot_flops_per_second > peak) {
    best = MatrixUnit::kAvx512Bf16;
    peak = bf16_dot_flops_per_second;
  }
  if (amx_bf16_flops_per_second > peak) best = MatrixUnit::kAmxBf16;
  return best;
}

double MachineLimits::compute_roof_flops_per_second() const {
  switch (matrix_unit()) {
    case MatrixUnit::kFp32Fma:
      return fma_flops_per_second;
    case MatrixUnit::kAvx512Bf16:
      return bf16_dot_flops_per_second;
    case MatrixUnit::kAmxBf16:
      return amx_bf16_flops_per_second;
  }
  return 0.0;
}

}  // namespace dsv41
#endif  // HWY_ONCE

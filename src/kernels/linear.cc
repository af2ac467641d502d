// Linear: kernel selection, activation preparation, the reference kernel and the threaded call.
// The fast kernels live in linear_fma.cc (Highway) and linear_bf16dot.cc (AVX512-BF16).
#include "kernels/linear.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/linear_internal.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {

using linear_internal::kBlock;

std::span<const uint8_t> AsBytes(std::span<const std::byte> s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Bugs, not input: the model layer builds LinearWeight from validated checkpoint views.
void CheckWeight(const LinearWeight& w) {
  DSV41_CHECK(w.out >= 0 && w.in >= 0, "Linear: out %lld in %lld", static_cast<long long>(w.out),
              static_cast<long long>(w.in));
  const int64_t n = w.out * w.in;
  switch (w.format) {
    case WeightFormat::kBf16:
      DSV41_CHECK(static_cast<int64_t>(w.weight.size()) == 2 * n && w.scale.empty(),
                  "Linear bf16: %zu weight bytes", w.weight.size());
      break;
    case WeightFormat::kF32:
      DSV41_CHECK(static_cast<int64_t>(w.weight.size()) == 4 * n && w.scale.empty(),
                  "Linear f32: %zu weight bytes", w.weight.size());
      break;
    case WeightFormat::kFp8Block:
      DSV41_CHECK(static_cast<int64_t>(w.weight.size()) == n &&
                      static_cast<int64_t>(w.scale.size()) == NumTiles(w.out) * NumTiles(w.in),
                  "Linear fp8: %zu weight bytes, %zu scale bytes", w.weight.size(), w.scale.size());
      break;
    case WeightFormat::kMxfp4:
      DSV41_CHECK(w.in % kMxfp4Block == 0 && static_cast<int64_t>(w.weight.size()) == n / 2 &&
                      static_cast<int64_t>(w.scale.size()) == n / kMxfp4Block,
                  "Linear mxfp4: in %lld, %zu weight bytes, %zu scale bytes",
                  static_cast<long long>(w.in), w.weight.size(), w.scale.size());
      break;
  }
}

void CheckShapes(const LinearWeight& w, std::span<const float> x, int64_t rows,
                 std::span<const float> y) {
  CheckWeight(w);
  DSV41_CHECK(rows >= 0, "Linear: rows %lld", static_cast<long long>(rows));
  DSV41_CHECK(static_cast<int64_t>(x.size()) == rows * w.in, "Linear: x has %zu values, want %lld",
              x.size(), static_cast<long long>(rows * w.in));
  DSV41_CHECK(static_cast<int64_t>(y.size()) == rows * w.out, "Linear: y has %zu values, want %lld",
              y.size(), static_cast<long long>(rows * w.out));
}

// Row o of W, exactly dequantised into out[in].
void DequantizeRowRef(const LinearWeight& w, int64_t o, std::span<float> out) {
  const int64_t in = w.in;
  switch (w.format) {
    case WeightFormat::kBf16:
      for (int64_t i = 0; i < in; ++i) {
        uint16_t bits;
        std::memcpy(&bits, w.weight.data() + 2 * (o * in + i), 2);
        out[i] = F32FromBf16(bits);
      }
      break;
    case WeightFormat::kF32:
      if (in > 0) std::memcpy(out.data(), w.weight.data() + 4 * o * in, 4 * in);
      break;
    case WeightFormat::kFp8Block:
      DequantizeFp8Row(w.out, in, AsBytes(w.weight), AsBytes(w.scale), o, out);
      break;
    case WeightFormat::kMxfp4:
      DequantizeMxfp4Row(w.out, in, AsBytes(w.weight), AsBytes(w.scale), o, out);
      break;
  }
}

// x as the GEMM sees it (model.md §12.3), row r at out[r·stride]: x itself, or its fq8_b32
// quantisation per block of 32 along K. A partial last block (in % 32 != 0, FP8 edge tiles) is
// quantised on its own elements: it is padded with zeros, which change neither its amax nor its
// other codes. out[r·stride + in .. stride) is zero.
void CopyPadded(std::span<const float> x, int64_t rows, int64_t in, int64_t stride, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out + r * stride;
    std::copy(x.begin() + r * in, x.begin() + (r + 1) * in, row);
    std::fill(row + in, row + stride, 0.0f);
  }
}

// The scalar kernels over a prepared (natural order, fp32) input, in index order: kReference sums
// the exact products in double and rounds once (fp32 × fp32 products are exact in double);
// kPlainFp32 rounds every product and every partial sum to fp32.
template <typename Sum>
void ScalarOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                   float* y, int64_t y_stride) {
  std::vector<float> wrow(static_cast<size_t>(w.in));
  for (int64_t o = o_begin; o < o_end; ++o) {
    DequantizeRowRef(w, o, wrow);
    for (int64_t r = 0; r < x.rows; ++r) {
      const float* xr = x.f32 + r * x.stride;
      Sum sum = 0;
      for (int64_t i = 0; i < w.in; ++i) {
        sum += static_cast<Sum>(static_cast<Sum>(wrow[i]) * static_cast<Sum>(xr[i]));
      }
      y[r * y_stride + o] = static_cast<float>(sum);
    }
  }
}

int64_t Stride(const LinearWeight& w, GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kReference:
    case GemmKernel::kPlainFp32:
    case GemmKernel::kFma:
      return linear_internal::FmaStride(w);
    case GemmKernel::kBf16Dot:
      return linear_internal::Bf16DotStride(w);
    case GemmKernel::kAmxBf16:
      return linear_internal::AmxStride(w);
  }
  return 0;
}

constexpr size_t AlignUp64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

bool CpuHasBf16Dot() { return linear_internal::Bf16DotSupported(); }
bool CpuHasBf16DotUnit() { return linear_internal::Bf16DotUnitPresent(); }

namespace {
std::atomic<FastKernel> g_fast_kernel{FastKernel::kAuto};

// Whether the bf16 dot product beats fp32 FMA here: AMD Zen 4 runs VDPBF16PS at twice the FMA
// rate; Intel parts with AVX512-BF16 (which also have AVX512-FP16) run it at the FMA rate.
bool PreferBf16Dot() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool fma_slower = !__builtin_cpu_supports("avx512fp16");
  return fma_slower && CpuHasBf16Dot();
#else
  return false;
#endif
}
}  // namespace

GemmKernel SelectGemmKernel(const LinearWeight& w, const LinearOptions& options,
                            Numerics numerics) {
  if (numerics == Numerics::kReference) return GemmKernel::kReference;
  if (numerics == Numerics::kPlainFp32) return GemmKernel::kPlainFp32;
  const bool dot_eligible =
      w.format != WeightFormat::kF32 && (options.quantize_activations || options.bf16_inputs);
  switch (numerics) {
    case Numerics::kFast:
      switch (g_fast_kernel.load(std::memory_order_relaxed)) {
        case FastKernel::kAuto:
          return dot_eligible && PreferBf16Dot() ? GemmKernel::kBf16Dot : GemmKernel::kFma;
        case FastKernel::kBf16Dot:
          return dot_eligible && CpuHasBf16Dot() ? GemmKernel::kBf16Dot : GemmKernel::kFma;
        case FastKernel::kFma:
          return GemmKernel::kFma;
        case FastKernel::kAmx:
          return dot_eligible ? GemmKernel::kAmxBf16 : GemmKernel::kFma;
      }
      return GemmKernel::kFma;
    case Numerics::kFastBf16Dot:
      return dot_eligible && CpuHasBf16Dot() ? GemmKernel::kBf16Dot : GemmKernel::kFma;
    case Numerics::kFastAmx:
      return dot_eligible ? GemmKernel::kAmxBf16 : GemmKernel::kFma;
    default:
      return GemmKernel::kFma;
  }
}

Result<FastKernel> ParseFastKernel(std::string_view name) {
  if (name == "auto") return FastKernel::kAuto;
  if (name == "fma") return FastKernel::kFma;
  if (name == "bf16-dot") return FastKernel::kBf16Dot;
  if (name == "amx") return FastKernel::kAmx;
  return InvalidArgumentError("fast kernel '%.*s': want auto, fma, bf16-dot or amx",
                              static_cast<int>(name.size()), name.data());
}

const char* FastKernelName(FastKernel choice) {
  switch (choice) {
    case FastKernel::kAuto:
      return "auto";
    case FastKernel::kFma:
      return "fma";
    case FastKernel::kBf16Dot:
      return "bf16-dot";
    case FastKernel::kAmx:
      return "amx";
  }
  return "?";
}

bool CpuHasAmxTiles() { return linear_internal::AmxTilesPresent(); }

Status ApplyFastKernel(FastKernel choice) {
  if (choice == FastKernel::kBf16Dot && !CpuHasBf16DotUnit()) {
    return UnimplementedError("fast kernel bf16-dot: this CPU has no AVX512-BF16");
  }
  // kAmx without the tiles runs their scalar model: slow, for tests of the kernel's logic.
  g_fast_kernel.store(choice);
  return Status();
}

FastKernel CurrentFastKernel() { return g_fast_kernel.load(); }

Status ApplyFastKernelFromEnvironment() {
  const char* value = std::getenv("DSV41_FAST_KERNEL");
  if (value == nullptr || *value == '\0') return Status();
  Result<FastKernel> choice = ParseFastKernel(value);
  Status applied = choice.ok() ? ApplyFastKernel(*choice) : choice.status();
  if (applied.ok()) return applied;
  return Status(applied.code(), "DSV41_FAST_KERNEL: " + applied.message());
}

const char* GemmKernelName(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::kReference:
      return "reference";
    case GemmKernel::kFma:
      return "fp32-fma";
    case GemmKernel::kBf16Dot:
      return "bf16-dot";
    case GemmKernel::kPlainFp32:
      return "plain-fp32";
    case GemmKernel::kAmxBf16:
      return "amx-bf16";
  }
  return "?";
}

size_t LinearInputBytes(const LinearWeight& w, int64_t rows, GemmKernel kernel) {
  const size_t fp32 = AlignUp64(static_cast<size_t>(rows * linear_internal::FmaStride(w)) * 4);
  if (kernel == GemmKernel::kAmxBf16) {
    const int64_t stride = linear_internal::AmxStride(w);
    return AlignUp64(static_cast<size_t>(rows * stride) * 4) +
           AlignUp64(linear_internal::AmxBlockWords(rows, stride) * 2);
  }
  if (kernel != GemmKernel::kBf16Dot) return fp32;
  // The quantised fp32 rows (padded to the dot stride), then their bf16 form.
  const int64_t stride = linear_internal::Bf16DotStride(w);
  return AlignUp64(static_cast<size_t>(rows * stride) * 4) +
         AlignUp64(static_cast<size_t>(rows * stride) * 2);
}

LinearInput PrepareLinearInput(const LinearWeight& w, std::span<const float> x, int64_t rows,
                               const LinearOptions& options, GemmKernel kernel,
                               std::span<std::byte> storage) {
  CheckWeight(w);
  DSV41_CHECK(static_cast<int64_t>(x.size()) == rows * w.in, "Linear: x has %zu values, want %lld",
              x.size(), static_cast<long long>(rows * w.in));
  DSV41_CHECK(storage.size() >= LinearInputBytes(w, rows, kernel) &&
                  reinterpret_cast<uintptr_t>(storage.data()) % 64 == 0,
              "Linear: %zu bytes of input storage, want %zu aligned", storage.size(),
              LinearInputBytes(w, rows, kernel));
  LinearInput input;
  input.kernel = kernel;
  input.format = w.format;
  input.rows = rows;
  input.in = w.in;
  const int64_t stride = Stride(w, kernel);
  input.stride = stride;
  auto* f32 = reinterpret_cast<float*>(storage.data());
  CopyPadded(x, rows, w.in, stride, f32);
#ifndef NDEBUG
  if (options.bf16_inputs) {
    for (const float v : x) {
      DSV41_CHECK(Bf16Round(v) == v || v != v, "Linear: input %a is not a bf16 value",
                  static_cast<double>(v));
    }
  }
#endif
  if (options.quantize_activations && w.in > 0) {
    if (kernel == GemmKernel::kReference || kernel == GemmKernel::kPlainFp32) {
      // The codec path, as LinearRef.
      std::vector<uint8_t> codes(static_cast<size_t>(NumTiles(w.in) * kBlock));
      std::vector<float> scales(codes.size() / kBlock);
      for (int64_t r = 0; r < rows; ++r) {
        const std::span<float> row(f32 + r * stride, static_cast<size_t>(NumTiles(w.in) * kBlock));
        QuantizeActivationFq8B32(row, codes, scales);
        DequantizeActivationFq8B32(codes, scales, row);
      }
    } else {
      linear_internal::QuantizeActivations(f32, rows, stride);
    }
  }
  switch (kernel) {
    case GemmKernel::kReference:
    case GemmKernel::kPlainFp32:
      input.f32 = f32;
      break;
    case GemmKernel::kFma:
      if (w.format == WeightFormat::kMxfp4) linear_internal::FmaReorderMxfp4(f32, rows, stride);
      input.f32 = f32;
      break;
    case GemmKernel::kBf16Dot: {
      auto* bf16 = reinterpret_cast<uint16_t*>(storage.data() +
                                               AlignUp64(static_cast<size_t>(rows * stride) * 4));
      linear_internal::Bf16DotPrepare(w.format, f32, rows, stride, stride, bf16);
      input.bf16 = bf16;
      if (w.format != WeightFormat::kBf16) {  // bf16 weights have no scales to move
        linear_internal::Bf16ExponentRange(bf16, rows * stride, &input.bf16_exp_low,
                                           &input.bf16_exp_high);
      }
      break;
    }
    case GemmKernel::kAmxBf16: {
      auto* blocks = reinterpret_cast<uint16_t*>(storage.data() +
                                                 AlignUp64(static_cast<size_t>(rows * stride) * 4));
      linear_internal::AmxPrepare(f32, rows, stride, blocks);
      input.f32 = f32;
      input.bf16 = blocks;
      break;
    }
  }
  return input;
}

NextWeights WeightRows(const LinearWeight& w, int64_t o_begin, int64_t o_end) {
  const size_t row_bytes = w.out == 0 ? 0 : w.weight.size() / static_cast<size_t>(w.out);
  return {w.weight.data() + static_cast<size_t>(o_begin) * row_bytes,
          w.weight.data() + static_cast<size_t>(o_end) * row_bytes};
}

void LinearOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                   float* y, int64_t y_stride, NextWeights next) {
  DSV41_DCHECK(o_begin >= 0 && o_begin <= o_end && o_end <= w.out, "outputs [%lld, %lld) of %lld",
               static_cast<long long>(o_begin), static_cast<long long>(o_end),
               static_cast<long long>(w.out));
  if (o_begin >= o_end || x.rows == 0) return;
  switch (x.kernel) {
    case GemmKernel::kReference:
      ScalarOutputs<double>(w, x, o_begin, o_end, y, y_stride);
      break;
    case GemmKernel::kPlainFp32:
      ScalarOutputs<float>(w, x, o_begin, o_end, y, y_stride);
      break;
    case GemmKernel::kFma:
      linear_internal::FmaOutputs(w, x, o_begin, o_end, y, y_stride);
      break;
    case GemmKernel::kBf16Dot:
      linear_internal::Bf16DotOutputs(w, x, o_begin, o_end, y, y_stride, next);
      break;
    case GemmKernel::kAmxBf16:
      linear_internal::AmxOutputs(w, x, o_begin, o_end, y, y_stride);
      break;
  }
}

namespace {
// A run of work units [front, back) in one atomic word: its owner takes units from the front,
// other threads from the back, and no unit is taken twice.
struct alignas(64) UnitRange {
  uint64_t word;  // arena memory, accessed through atomic_ref only
  std::atomic_ref<uint64_t> packed() { return std::atomic_ref<uint64_t>(word); }
  static uint64_t Pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(back);
  }
  void Set(int64_t front, int64_t back) {
    packed().store(Pack(front, back), std::memory_order_relaxed);
  }
  int64_t Front() { return static_cast<int64_t>(packed().load(std::memory_order_relaxed) >> 32); }
  bool Empty() {
    const uint64_t v = packed().load(std::memory_order_relaxed);
    return (v >> 32) >= (v & 0xFFFFFFFFu);
  }
  // The unit taken from the front (by the owner) or from the back, or -1 when none is left.
  int64_t Take(bool from_front) {
    uint64_t v = packed().load(std::memory_order_relaxed);
    while (true) {
      const int64_t front = static_cast<int64_t>(v >> 32),
                    back = static_cast<int64_t>(v & 0xFFFFFFFFu);
      if (front >= back) return -1;
      const uint64_t next = from_front ? Pack(front + 1, back) : Pack(front, back - 1);
      if (packed().compare_exchange_weak(v, next, std::memory_order_relaxed)) {
        return from_front ? front : back - 1;
      }
    }
  }
};

int64_t NumOutputTiles(const LinearJob& job) {
  return (job.w->out + kLinearOutputTile - 1) / kLinearOutputTile;
}
double TileCost(const LinearJob& job) {
  return static_cast<double>(job.w->in + 32) * static_cast<double>(job.x.rows + 8);
}
}  // namespace

void RunLinearJobs(std::span<const LinearJob> jobs, ExecContext& ctx) {
  const RooflineRates& roofline = ctx.roofline;
  for (const LinearJob& job : jobs) {
    const uint64_t bytes = job.w->weight.size() + job.w->scale.size();
    const uint64_t macs = static_cast<uint64_t>(job.w->out) * static_cast<uint64_t>(job.w->in) *
                          static_cast<uint64_t>(job.x.rows);
    ctx.stats.weight_bytes += bytes;
    ctx.stats.weight_macs += macs;
    if (roofline.peak_flops_per_second > 0 && roofline.read_bytes_per_second > 0) {
      ctx.stats.roofline_seconds +=
          std::max(2.0 * static_cast<double>(macs) / roofline.peak_flops_per_second,
                   static_cast<double>(bytes) / roofline.read_bytes_per_second);
    }
  }
  ThreadPool& pool = ctx.pool;
  double total = 0.0;
  for (const LinearJob& job : jobs)
    total += TileCost(job) * static_cast<double>(NumOutputTiles(job));
  if (total == 0.0) return;
  const int threads = pool.num_threads();
  if (threads == 1) {
    for (const LinearJob& job : jobs) {
      LinearOutputs(*job.w, job.x, 0, job.w->out, job.y, job.y_stride);
    }
    return;
  }
  // Work units: runs of one job's tiles of about total / (threads · kUnitsPerThread) cost each.
  // Thread t owns the units whose cost midpoint lies in [t, t + 1) · total / threads and runs them
  // front to back (one weight stream); a thread done with its own takes the others' from their
  // back, so a thread that starts late or runs slower is helped and all finish within about one
  // unit of each other. Units never split an output, so who runs one never changes a bit.
  constexpr int kUnitsPerThread = 16;
  const double unit_cost = total / (threads * kUnitsPerThread);
  ArenaScope scope(ctx.arena);
  // first_unit[j]: job j's first unit; tiles_per_unit[j]: its tiles per unit.
  std::span<int64_t> first_unit = ctx.arena.Alloc<int64_t>(jobs.size() + 1);
  std::span<int64_t> tiles_per_unit = ctx.arena.Alloc<int64_t>(jobs.size());
  std::span<UnitRange> owned = ctx.arena.Alloc<UnitRange>(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) owned[t].Set(0, 0);
  first_unit[0] = 0;
  double before = 0.0;  // cost of the units so far
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int64_t tiles = NumOutputTiles(jobs[j]);
    const double cost = TileCost(jobs[j]);
    tiles_per_unit[j] = std::clamp<int64_t>(std::llround(unit_cost / std::max(cost, 1.0)), 1,
                                            std::max<int64_t>(tiles, 1));
    first_unit[j + 1] = first_unit[j] + (tiles + tiles_per_unit[j] - 1) / tiles_per_unit[j];
    for (int64_t u = first_unit[j]; u < first_unit[j + 1]; ++u) {
      const int64_t unit_tiles =
          std::min(tiles_per_unit[j], tiles - (u - first_unit[j]) * tiles_per_unit[j]);
      const double mid = before + 0.5 * static_cast<double>(unit_tiles) * cost;
      const int owner = std::min(threads - 1, static_cast<int>(mid * threads / total));
      // Owners are non-decreasing in u: each thread's units are one run.
      if (owned[owner].Empty()) owned[owner].Set(u, u);
      owned[owner].Set(owned[owner].Front(), u + 1);
      before += static_cast<double>(unit_tiles) * cost;
    }
  }
  const auto job_of = [&](int64_t u) {
    return static_cast<size_t>(std::upper_bound(first_unit.begin(), first_unit.end(), u) -
                               first_unit.begin() - 1);
  };
  const auto outputs_of = [&](int64_t u, int64_t* o_begin, int64_t* o_end) {
    const size_t j = job_of(u);
    const int64_t first_tile = (u - first_unit[j]) * tiles_per_unit[j];
    *o_begin = first_tile * kLinearOutputTile;
    *o_end = std::min((first_tile + tiles_per_unit[j]) * kLinearOutputTile, jobs[j].w->out);
  };
  // `next`: the unit this thread most likely runs after u (its weights are prefetched on from
  // u's), or -1.
  const auto run_unit = [&](int64_t u, int64_t next) {
    const LinearJob& job = jobs[job_of(u)];
    int64_t o_begin, o_end;
    outputs_of(u, &o_begin, &o_end);
    NextWeights next_weights;
    if (next >= 0) {
      int64_t n_begin, n_end;
      outputs_of(next, &n_begin, &n_end);
      next_weights = WeightRows(*jobs[job_of(next)].w, n_begin, n_end);
    }
    LinearOutputs(*job.w, job.x, o_begin, o_end, job.y, job.y_stride, next_weights);
  };
  const auto run = [&](int64_t begin, int64_t end, int /*thread_idx*/) {
    for (int64_t t = begin; t < end; ++t) {
      // Own units front to back, then the others' from their backs.
      for (int64_t u; (u = owned[t].Take(/*from_front=*/true)) >= 0;) {
        run_unit(u, owned[t].Empty() ? -1 : u + 1);
      }
      for (int step = 1; step < threads; ++step) {
        UnitRange& other = owned[(t + step) % threads];
        for (int64_t u; (u = other.Take(/*from_front=*/false)) >= 0;) {
          run_unit(u, other.Empty() ? -1 : u - 1);
        }
      }
    }
  };
  pool.ParallelFor(threads, 1, run);
}

void Linear(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
            const LinearOptions& options, ExecContext& ctx) {
  if (rows == 0 || w.out == 0) {
    CheckShapes(w, x, rows, y);
    return;
  }
  ArenaScope scope(ctx.arena);
  const LinearJob job = PrepareLinearJob(w, x, rows, y, options, ctx);
  RunLinearJobs(std::span<const LinearJob>(&job, 1), ctx);
}

LinearJob PrepareLinearJob(const LinearWeight& w, std::span<const float> x, int64_t rows,
                           std::span<float> y, const LinearOptions& options, ExecContext& ctx) {
  CheckShapes(w, x, rows, y);
  const GemmKernel kernel = SelectGemmKernel(w, options, ctx.numerics);
  const std::span<std::byte> storage =
      ctx.arena.Alloc<std::byte>(LinearInputBytes(w, rows, kernel));
  return LinearJob{&w, PrepareLinearInput(w, x, rows, options, kernel, storage), y.data(), w.out};
}

void LinearRef(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
               const LinearOptions& options) {
  CheckShapes(w, x, rows, y);
  if (rows == 0 || w.out == 0) return;
  std::vector<std::byte> storage(LinearInputBytes(w, rows, GemmKernel::kReference) + 64);
  const auto base = reinterpret_cast<uintptr_t>(storage.data());
  const size_t skip = (64 - base % 64) % 64;
  const LinearInput input =
      PrepareLinearInput(w, x, rows, options, GemmKernel::kReference,
                         std::span<std::byte>(storage).subspan(skip, storage.size() - skip));
  ScalarOutputs<double>(w, input, 0, w.out, y.data(), w.out);
}

}  // namespace dsv41

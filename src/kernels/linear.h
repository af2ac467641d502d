#pragma once

// The weight GEMM over stored formats (model.md §12.3, §12.4, §12.8 item 1): y = W · x for a
// [out, in] weight kept in its checkpoint format and `rows` fp32 input rows.
//
// Three kernels compute it:
//   kReference  the scalar loop: exact products accumulated in double, rounded once (LinearRef);
//   kFma        Highway, every target: weights decoded exactly to fp32, fp32 FMA accumulation;
//   kBf16Dot    x86 with AVX512-BF16: weights decoded exactly to bf16, pairs of exact products
//               accumulated in fp32 by the bf16 dot-product instruction (VDPBF16PS);
//   kPlainFp32  the scalar loop summing the exact products in fp32 in index order: the noise
//               probe of Numerics::kPlainFp32, slow;
//   kAmxBf16    weights decoded exactly to bf16 tiles, TDPBF16PS on the AMX tiles (or a scalar
//               model of it where the CPU has none: tests), fp32 runs of 512 K into fp64 sums.
// Every e4m3, e2m1 and bf16 weight value and every fq8_b32-quantised activation is exact in bf16,
// and their products are exact in fp32, so the fast kernels differ from the exact sum only by
// their fp32 accumulation order — the freedom §12.8 item 1 allows. That order is fixed per kernel
// and CPU target: each (output, input row) pair is one register chain over K in storage order,
// reduced by one fixed lane tree, whatever the number of rows, the tiling or the thread split.
// So a row's result never depends on the batch it is in, the chunking or the thread count.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/exec_context.h"
#include "base/status.h"

namespace dsv41 {

// How a [out, in] weight matrix is stored (checkpoint.md §4, model.md §12.4). Bytes are the
// checkpoint's own, memory-mapped and possibly unaligned: kernels load them unaligned and
// dequantise tiles on the fly; nothing is expanded to fp32 in memory.
enum class WeightFormat {
  kBf16,      // weight: bf16 [out, in]
  kF32,       // weight: fp32 [out, in]
  kFp8Block,  // weight: e4m3 [out, in]; scale: ue8m0 [ceil(out/32), ceil(in/32)] (32×32 tiles)
  kMxfp4,     // weight: e2m1 pairs [out, in/2] (element 2k low nibble); scale: ue8m0 [out, in/32]
};

// A non-owning view of one stored linear weight.
struct LinearWeight {
  WeightFormat format = WeightFormat::kBf16;
  int64_t out = 0;
  int64_t in = 0;
  std::span<const std::byte> weight;
  std::span<const std::byte> scale;  // empty for kBf16 / kF32
};

struct LinearOptions {
  // model.md §12.3: before FP8/FP4 GEMMs the reference quantises each input row with fq8_b32
  // (e4m3, power-of-two scale per 32 along K). The model layer sets this from the weight's format.
  bool quantize_activations = false;
  // The caller promises that x holds bf16 values (RMSNorm outputs, rounded projections, ...),
  // so products with it are exact in fp32 and the bf16 dot product may compute them. Implied by
  // quantize_activations. Checked in debug builds.
  bool bf16_inputs = false;
};

enum class GemmKernel : uint8_t { kReference, kFma, kBf16Dot, kPlainFp32, kAmxBf16 };

// The kernel `numerics` selects for products with `w` under `options` on this CPU: kReference
// for Numerics::kReference; kBf16Dot where the CPU has AVX512-BF16 (and, for kFast, where it is
// the faster unit: without AVX512-FP16, i.e. AMD Zen 4) and the inputs are bf16 values (not for
// fp32 weights); kFma otherwise.
GemmKernel SelectGemmKernel(const LinearWeight& w, const LinearOptions& options, Numerics numerics);
// Whether this CPU can run kBf16Dot now (it has the unit and no SIMD cap stops it:
// kernels/simd_cap.h).
bool CpuHasBf16Dot();
// Whether this CPU has the unit at all, whatever the cap.
bool CpuHasBf16DotUnit();
// Whether this CPU runs kAmxBf16 on AMX tiles (elsewhere it runs a scalar model of them).
bool CpuHasAmxTiles();

// What Numerics::kFast selects where both fast kernels apply: the faster one on this CPU (kAuto),
// or one forced process-wide, so that a whole test suite runs under each legal kernel whatever
// the CPU would pick (DSV41_FAST_KERNEL=fma|bf16-dot|amx; CI does this for the model suites).
// kAuto does not pick the AMX kernel yet: it is forced (and measured) until the tile path has
// been checked against its model on AMX hardware.
enum class FastKernel : uint8_t { kAuto, kFma, kBf16Dot, kAmx };
// "auto", "fma" or "bf16-dot"; InvalidArgument naming the value otherwise.
Result<FastKernel> ParseFastKernel(std::string_view name);
const char* FastKernelName(FastKernel choice);
// Applies `choice` process-wide, before or between kernel calls (not while kernels run). A SIMD
// cap narrows it as it narrows everything: under a cap kBf16Dot selects kFma. kBf16Dot on a CPU
// without AVX512-BF16: Unimplemented. kAmx on a CPU without AMX tiles runs their scalar model.
Status ApplyFastKernel(FastKernel choice);
FastKernel CurrentFastKernel();
// Applies DSV41_FAST_KERNEL when it is set; an error naming the variable for a bad value.
Status ApplyFastKernelFromEnvironment();
const char* GemmKernelName(GemmKernel kernel);

// ---- The two-step API: prepare the activations once, then compute any output range ------------

// Activations prepared for one kernel, weight format and K (quantised, reordered and converted to
// the kernel's element type), in memory the caller owns. Immutable once prepared: any thread may
// compute outputs from it.
struct LinearInput {
  GemmKernel kernel = GemmKernel::kFma;
  WeightFormat format = WeightFormat::kBf16;
  int64_t rows = 0;
  int64_t in = 0;
  int64_t stride = 0;              // elements per prepared row
  const float* f32 = nullptr;      // kReference, kPlainFp32, kFma: [rows, stride]
  const uint16_t* bf16 = nullptr;  // kBf16Dot: [rows, stride] bf16 bits in the kernel's order;
                                   // kAmxBf16: the tile blocks (linear_internal.h)
  // kBf16Dot: the least and the greatest exponent field of the rows' non-zero values (256 and 0
  // when all are zero), where the kernel may move scales between weights and inputs exactly; the
  // defaults, 0 and 255, say nothing and move none.
  int bf16_exp_low = 0, bf16_exp_high = 255;
};

// Bytes of storage PrepareLinearInput needs (64-byte aligned storage).
size_t LinearInputBytes(const LinearWeight& w, int64_t rows, GemmKernel kernel);
// Prepares `rows` rows of x [rows, w.in] for products with weights shaped and stored like `w`.
// storage: LinearInputBytes(...) bytes, 64-byte aligned, alive as long as the result is used.
LinearInput PrepareLinearInput(const LinearWeight& w, std::span<const float> x, int64_t rows,
                               const LinearOptions& options, GemmKernel kernel,
                               std::span<std::byte> storage);
// y[r · y_stride + o] = Σ_i W[o, i] · x'[r, i] for o in [o_begin, o_end) and every prepared row:
// pure, no allocation, safe from any thread (disjoint ranges write disjoint outputs). Ranges that
// start at a multiple of kLinearOutputTile keep the blocked register tiles whole.
// next: the weight bytes the calling thread reads after these outputs (the few-row kernels'
// prefetch runs on into them near this range's end instead of stopping at it); empty: unknown.
struct NextWeights {
  const std::byte* begin = nullptr;
  const std::byte* end = nullptr;
};
void LinearOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                   float* y, int64_t y_stride, NextWeights next = {});
inline constexpr int64_t kLinearOutputTile = 32;
// The bytes of outputs [o_begin, o_end)'s weight rows (every format stores whole rows).
NextWeights WeightRows(const LinearWeight& w, int64_t o_begin, int64_t o_end);

// One product of a batch of products: the outputs of `w` for the prepared rows `x`, written to
// y[r · y_stride + o].
struct LinearJob {
  const LinearWeight* w = nullptr;
  LinearInput x;
  float* y = nullptr;
  int64_t y_stride = 0;
};

// Runs every job in one ParallelFor over `pool`: the jobs' 32-output tiles, in order, are cut into
// units of about equal estimated cost (in × (rows + 8) per tile: the weight stream plus the
// products), which the threads claim in order as they become free. Each output is computed whole
// by one thread, so the split never changes a bit. Jobs must write disjoint outputs.
// Counts the jobs' weight bytes and multiply-adds into ctx.stats.
void RunLinearJobs(std::span<const LinearJob> jobs, ExecContext& ctx);

// ---- One call ---------------------------------------------------------------------------------

// y = W · x' for x: [rows, in], y: [rows, out], with x' = x or its fq8_b32 quantisation, on the
// kernel ctx.numerics selects; outputs are fp32 (callers round to bf16 where §12.4 says so). The
// prepared activations come from ctx.arena, the output range is split over ctx.pool.
void Linear(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
            const LinearOptions& options, ExecContext& ctx);

// The job of one such product, for RunLinearJobs with others: x prepared into ctx.arena (alive
// until the caller's ArenaScope ends), y written with stride w.out.
LinearJob PrepareLinearJob(const LinearWeight& w, std::span<const float> x, int64_t rows,
                           std::span<float> y, const LinearOptions& options, ExecContext& ctx);

// The scalar reference: dequantise each weight row with the numerics codecs, accumulate the dot
// product in double, round once. Tests compare the fast kernels against it.
void LinearRef(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
               const LinearOptions& options);

}  // namespace dsv41

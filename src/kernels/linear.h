#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsv41 {

class ThreadPool;

// How a [out, in] weight matrix is stored (checkpoint.md §4, model.md §12.4). Bytes are the
// checkpoint's own, memory-mapped and possibly unaligned: kernels load them with memcpy/LoadU and
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
};

// y[r·out + o] = Σ_i W[o, i] · x'[r·in + i] for r < rows, with x' = x or its fq8_b32
// quantisation. Exactly dequantised fp32 weights times fp32 activations, accumulated in fp64 (the
// products are exact) and rounded to fp32 once: in practice equal to LinearRef. The order of the
// sum is fixed for a build and independent of the thread count and the number of rows.
// Outputs are fp32 (callers round to bf16 where §12.4 says so). x: [rows, in], y: [rows, out].
// `pool` may be null (single-threaded).
void Linear(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
            const LinearOptions& options, ThreadPool* pool);

// The scalar reference of Linear: dequantise each weight row with the numerics codecs, accumulate
// the dot product in double, round once. Tests compare the fast path against it.
void LinearRef(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
               const LinearOptions& options);

}  // namespace dsv41

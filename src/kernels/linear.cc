#include "kernels/linear.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {

std::span<const uint8_t> AsBytes(std::span<const std::byte> s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Bugs, not input: the model layer builds LinearWeight from validated checkpoint views.
void CheckShapes(const LinearWeight& w, std::span<const float> x, int64_t rows,
                 std::span<const float> y) {
  DSV41_CHECK(w.out >= 0 && w.in >= 0 && rows >= 0, "Linear: out %lld in %lld rows %lld",
              static_cast<long long>(w.out), static_cast<long long>(w.in),
              static_cast<long long>(rows));
  DSV41_CHECK(static_cast<int64_t>(x.size()) == rows * w.in, "Linear: x has %zu values, want %lld",
              x.size(), static_cast<long long>(rows * w.in));
  DSV41_CHECK(static_cast<int64_t>(y.size()) == rows * w.out, "Linear: y has %zu values, want %lld",
              y.size(), static_cast<long long>(rows * w.out));
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

// The activations as the GEMM sees them (model.md §12.3): x itself, or its fq8_b32 quantisation
// per block of 32 along K. A partial last block (in % 32 != 0, FP8 edge tiles) is quantised on
// its own elements: it is padded with zeros, which change neither its amax nor its other codes.
void PrepareActivations(std::span<const float> x, int64_t rows, int64_t in, bool quantize,
                        std::vector<float>& out) {
  out.assign(x.begin(), x.end());
  if (!quantize || in == 0) return;
  const int64_t padded = NumTiles(in) * kFq8Block;
  std::vector<float> row(padded);
  std::vector<uint8_t> codes(padded);
  std::vector<float> scales(padded / kFq8Block);
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(row.begin(), row.end(), 0.0f);
    std::copy(x.begin() + r * in, x.begin() + (r + 1) * in, row.begin());
    QuantizeActivationFq8B32(row, codes, scales);
    DequantizeActivationFq8B32(codes, scales, row);
    std::copy(row.begin(), row.begin() + in, out.begin() + r * in);
  }
}

}  // namespace

void LinearRef(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
               const LinearOptions& options) {
  CheckShapes(w, x, rows, y);
  std::vector<float> xq;
  PrepareActivations(x, rows, w.in, options.quantize_activations, xq);
  std::vector<float> wrow(w.in);
  for (int64_t o = 0; o < w.out; ++o) {
    DequantizeRowRef(w, o, wrow);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = xq.data() + r * w.in;
      double sum = 0.0;  // fp32 × fp32 products are exact in double
      for (int64_t i = 0; i < w.in; ++i) {
        sum += static_cast<double>(wrow[i]) * static_cast<double>(xr[i]);
      }
      y[r * w.out + o] = static_cast<float>(sum);
    }
  }
}

void Linear(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
            const LinearOptions& options, ThreadPool* pool) {
  CheckShapes(w, x, rows, y);
  std::vector<float> xq;
  PrepareActivations(x, rows, w.in, options.quantize_activations, xq);
  auto run = [&](int64_t begin, int64_t end, int /*thread_idx*/) {
    std::vector<float> wrow(w.in);
    for (int64_t o = begin; o < end; ++o) {
      DequantizeRowRef(w, o, wrow);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xq.data() + r * w.in;
        double sum = 0.0;
        for (int64_t i = 0; i < w.in; ++i) {
          sum += static_cast<double>(wrow[i]) * static_cast<double>(xr[i]);
        }
        y[r * w.out + o] = static_cast<float>(sum);
      }
    }
  };
  if (pool == nullptr || pool->num_threads() == 1) {
    run(0, w.out, 0);
  } else {
    pool->ParallelFor(w.out, 32, run);
  }
}

}  // namespace dsv41

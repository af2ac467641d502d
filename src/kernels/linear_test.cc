#include "kernels/linear.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/exec_context.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/linear_internal.h"
#include "kernels/simd_cap.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {

std::span<const std::byte> Bytes(const std::vector<uint8_t>& v) {
  return std::as_bytes(std::span<const uint8_t>(v));
}

// Runs fn(numerics) once per fast kernel this CPU runs: the kFma kernel on every Highway target
// compiled into dsv41_kernels and supported here (its dispatch follows the mock), then the
// kBf16Dot kernel where the CPU has it. Restores normal dispatch.
template <class Fn>
void ForEachKernel(const Fn& fn) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(std::string("fp32-fma ") + hwy::TargetName(target));
    fn(Numerics::kFastFma);
  }
  hwy::SetSupportedTargetsForTest(0);
  if (CpuHasBf16Dot()) {
    SCOPED_TRACE("bf16-dot");
    fn(Numerics::kFastBf16Dot);
  }
  {
    SCOPED_TRACE("plain-fp32");
    fn(Numerics::kPlainFp32);
  }
  // The AMX tile kernel: on the tiles where the CPU has them, else on their scalar model.
  SCOPED_TRACE(CpuHasAmxTiles() ? "amx-bf16 (tiles)" : "amx-bf16 (model of the tiles)");
  fn(Numerics::kFastAmx);
}

// Linear on a context of its own.
void RunLinear(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
               const LinearOptions& options, Numerics numerics, int threads = 1) {
  OwnedExecContext exec(threads, numerics);
  Linear(w, x, rows, y, options, exec.ctx);
}

// ---- LinearRef on hand-computed cases (and Linear on every target: these sums are exact) -----

// FP8 2×32, one tile with scale byte 126 (2^-1). Row 0: code 0x38 (1.0) everywhere → 0.5.
// Row 1: 0x40 (2.0) at even i, 0xB8 (−1.0) at odd i → 1.0, −0.5.
std::vector<uint8_t> HandFp8Weight() {
  std::vector<uint8_t> weight(64);
  for (int i = 0; i < 32; ++i) {
    weight[i] = 0x38;
    weight[32 + i] = (i % 2 == 0) ? 0x40 : 0xB8;
  }
  return weight;
}

// x is model.md §12.2's fq8_b32 worked example, whose quantised values the spec gives:
// [1.0, 0.3125, −0.009765625, 0.00146484375, 0, ...].
TEST(LinearRefTest, Fp8HandComputedTwoRowsWithActivationQuantisation) {
  const std::vector<uint8_t> weight = HandFp8Weight();
  const std::vector<uint8_t> scale = {126};
  const LinearWeight w{WeightFormat::kFp8Block, 2, 32, Bytes(weight), Bytes(scale)};
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[1] = 0.3f;
  x[2] = -0.01f;
  x[3] = 0.0015f;
  const LinearOptions options{.quantize_activations = true};
  // 0.5 · (1 + 0.3125 − 0.009765625 + 0.00146484375) = 0.5 · 1.30419921875
  const float want0 = 0.652099609375f;
  // 1 − 0.5·0.3125 − 0.009765625 − 0.5·0.00146484375
  const float want1 = 0.833251953125f;
  std::vector<float> y(2);
  LinearRef(w, x, 1, y, options);
  EXPECT_EQ(y[0], want0);
  EXPECT_EQ(y[1], want1);
  ForEachKernel([&](Numerics numerics) {
    std::vector<float> yf(2);
    RunLinear(w, x, 1, yf, options, numerics);
    EXPECT_EQ(yf[0], want0);
    EXPECT_EQ(yf[1], want1);
  });
}

// Without activation quantisation the same weights see x itself: x = 1..32 gives
// row 0: 0.5 · 528 = 264; row 1: (1 + 3 + ... + 31) − 0.5 · (2 + 4 + ... + 32) = 256 − 136 = 120.
TEST(LinearRefTest, Fp8HandComputedWithoutActivationQuantisation) {
  const std::vector<uint8_t> weight = HandFp8Weight();
  const std::vector<uint8_t> scale = {126};
  const LinearWeight w{WeightFormat::kFp8Block, 2, 32, Bytes(weight), Bytes(scale)};
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i + 1);
  std::vector<float> y(2);
  LinearRef(w, x, 1, y, LinearOptions{});
  EXPECT_EQ(y[0], 264.0f);
  EXPECT_EQ(y[1], 120.0f);
  ForEachKernel([&](Numerics numerics) {
    std::vector<float> yf(2);
    RunLinear(w, x, 1, yf, LinearOptions{.bf16_inputs = true}, numerics);
    EXPECT_EQ(yf[0], 264.0f);
    EXPECT_EQ(yf[1], 120.0f);
  });
}

// A partial FP8 tile (1×3, in < 32): codes 0x38 (1.0), 0x3C (1.5), 0x01 (the smallest
// subnormal, 2^-9), scale byte 129 (4) → W = [4, 6, 2^-7]; x = [1, 2, 128] → 4 + 12 + 1 = 17.
TEST(LinearRefTest, Fp8HandComputedPartialTileWithSubnormalCode) {
  const std::vector<uint8_t> weight = {0x38, 0x3C, 0x01};
  const std::vector<uint8_t> scale = {129};
  const LinearWeight w{WeightFormat::kFp8Block, 1, 3, Bytes(weight), Bytes(scale)};
  const std::vector<float> x = {1.0f, 2.0f, 128.0f};
  std::vector<float> y(1);
  LinearRef(w, x, 1, y, LinearOptions{});
  EXPECT_EQ(y[0], 17.0f);
  ForEachKernel([&](Numerics numerics) {
    std::vector<float> yf(1);
    RunLinear(w, x, 1, yf, LinearOptions{.bf16_inputs = true}, numerics);
    EXPECT_EQ(yf[0], 17.0f);
  });
}

// MXFP4 1×32, scale byte 128 (2). Byte 0 = 0xA7: element 0 code 7 (6.0), element 1 code 0xA
// (−1.0); other bytes 0x22 (1.0, 1.0). W = [12, −2, 2 × 30]; x = 1 → 12 − 2 + 60 = 70, also with
// activation quantisation (1.0 is e4m3-exact with s = 2^-8). With x = [1, 0, 0, ...] only
// element 0 counts (12), with x = [0, 1, 0, ...] only element 1 (−2): the low nibble comes first.
TEST(LinearRefTest, Mxfp4HandComputedLowNibbleFirst) {
  std::vector<uint8_t> weight(16, 0x22);
  weight[0] = 0xA7;
  const std::vector<uint8_t> scale = {128};
  const LinearWeight w{WeightFormat::kMxfp4, 1, 32, Bytes(weight), Bytes(scale)};
  const std::vector<float> ones(32, 1.0f);
  std::vector<float> e0(32, 0.0f), e1(32, 0.0f);
  e0[0] = 1.0f;
  e1[1] = 1.0f;
  std::vector<float> y(1);
  LinearRef(w, ones, 1, y, LinearOptions{});
  EXPECT_EQ(y[0], 70.0f);
  LinearRef(w, ones, 1, y, LinearOptions{.quantize_activations = true});
  EXPECT_EQ(y[0], 70.0f);
  LinearRef(w, e0, 1, y, LinearOptions{});
  EXPECT_EQ(y[0], 12.0f);
  LinearRef(w, e1, 1, y, LinearOptions{});
  EXPECT_EQ(y[0], -2.0f);
  ForEachKernel([&](Numerics numerics) {
    std::vector<float> yf(1);
    RunLinear(w, ones, 1, yf, LinearOptions{.quantize_activations = true}, numerics);
    EXPECT_EQ(yf[0], 70.0f);
    RunLinear(w, e0, 1, yf, LinearOptions{.bf16_inputs = true}, numerics);
    EXPECT_EQ(yf[0], 12.0f);
    RunLinear(w, e1, 1, yf, LinearOptions{.bf16_inputs = true}, numerics);
    EXPECT_EQ(yf[0], -2.0f);
  });
}

// BF16 1×3: 0x3F80 = 1.0, 0x4040 = 3.0, 0xBF00 = −0.5; two input rows.
TEST(LinearRefTest, Bf16HandComputedTwoInputRows) {
  const uint16_t bits[3] = {0x3F80, 0x4040, 0xBF00};
  std::vector<uint8_t> weight(6);
  std::memcpy(weight.data(), bits, 6);
  const LinearWeight w{WeightFormat::kBf16, 1, 3, Bytes(weight), {}};
  const std::vector<float> x = {2.0f, 1.0f, 4.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> y(2);
  LinearRef(w, x, 2, y, LinearOptions{});
  EXPECT_EQ(y[0], 3.0f);  // 2 + 3 − 2
  EXPECT_EQ(y[1], 3.5f);  // 1 + 3 − 0.5
  ForEachKernel([&](Numerics numerics) {
    std::vector<float> yf(2);
    RunLinear(w, x, 2, yf, LinearOptions{.bf16_inputs = true}, numerics);
    EXPECT_EQ(yf[0], 3.0f);
    EXPECT_EQ(yf[1], 3.5f);
  });
}

// The noise probe sums in plain fp32 in index order: 1 + 32 · 2^-24 rounds back to 1 after every
// step (each partial sum 1 + 2^-24 is a tie to even), while the exact sum 1 + 2^-19 is an fp32
// value the reference returns. Reversed, the small terms add up first and plain fp32 is exact too.
TEST(LinearRefTest, PlainFp32SumsInIndexOrder) {
  std::vector<uint8_t> weight(2 * 33);
  for (int i = 0; i < 33; ++i) weight[2 * i + 1] = 0x3F;  // bf16 0x3F80 = 1.0, little endian
  for (int i = 0; i < 33; ++i) weight[2 * i] = 0x80;
  const LinearWeight w{WeightFormat::kBf16, 1, 33, Bytes(weight), {}};
  std::vector<float> x(33, 0x1p-24f);
  x[0] = 1.0f;
  const LinearOptions options{.bf16_inputs = true};
  std::vector<float> y(1);
  RunLinear(w, x, 1, y, options, Numerics::kReference);
  EXPECT_EQ(y[0], 1.0f + 0x1p-19f);
  RunLinear(w, x, 1, y, options, Numerics::kPlainFp32);
  EXPECT_EQ(y[0], 1.0f);
  std::reverse(x.begin(), x.end());
  RunLinear(w, x, 1, y, options, Numerics::kPlainFp32);
  EXPECT_EQ(y[0], 1.0f + 0x1p-19f);
}

// The AMX kernel's order (linear_amx.cc): within a K tile of 32, the even and the odd elements
// each summed in fp32 from 0, then their sum added to the run. Products 1 (even), 2^-24 (odd),
// 2^-24 (even), 2^-24 (odd): even = 1 + 2^-24 = 1 (a tie to even), odd = 2^-23, so the tile gives
// 1 + 2^-23 — where one fp32 chain in index order gives 1 and the exact sum 1 + 3·2^-24 rounds to
// 1 + 2^-22. (Runs on the tiles where present, else on their model.)
TEST(LinearRefTest, AmxSumsEvenAndOddElementsApartPerTile) {
  std::vector<uint8_t> weight(2 * 32, 0);
  for (int i = 0; i < 4; ++i) weight[2 * i + 1] = 0x3F, weight[2 * i] = 0x80;  // bf16 1.0
  const LinearWeight w{WeightFormat::kBf16, 1, 32, Bytes(weight), {}};
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[1] = x[2] = x[3] = 0x1p-24f;
  const LinearOptions options{.bf16_inputs = true};
  std::vector<float> y(1);
  RunLinear(w, x, 1, y, options, Numerics::kFastAmx);
  EXPECT_EQ(y[0], 1.0f + 0x1p-23f);
  RunLinear(w, x, 1, y, options, Numerics::kPlainFp32);
  EXPECT_EQ(y[0], 1.0f);
  RunLinear(w, x, 1, y, options, Numerics::kReference);
  EXPECT_EQ(y[0], 1.0f + 0x1p-22f);
}

// ---- random matrices: the fast path against LinearRef, LinearRef against an expansion --------

// A stored weight whose bytes start `misalign` bytes into their buffers.
struct StoredWeight {
  WeightFormat format;
  int64_t out = 0;
  int64_t in = 0;
  std::vector<uint8_t> weight_buf;
  std::vector<uint8_t> scale_buf;
  size_t misalign = 0;
  size_t weight_bytes = 0;
  size_t scale_bytes = 0;

  LinearWeight View() const {
    LinearWeight w;
    w.format = format;
    w.out = out;
    w.in = in;
    w.weight = std::as_bytes(std::span<const uint8_t>(weight_buf).subspan(misalign, weight_bytes));
    if (scale_bytes > 0) {
      w.scale = std::as_bytes(std::span<const uint8_t>(scale_buf).subspan(misalign, scale_bytes));
    }
    return w;
  }
  const uint8_t* WeightBytes() const { return weight_buf.data() + misalign; }
  std::vector<uint8_t> ScaleBytes() const {
    return {scale_buf.begin() + misalign, scale_buf.begin() + misalign + scale_bytes};
  }
  std::vector<uint8_t> WeightVector() const {
    return {WeightBytes(), WeightBytes() + weight_bytes};
  }
};

// A weight from explicit bytes, `misalign` bytes into its buffers.
StoredWeight WeightFromBytes(WeightFormat format, int64_t out, int64_t in,
                             const std::vector<uint8_t>& weight, const std::vector<uint8_t>& scale,
                             size_t misalign) {
  StoredWeight s;
  s.format = format;
  s.out = out;
  s.in = in;
  s.misalign = misalign;
  s.weight_bytes = weight.size();
  s.scale_bytes = scale.size();
  s.weight_buf.assign(misalign, 0xEE);
  s.weight_buf.insert(s.weight_buf.end(), weight.begin(), weight.end());
  s.scale_buf.assign(misalign, 0xEE);
  s.scale_buf.insert(s.scale_buf.end(), scale.begin(), scale.end());
  return s;
}

// Scale bytes are drawn from [scale_lo, scale_hi]; FP8 codes have magnitude bits at most
// fp8_max_mag (never the NaN code 0x7F).
StoredWeight MakeWeight(WeightFormat format, int64_t out, int64_t in, size_t misalign,
                        std::mt19937& rng, int scale_lo = 118, int scale_hi = 130,
                        int fp8_max_mag = 0x7E) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> scale_byte(scale_lo, scale_hi);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  std::vector<uint8_t> weight;
  std::vector<uint8_t> scale;
  switch (format) {
    case WeightFormat::kBf16:
      for (int64_t i = 0; i < out * in; ++i) {
        uint32_t bits;
        const float v = value(rng);
        std::memcpy(&bits, &v, 4);
        const uint16_t b16 = static_cast<uint16_t>(bits >> 16);  // truncation: any bf16 will do
        weight.push_back(static_cast<uint8_t>(b16 & 0xFF));
        weight.push_back(static_cast<uint8_t>(b16 >> 8));
      }
      break;
    case WeightFormat::kF32:
      for (int64_t i = 0; i < out * in; ++i) {
        const float v = value(rng);
        uint8_t b[4];
        std::memcpy(b, &v, 4);
        weight.insert(weight.end(), b, b + 4);
      }
      break;
    case WeightFormat::kFp8Block:
      for (int64_t i = 0; i < out * in; ++i) {
        const int c = byte(rng);
        weight.push_back(static_cast<uint8_t>((c & 0x80) | ((c & 0x7F) % (fp8_max_mag + 1))));
      }
      for (int64_t i = 0; i < NumTiles(out) * NumTiles(in); ++i) {
        scale.push_back(static_cast<uint8_t>(scale_byte(rng)));
      }
      break;
    case WeightFormat::kMxfp4:
      for (int64_t i = 0; i < out * in / 2; ++i) weight.push_back(static_cast<uint8_t>(byte(rng)));
      for (int64_t i = 0; i < out * in / 32; ++i) {
        scale.push_back(static_cast<uint8_t>(scale_byte(rng)));
      }
      break;
  }
  return WeightFromBytes(format, out, in, weight, scale, misalign);
}

// Uniform in ±3 times `scale` (a power of two: exact).
std::vector<float> RandomActivations(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = value(rng) * scale;
  return x;
}

// The whole matrix expanded to fp32 by numerics/block_quant.h (or by bit shifts for bf16).
std::vector<float> ExpandWeight(const StoredWeight& s) {
  std::vector<float> w(s.out * s.in);
  switch (s.format) {
    case WeightFormat::kBf16:
      for (int64_t i = 0; i < s.out * s.in; ++i) {
        uint16_t b16;
        std::memcpy(&b16, s.WeightBytes() + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(b16) << 16;
        std::memcpy(&w[i], &bits, 4);
      }
      break;
    case WeightFormat::kF32:
      if (!w.empty()) std::memcpy(w.data(), s.WeightBytes(), 4 * w.size());
      break;
    case WeightFormat::kFp8Block:
      DequantizeFp8Blocks(s.out, s.in, s.WeightVector(), s.ScaleBytes(), w);
      break;
    case WeightFormat::kMxfp4:
      DequantizeMxfp4(s.out, s.in, s.WeightVector(), s.ScaleBytes(), w);
      break;
  }
  return w;
}

// x as the GEMM must see it: x, or FakeQuantFq8B32 over each row zero-padded to 32.
std::vector<float> ExpandActivations(const std::vector<float>& x, int64_t rows, int64_t in,
                                     bool quantize) {
  if (!quantize) return x;
  std::vector<float> out(x.size());
  const int64_t padded = (in + 31) / 32 * 32;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(padded, 0.0f);
    std::copy(x.begin() + r * in, x.begin() + (r + 1) * in, row.begin());
    FakeQuantFq8B32(row);
    std::copy(row.begin(), row.begin() + in, out.begin() + r * in);
  }
  return out;
}

struct Expected {
  std::vector<float> exact;     // double dot, rounded once
  std::vector<double> abs_sum;  // Σ|w·x| per output
};

Expected ExpandedProduct(const StoredWeight& s, const std::vector<float>& x, int64_t rows,
                         bool quantize) {
  const std::vector<float> w = ExpandWeight(s);
  const std::vector<float> xq = ExpandActivations(x, rows, s.in, quantize);
  Expected e;
  e.exact.resize(rows * s.out);
  e.abs_sum.resize(rows * s.out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      double sum = 0.0, abs_sum = 0.0;
      for (int64_t i = 0; i < s.in; ++i) {
        const double p = static_cast<double>(w[o * s.in + i]) * xq[r * s.in + i];
        sum += p;
        abs_sum += std::fabs(p);
      }
      e.exact[r * s.out + o] = static_cast<float>(sum);
      e.abs_sum[r * s.out + o] = abs_sum;
    }
  }
  return e;
}

// The stated bound of the fast kernels against the exact sum rounded once (`ref`, fp32): both
// multiply exactly and accumulate in fp32, every pair in one chain of at most `in` additions
// (lanes then a lane tree), each rounding by at most 2^-24 of a partial sum bounded by Σ|w·x|;
// plus the final rounding of ref and, for the bf16 dot product, products or sums below 2^-126
// flushed to zero (DAZ/FTZ):
// |y − ref| ≤ (in + 4)·2^-24·Σ|w·x| + 2^-24·|ref| + in·2^-125.
double Bound(int64_t in, double abs_sum, float ref) {
  return static_cast<double>(in + 4) * 0x1p-24 * abs_sum +
         0x1p-24 * std::fabs(static_cast<double>(ref)) + static_cast<double>(in) * 0x1p-125;
}

std::string Name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBf16:
      return "bf16";
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kFp8Block:
      return "fp8";
    case WeightFormat::kMxfp4:
      return "mxfp4";
  }
  return "?";
}

// Every fast kernel within Bound of LinearRef, LinearRef equal to the expansion. Without
// activation quantisation x is rounded to bf16 (and declared so) for the bf16 dot kernel; the FMA
// kernel also sees the raw fp32 x.
void CheckCase(WeightFormat format, int64_t out, int64_t in, int64_t rows, bool quantize,
               size_t misalign, std::mt19937& rng, int scale_lo = 118, int scale_hi = 130,
               float x_scale = 1.0f, int fp8_max_mag = 0x7E) {
  SCOPED_TRACE(Name(format) + " out " + std::to_string(out) + " in " + std::to_string(in) +
               " rows " + std::to_string(rows) + " quantize " + std::to_string(quantize) +
               " misalign " + std::to_string(misalign));
  const StoredWeight s =
      MakeWeight(format, out, in, misalign, rng, scale_lo, scale_hi, fp8_max_mag);
  const LinearWeight w = s.View();
  const std::vector<float> raw = RandomActivations(rows * in, rng, x_scale);
  std::vector<float> rounded(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) rounded[i] = Bf16Round(raw[i]);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 inputs" : "fp32 inputs");
    const std::vector<float>& x = bf16 ? rounded : raw;
    const LinearOptions options{.quantize_activations = quantize, .bf16_inputs = bf16};
    const Expected e = ExpandedProduct(s, x, rows, quantize);
    std::vector<float> ref(rows * out);
    LinearRef(w, x, rows, ref, options);
    for (int64_t i = 0; i < rows * out; ++i) ASSERT_EQ(ref[i], e.exact[i]) << "index " << i;
    ForEachKernel([&](Numerics numerics) {
      // The bf16 dot and AMX kernels' domain: unscaled weights times x above 2^-126 (DAZ), always
      // so for fq8_b32 activations (|x| >= 2^-31 or 0); raw inputs near 2^-120 are outside it.
      if ((numerics == Numerics::kFastBf16Dot || numerics == Numerics::kFastAmx) && !quantize &&
          x_scale < 0x1p-60f) {
        return;
      }
      std::vector<float> y(rows * out, -7.0f);
      RunLinear(w, x, rows, y, options, numerics);
      for (int64_t i = 0; i < rows * out; ++i) {
        ASSERT_LE(std::fabs(static_cast<double>(y[i]) - ref[i]), Bound(in, e.abs_sum[i], ref[i]))
            << "index " << i << " fast " << y[i] << " ref " << ref[i];
      }
    });
  }
}

constexpr WeightFormat kAllFormats[] = {WeightFormat::kBf16, WeightFormat::kF32,
                                        WeightFormat::kFp8Block, WeightFormat::kMxfp4};

// Every K length 0..33 (2 × the widest vector of 16 fp32 lanes, + 1) for the formats that allow
// it, with 5 output rows (one 4-row tile and a single row) and misaligned byte spans.
TEST(LinearTest, MatchesReferenceOverEveryShortLength) {
  std::mt19937 rng(1);
  for (const WeightFormat f : kAllFormats) {
    const int64_t step = f == WeightFormat::kMxfp4 ? 32 : 1;
    for (int64_t in = 0; in <= 33 || (step == 32 && in <= 96); in += step) {
      CheckCase(f, 5, in, 1, false, static_cast<size_t>(in % 3), rng);
      CheckCase(f, 5, in, 2, f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4,
                static_cast<size_t>(in % 4), rng);
    }
  }
}

// Partial FP8 tiles in both directions and every row count 1..5 (33 on the first two shapes),
// with and without activation quantisation for the quantised formats.
TEST(LinearTest, MatchesReferenceOverShapesAndRowCounts) {
  std::mt19937 rng(2);
  const int64_t shapes[][2] = {{37, 70}, {33, 95}, {1, 1}, {64, 128}, {9, 160}};
  for (const WeightFormat f : kAllFormats) {
    const bool quantised = f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4;
    for (int shape = 0; shape < 5; ++shape) {
      const int64_t out = shapes[shape][0];
      const int64_t in =
          f == WeightFormat::kMxfp4 ? (shapes[shape][1] + 31) / 32 * 32 : shapes[shape][1];
      for (const int64_t rows : {1, 2, 3, 4, 5, 33}) {
        if (rows == 33 && shape >= 2) continue;
        CheckCase(f, out, in, rows, false, static_cast<size_t>(rows % 3), rng);
        if (quantised) CheckCase(f, out, in, rows, true, static_cast<size_t>(rows % 4), rng);
      }
    }
  }
}

// Scale bytes near the top of the ue8m0 range (FP8 above 246 and, below AVX-512, MXFP4 above
// 240 take the two-step path: their fused factor would overflow) with tiny activations, and
// bytes near the bottom with huge ones. FP8 codes stay below 2^-2 (exponent field <= 4) so that
// code · 2^127 is finite, as the spec promises for every stored weight.
TEST(LinearTest, MatchesReferenceAtExtremeScaleBytes) {
  std::mt19937 rng(3);
  CheckCase(WeightFormat::kFp8Block, 40, 70, 3, false, 1, rng, 240, 254, 0x1p-120f, 0x27);
  CheckCase(WeightFormat::kMxfp4, 40, 64, 3, false, 1, rng, 236, 252, 0x1p-120f);
  CheckCase(WeightFormat::kFp8Block, 40, 70, 3, true, 2, rng, 10, 40, 0x1p90f);
  CheckCase(WeightFormat::kMxfp4, 40, 64, 3, true, 2, rng, 10, 40, 0x1p90f);
}

// The fast path's activation quantiser equals fq8_b32 bit for bit: through an fp32 identity
// matrix y = x' exactly. Inputs have 5 significant bits over a wide exponent range, so e4m3
// rounding meets exact ties in the normal and subnormal ranges, clamping is exercised by the
// block maximum and the last block (in = 77 is not a multiple of 32) is all below the 1e-4
// amax floor.
TEST(LinearTest, ActivationQuantisationMatchesFq8B32BitForBit) {
  const int64_t in = 77;
  std::vector<uint8_t> identity(4 * in * in, 0);
  for (int64_t i = 0; i < in; ++i) {
    const float one = 1.0f;
    std::memcpy(identity.data() + 4 * (i * in + i), &one, 4);
  }
  const LinearWeight w{WeightFormat::kF32, in, in, Bytes(identity), {}};
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> mantissa(16, 31), exponent(-24, 9), sign(0, 1);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> x(in);
    for (int64_t i = 0; i < in; ++i) {
      const float v = std::ldexp(static_cast<float>(mantissa(rng)), exponent(rng) - 5);
      x[i] = sign(rng) ? -v : v;
      if (i >= 64) x[i] *= 0x1p-40f;  // the last block: amax below 1e-4
    }
    x[trial % in] = 0.0f;
    std::vector<float> want(96, 0.0f);
    std::copy(x.begin(), x.end(), want.begin());
    FakeQuantFq8B32(want);
    ForEachKernel([&](Numerics numerics) {
      std::vector<float> y(in);
      RunLinear(w, x, 1, y, LinearOptions{.quantize_activations = true}, numerics);
      for (int64_t i = 0; i < in; ++i) ASSERT_EQ(y[i], want[i]) << "x " << x[i] << " at " << i;
    });
  }
}

// Results are independent of the thread count and of how many rows share the call.
TEST(LinearTest, ThreadAndBatchInvariantBitForBit) {
  std::mt19937 rng(4);
  for (const WeightFormat f : kAllFormats) {
    SCOPED_TRACE(Name(f));
    // 75 × 83: several tiles per thread; 9 × 1100: K spans several decode chunks, whose partial
    // sums are parked between chunks; 70 rows: two row blocks of the many-rows path. 12 and 70
    // rows take that path; 3, 6 and 7 rows and single rows the register tiles (6 and 7 in two row
    // groups).
    for (const auto& [out, in_any, rows] : {std::tuple<int64_t, int64_t, int64_t>{75, 83, 6},
                                            std::tuple<int64_t, int64_t, int64_t>{75, 83, 3},
                                            std::tuple<int64_t, int64_t, int64_t>{9, 1100, 7},
                                            std::tuple<int64_t, int64_t, int64_t>{9, 1100, 12},
                                            std::tuple<int64_t, int64_t, int64_t>{40, 300, 70}}) {
      const int64_t in = f == WeightFormat::kMxfp4 ? (in_any + 31) / 32 * 32 : in_any;
      const StoredWeight s = MakeWeight(f, out, in, 1, rng);
      const LinearWeight w = s.View();
      std::vector<float> x = RandomActivations(rows * in, rng);
      for (float& v : x) v = Bf16Round(v);
      const LinearOptions options{.quantize_activations = f == WeightFormat::kFp8Block,
                                  .bf16_inputs = true};
      const Expected e = ExpandedProduct(s, x, rows, options.quantize_activations);
      ForEachKernel([&](Numerics numerics) {
        std::vector<float> y1(rows * out), y2(rows * out), y3(rows * out);
        RunLinear(w, x, rows, y1, options, numerics, 1);
        RunLinear(w, x, rows, y2, options, numerics, 2);
        RunLinear(w, x, rows, y3, options, numerics, 3);
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> single(out);
          RunLinear(w, std::span<const float>(x).subspan(r * in, in), 1, single, options, numerics,
                    2);
          for (int64_t o = 0; o < out; ++o) {
            const int64_t i = r * out + o;
            ASSERT_EQ(std::bit_cast<uint32_t>(y1[i]), std::bit_cast<uint32_t>(y2[i])) << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(y1[i]), std::bit_cast<uint32_t>(y3[i])) << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(y1[i]), std::bit_cast<uint32_t>(single[o])) << i;
            ASSERT_LE(std::fabs(static_cast<double>(y1[i]) - e.exact[i]),
                      Bound(in, e.abs_sum[i], e.exact[i]));
          }
        }
      });
    }
  }
}

// The bf16 dot kernel runs a tile of weight rows on its plain path when the rows end on whole
// superblocks and every scale byte is in the common range, on its checked path otherwise; both
// must give the same bits. Pairs of weights with the same values, one plain and one not: rows of
// in = 96 (48 for bf16) against the same rows zero-padded to 128 (the padding's scales 2^0), and
// a block of zero codes under the common scale byte 127 against the same block under a rare one
// (FP8 250, MXFP4 0: the scaled form, adding only zeros). Single rows, the register tiles' 3 and
// 6 rows and the buffered path's 12 and 50; 40 outputs (FP8: a whole and a partial 32-row group).
TEST(LinearTest, PlainTilesEqualCheckedTilesBitForBit) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> common_scale(118, 130);
  constexpr int64_t kOut = 40, kLong = 128;
  for (const WeightFormat f :
       {WeightFormat::kBf16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
    SCOPED_TRACE(Name(f));
    const int64_t short_in = f == WeightFormat::kBf16 ? 48 : 96;
    // Per format: bytes per weight (bf16 2, FP8 1, MXFP4 1/2) and scale columns per row.
    const auto row_bytes = [&](int64_t in) {
      return f == WeightFormat::kBf16 ? 2 * in : f == WeightFormat::kMxfp4 ? in / 2 : in;
    };
    const auto scale_cols = [&](int64_t in) { return f == WeightFormat::kBf16 ? 0 : NumTiles(in); };
    const int64_t scale_rows = f == WeightFormat::kFp8Block ? NumTiles(kOut) : kOut;
    // Random weights of the long shape; the short one is their first short_in columns, the long
    // one's last columns zero (bf16 +0, FP8 code 0, MXFP4 nibbles 0).
    std::vector<uint8_t> long_w(kOut * row_bytes(kLong)), short_w;
    for (int64_t o = 0; o < kOut; ++o) {
      for (int64_t b = 0; b < row_bytes(kLong); ++b) {
        uint8_t v = b < row_bytes(short_in) ? static_cast<uint8_t>(byte(rng)) : 0;
        if (f == WeightFormat::kFp8Block && (v & 0x7F) == 0x7F) v = 0x7E;  // no NaN codes
        if (f == WeightFormat::kBf16 && b % 2 == 1) v = static_cast<uint8_t>(v & 0xBF);  // finite
        long_w[o * row_bytes(kLong) + b] = v;
        if (b < row_bytes(short_in)) short_w.push_back(v);
      }
    }
    std::vector<uint8_t> long_s(scale_rows * scale_cols(kLong)), short_s;
    for (int64_t r = 0; r < scale_rows; ++r) {
      for (int64_t c = 0; c < scale_cols(kLong); ++c) {
        const bool padding = c >= scale_cols(short_in);
        const uint8_t v = padding ? 127 : static_cast<uint8_t>(common_scale(rng));
        long_s[r * scale_cols(kLong) + c] = v;
        if (!padding) short_s.push_back(v);
      }
    }
    // The rare-scale twin of the long weight: one block of zero codes (FP8: group 1's tile column
    // 1, rows 32..39; MXFP4: row 5's block 2) under 127, and under a rare byte.
    std::vector<uint8_t> zero_w = long_w, zero_s = long_s, rare_s;
    if (f == WeightFormat::kFp8Block) {
      for (int64_t o = 32; o < kOut; ++o) std::fill_n(&zero_w[o * kLong + 32], 32, uint8_t{0});
      zero_s[1 * scale_cols(kLong) + 1] = 127;
      rare_s = zero_s;
      rare_s[1 * scale_cols(kLong) + 1] = 250;
    } else if (f == WeightFormat::kMxfp4) {
      std::fill_n(&zero_w[5 * row_bytes(kLong) + 2 * 16], 16, uint8_t{0});
      zero_s[5 * scale_cols(kLong) + 2] = 127;
      rare_s = zero_s;
      rare_s[5 * scale_cols(kLong) + 2] = 0;
    }
    const StoredWeight short_weight = WeightFromBytes(f, kOut, short_in, short_w, short_s, 1);
    const StoredWeight long_weight = WeightFromBytes(f, kOut, kLong, long_w, long_s, 2);
    const StoredWeight zero_weight = WeightFromBytes(f, kOut, kLong, zero_w, zero_s, 3);
    const StoredWeight rare_weight =
        WeightFromBytes(f, kOut, kLong, zero_w, rare_s.empty() ? zero_s : rare_s, 1);
    const LinearOptions options{.bf16_inputs = true};
    for (const int64_t rows : {1, 3, 6, 12, 50}) {
      SCOPED_TRACE("rows " + std::to_string(rows));
      std::vector<float> long_x = RandomActivations(rows * kLong, rng);
      std::vector<float> short_x(rows * short_in);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < kLong; ++i) {
          float& v = long_x[r * kLong + i];
          v = i < short_in ? Bf16Round(v) : 0.0f;
          if (i < short_in) short_x[r * short_in + i] = v;
        }
      }
      ForEachKernel([&](Numerics numerics) {
        const auto run = [&](const StoredWeight& s, const std::vector<float>& x) {
          std::vector<float> y(rows * kOut);
          RunLinear(s.View(), x, rows, y, options, numerics, 2);
          return y;
        };
        const std::vector<float> from_short = run(short_weight, short_x);
        const std::vector<float> from_long = run(long_weight, long_x);
        const std::vector<float> from_zero = run(zero_weight, long_x);
        const std::vector<float> from_rare = run(rare_weight, long_x);
        for (int64_t i = 0; i < rows * kOut; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(from_short[i]), std::bit_cast<uint32_t>(from_long[i]))
              << "padded rows, index " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(from_zero[i]), std::bit_cast<uint32_t>(from_rare[i]))
              << "rare scale, index " << i;
        }
      });
    }
  }
}

// A one-row FP8 tile may add the scale exponents to the input row instead of to the weights
// (the same products while every x · 2^s stays a normal bf16). Weights 256 (code 0x78) under
// scale byte 117 (2^-10): with x = 2^-100 the row takes the shift (2^-110); with x = 2^-120 it
// must not (2^-130 is below the normal range, and the dot product would flush it to zero), though
// every product, 2^-122, is in the kernel's domain. 9 outputs: a tile of eight and a single one.
TEST(LinearTest, Fp8ScalesMoveToTheInputOnlyWhileExact) {
  constexpr int64_t kOut = 9, kIn = 128;
  const std::vector<uint8_t> weight(kOut * kIn, 0x78);
  const std::vector<uint8_t> scale(NumTiles(kOut) * NumTiles(kIn), 117);
  const StoredWeight s = WeightFromBytes(WeightFormat::kFp8Block, kOut, kIn, weight, scale, 0);
  for (const int exponent : {-100, -120}) {
    SCOPED_TRACE("x = 2^" + std::to_string(exponent));
    const std::vector<float> x(kIn, std::ldexp(1.0f, exponent));
    const float expected = std::ldexp(1.0f, exponent + 8 - 10 + 7);  // 128 products of 2^(e-2)
    ForEachKernel([&](Numerics numerics) {
      std::vector<float> y(kOut, -1.0f);
      RunLinear(s.View(), x, 1, y, LinearOptions{.bf16_inputs = true}, numerics);
      for (int64_t o = 0; o < kOut; ++o) ASSERT_EQ(y[o], expected) << "output " << o;
    });
  }
}

// The bf16 dot kernel's register tiles (up to kBf16DotRegisterRows rows: the one-row tiles, then
// 4 outputs × 1..4 rows) keep every output's fixed order: each row of a call with 1..8 rows
// equals the row alone, bit for bit, on every weight format, with K over two chunks and an output
// count that leaves single-output tails (none of the shape tests had 6 to 8 rows).
TEST(LinearTest, RegisterTilesOfEveryRowCountEqualEachRowAlone) {
  if (!CpuHasBf16Dot()) GTEST_SKIP() << "no AVX512-BF16 here (or capped)";
  constexpr int64_t kOut = 22, kIn = 1280;
  std::mt19937 rng(31);
  for (const WeightFormat f :
       {WeightFormat::kBf16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
    SCOPED_TRACE(static_cast<int>(f));
    const StoredWeight s = MakeWeight(f, kOut, kIn, 3, rng);
    const LinearWeight w = s.View();
    const LinearOptions options{.bf16_inputs = true};
    for (int64_t rows = 1; rows <= linear_internal::kBf16DotRegisterRows; ++rows) {
      SCOPED_TRACE("rows " + std::to_string(rows));
      std::vector<float> x = RandomActivations(rows * kIn, rng);
      for (float& v : x) v = Bf16Round(v);
      std::vector<float> y(rows * kOut);
      RunLinear(w, x, rows, y, options, Numerics::kFastBf16Dot);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> alone(kOut);
        RunLinear(w, std::span<const float>(x).subspan(r * kIn, kIn), 1, alone, options,
                  Numerics::kFastBf16Dot);
        for (int64_t o = 0; o < kOut; ++o) {
          ASSERT_EQ(std::bit_cast<uint32_t>(y[r * kOut + o]), std::bit_cast<uint32_t>(alone[o]))
              << "row " << r << " output " << o;
        }
      }
    }
  }
}

// The bf16 dot kernel's many-rows path folds MXFP4 block scales into the decoded weights, and adds
// a superblock's partial dot instead of FMA(partial, 2^(b−127), acc), only where both give the same
// bits: no product or partial sum of either may leave the normal range (the dot flushes
// subnormals). Every row of a 10-row call (that path) must equal the row alone (the register tile,
// which keeps the FMA). Cases: inputs near 1 under common bytes (folded); inputs 2^-110 under byte
// 100 (folded, their products 2^-138 would flush); rows whose one non-zero input is 2^-126 with
// weight 0.5 under byte 200 (the unfolded product 2^-127 flushes, a folded one would not); the
// extremes a fold may take, byte 2 with
// inputs near 2^8 and byte 252 with inputs near 2^-8 (weights at the ends of the normal range),
// and byte 253 (a folded 6 · 2^126 is no bf16). A prepared input whose exponent range is unknown
// (LinearInput's defaults) folds nothing.
TEST(LinearTest, Mxfp4BufferedTilesFoldTheirScalesOnlyWhileExact) {
  if (!CpuHasBf16Dot()) GTEST_SKIP() << "no AVX512-BF16 here (or capped)";
  constexpr int64_t kOut = 8, kIn = 256, kRows = 10;
  static_assert(kRows > linear_internal::kBf16DotRegisterRows);
  struct Case {
    const char* name;
    int scale_lo, scale_hi;  // the bytes drawn for the blocks
    int x_exponent;          // inputs (1..2) · 2^x_exponent, bf16-rounded, random signs
    float tiny;  // if non-zero: every input 0 but input 5, `tiny`, whose weights are all 0.5
  };
  const Case cases[] = {{"common", 118, 130, 0, 0.0f},
                        {"small inputs, small scales", 100, 100, -110, 0.0f},
                        {"a tiny input", 200, 200, 0, std::ldexp(1.0f, -126)},
                        {"least foldable byte", 2, 2, 8, 0.0f},
                        {"greatest foldable byte", 252, 252, -9, 0.0f},
                        {"a byte above them", 253, 253, -9, 0.0f}};
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> magnitude(1.0f, 2.0f);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::uniform_int_distribution<int> scale_byte(c.scale_lo, c.scale_hi);
    std::vector<uint8_t> weight(kOut * kIn / 2), scale(kOut * kIn / 32);
    for (uint8_t& b : weight) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& b : scale) b = static_cast<uint8_t>(scale_byte(rng));
    std::vector<float> x(kRows * kIn);
    for (float& v : x) {
      v = Bf16Round(std::ldexp(magnitude(rng), c.x_exponent) * (byte(rng) % 2 ? 1.0f : -1.0f));
    }
    if (c.tiny != 0.0f) {
      for (int64_t r = 0; r < kRows; ++r) {
        std::fill_n(&x[r * kIn], kIn, 0.0f);
        x[r * kIn + 5] = c.tiny;
      }
      // Input 5 is the high nibble of byte 2 of each row; code 1 is 0.5.
      for (int64_t o = 0; o < kOut; ++o) {
        uint8_t& b = weight[o * kIn / 2 + 2];
        b = static_cast<uint8_t>((b & 0x0F) | 0x10);
      }
    }
    const StoredWeight s = WeightFromBytes(WeightFormat::kMxfp4, kOut, kIn, weight, scale, 1);
    const LinearWeight w = s.View();
    const LinearOptions options{.bf16_inputs = true};
    std::vector<float> y(kRows * kOut);
    RunLinear(w, x, kRows, y, options, Numerics::kFastBf16Dot);
    // The same input prepared, its exponent range then forgotten (LinearInput's defaults): it must
    // fold nothing.
    std::vector<std::byte> storage(LinearInputBytes(w, kRows, GemmKernel::kBf16Dot) + 64);
    const size_t skip = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    LinearInput unmeasured_input =
        PrepareLinearInput(w, x, kRows, options, GemmKernel::kBf16Dot,
                           std::span<std::byte>(storage).subspan(skip, storage.size() - skip));
    unmeasured_input.bf16_exp_low = LinearInput{}.bf16_exp_low;
    unmeasured_input.bf16_exp_high = LinearInput{}.bf16_exp_high;
    std::vector<float> unmeasured(kRows * kOut);
    LinearOutputs(w, unmeasured_input, 0, kOut, unmeasured.data(), kOut);
    for (int64_t r = 0; r < kRows; ++r) {
      std::vector<float> alone(kOut);
      RunLinear(w, std::span<const float>(x).subspan(r * kIn, kIn), 1, alone, options,
                Numerics::kFastBf16Dot);
      for (int64_t o = 0; o < kOut; ++o) {
        ASSERT_EQ(std::bit_cast<uint32_t>(y[r * kOut + o]), std::bit_cast<uint32_t>(alone[o]))
            << "row " << r << " output " << o << ": " << y[r * kOut + o] << " vs " << alone[o];
        ASSERT_EQ(std::bit_cast<uint32_t>(unmeasured[r * kOut + o]),
                  std::bit_cast<uint32_t>(alone[o]))
            << "unmeasured input, row " << r << " output " << o;
      }
    }
  }
}

// WeightRows names the bytes of a range of output rows in every stored format (RunLinearJobs
// passes them to the kernels as the next weights a thread streams).
TEST(LinearTest, WeightRowsAreTheOutputsRowBytes) {
  std::mt19937 rng(10);
  for (const auto& [format, row_bytes] :
       {std::pair<WeightFormat, int64_t>{WeightFormat::kBf16, 192},
        {WeightFormat::kF32, 384},
        {WeightFormat::kFp8Block, 96},
        {WeightFormat::kMxfp4, 48}}) {
    SCOPED_TRACE(Name(format));
    const StoredWeight s = MakeWeight(format, 40, 96, 1, rng);
    const LinearWeight w = s.View();
    const NextWeights rows = WeightRows(w, 3, 7);
    EXPECT_EQ(rows.begin, w.weight.data() + 3 * row_bytes);
    EXPECT_EQ(rows.end, w.weight.data() + 7 * row_bytes);
    EXPECT_EQ(WeightRows(w, 0, 40).end, w.weight.data() + w.weight.size());
  }
}

// RunLinearJobs over jobs of many sizes (one tile to hundreds, a tiny job beside large ones, so
// units differ in cost and threads finish at different times and take each other's units): every
// output written once, each equal to its product run alone on one thread, on 1 to 4 threads and
// over repetitions (which thread runs which unit varies from run to run).
TEST(LinearTest, JobsOfManySizesRunAsOneRegionLikeEachAlone) {
  std::mt19937 rng(8);
  std::vector<StoredWeight> stored;
  std::vector<int64_t> rows_of;
  for (const auto& [format, out, in, rows] :
       {std::tuple<WeightFormat, int64_t, int64_t, int64_t>{WeightFormat::kFp8Block, 600, 256, 1},
        {WeightFormat::kMxfp4, 32, 64, 1},
        {WeightFormat::kBf16, 1000, 96, 3},
        {WeightFormat::kFp8Block, 5, 1100, 1},
        {WeightFormat::kMxfp4, 333, 128, 2},
        {WeightFormat::kBf16, 64, 40, 9}}) {
    stored.push_back(MakeWeight(format, out, in, 1, rng));
    rows_of.push_back(rows);
  }
  std::vector<LinearWeight> views;  // the jobs point at these
  for (const StoredWeight& s : stored) views.push_back(s.View());
  std::vector<std::vector<float>> inputs, alone;
  for (size_t j = 0; j < stored.size(); ++j) {
    const LinearWeight& w = views[j];
    inputs.push_back(RandomActivations(rows_of[j] * w.in, rng));
    for (float& v : inputs.back()) v = Bf16Round(v);
    alone.emplace_back(static_cast<size_t>(rows_of[j] * w.out));
    RunLinear(w, inputs[j], rows_of[j], alone[j], LinearOptions{.bf16_inputs = true},
              Numerics::kFast, 1);
  }
  for (int threads = 1; threads <= 4; ++threads) {
    OwnedExecContext exec(threads, Numerics::kFast);
    for (int repetition = 0; repetition < 20; ++repetition) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " repetition " +
                   std::to_string(repetition));
      ArenaScope scope(exec.arena);
      std::vector<std::vector<float>> outputs;
      std::vector<LinearJob> jobs;
      for (size_t j = 0; j < stored.size(); ++j) {
        outputs.emplace_back(alone[j].size(), std::numeric_limits<float>::quiet_NaN());
      }
      for (size_t j = 0; j < stored.size(); ++j) {
        jobs.push_back(PrepareLinearJob(views[j], inputs[j], rows_of[j], outputs[j],
                                        LinearOptions{.bf16_inputs = true}, exec.ctx));
      }
      RunLinearJobs(jobs, exec.ctx);
      for (size_t j = 0; j < stored.size(); ++j) {
        for (size_t i = 0; i < alone[j].size(); ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(outputs[j][i]), std::bit_cast<uint32_t>(alone[j][i]))
              << "job " << j << " output " << i;
        }
      }
    }
  }
}

// The fp64 lane sums l[0..15] of the fast kernels (bf16-dot, fp32-FMA) are added by one fixed
// tree: v = l[i] + l[i + 8], then v[i] + v[i + 4], then + [i + 2], then [0] + [1].
float LaneTreeModel(const double* l) {
  double v[8], t[4], u[2];
  for (int i = 0; i < 8; ++i) v[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) t[i] = v[i] + v[i + 4];
  for (int i = 0; i < 2; ++i) u[i] = t[i] + t[i + 2];
  return static_cast<float>(u[0] + u[1]);
}

// The fp32-FMA kernel's order in scalar code, with `lanes` fp32 lanes (the kernel's is 16): per
// chunk of 512 positions, lane l takes position l + k·lanes of each 32-block for k = 0, 1, ...;
// at the chunk's end the lanes go into fp64 lane sums (lane l into sum l mod 16), which
// LaneTreeModel adds. Positions are elements, or for MXFP4 a block's even elements then its odd
// ones. w and x are one expanded weight row and one input row as the kernel sees them.
float FmaOrderModel(const float* w, const float* x, int64_t in, bool mxfp4, int lanes) {
  const int64_t padded = (in + 31) / 32 * 32;
  std::vector<float> wp(padded, 0.0f), xp(padded, 0.0f);
  for (int64_t i = 0; i < in; ++i) {
    const int64_t block = i / 32 * 32, e = i % 32;
    const int64_t pos = mxfp4 ? block + (e % 2) * 16 + e / 2 : i;
    wp[pos] = w[i];
    xp[pos] = x[i];
  }
  double sums[16] = {};
  for (int64_t c = 0; c < padded; c += 512) {
    std::vector<float> acc(lanes, 0.0f);
    for (int64_t b = c; b < std::min(padded, c + 512); b += 32) {
      for (int k = 0; k < 32; ++k) acc[k % lanes] = std::fma(wp[b + k], xp[b + k], acc[k % lanes]);
    }
    for (int l = 0; l < lanes; ++l) sums[l % 16] += acc[l];
  }
  return LaneTreeModel(sums);
}

// The fp32-FMA kernel gives its order's bits on every Highway target (AVX-512, AVX2, the 128-bit
// and scalar ones), for the register tiles and the buffered path: one result per machine, not one
// per vector width. Products are exact here (bf16 or fq8_b32 inputs), as in the model; |x| spreads
// over 2^0..2^20 so that fp32 rounding shows, and the 8-lane order (AVX2's before) must differ
// somewhere, or the input could not tell the orders apart.
TEST(LinearTest, FmaKernelFollowsOneOrderOnEveryTarget) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> exponent(0, 20);
  const int64_t out = 13;  // outputs past the 4-row tiles
  // Two chunks (the first stores its lane sums, the last adds and finishes), and one chunk (both).
  for (const int64_t in : {640, 96}) {
    for (const WeightFormat format :
         {WeightFormat::kBf16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
      SCOPED_TRACE(Name(format) + " in " + std::to_string(in));
      const bool quantize = format != WeightFormat::kBf16;
      const StoredWeight s = MakeWeight(format, out, in, 3, rng);
      const std::vector<float> w = ExpandWeight(s);
      for (const int64_t rows : {1, 2, 3, 5, 50}) {
        SCOPED_TRACE("rows " + std::to_string(rows));
        std::vector<float> x = RandomActivations(rows * in, rng);
        for (float& v : x) v = Bf16Round(std::ldexp(v, exponent(rng)));
        const std::vector<float> xq = ExpandActivations(x, rows, in, quantize);
        std::vector<float> want(rows * out);
        int orders_differ = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            const bool mxfp4 = format == WeightFormat::kMxfp4;
            want[r * out + o] = FmaOrderModel(&w[o * in], &xq[r * in], in, mxfp4, 16);
            orders_differ +=
                want[r * out + o] != FmaOrderModel(&w[o * in], &xq[r * in], in, mxfp4, 8);
          }
        }
        EXPECT_GT(orders_differ, 0) << "the input does not tell 16 lanes from 8";
        const LinearOptions options{.quantize_activations = quantize, .bf16_inputs = !quantize};
        for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
          hwy::SetSupportedTargetsForTest(target);
          SCOPED_TRACE(hwy::TargetName(target));
          std::vector<float> y(rows * out, -7.0f);
          RunLinear(s.View(), x, rows, y, options, Numerics::kFastFma);
          for (int64_t i = 0; i < rows * out; ++i) {
            ASSERT_EQ(y[i], want[i]) << "row " << i / out << " output " << i % out;
          }
        }
        hwy::SetSupportedTargetsForTest(0);
      }
    }
  }
}

// The FP8 register tiles put a block's scale on the input rows (x · 2^(b−7) against the raw
// codes · 2^-120) only where both give the exact product FMA(w · 2^(b−127), x) rounds: the same
// bits as the order's model over the expanded weights, for scale bytes from 0 (subnormal factor)
// to 254 (the two-step path) and inputs from subnormal, tiny and huge magnitudes to
// NaN. Raw fp32 inputs (no quantisation): any value can reach the kernel. On the targets with a
// fused multiply-add (AVX2 and up): the narrower ones (tests only) multiply, then add, so they
// round inexact products (raw fp32 inputs, or products below fp32's normal range) before the sum.
TEST(LinearTest, Fp8TilesScaleTheirInputOnlyWhereExact) {
  std::mt19937 rng(23);
  const int64_t out = 69, in = 320;  // 3 × 10 scale bytes
  const auto same_bits = [](float a, float b) {
    return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
  };
  struct Scales {
    int lo, hi;
  };
  for (const Scales scales : {Scales{0, 12}, Scales{8, 40}, Scales{110, 140}, Scales{130, 254}}) {
    const StoredWeight s =
        MakeWeight(WeightFormat::kFp8Block, out, in, 1, rng, scales.lo, scales.hi);
    const std::vector<float> w = ExpandWeight(s);
    // Input exponents: moderate, tiny (x · 2^(b−7) leaves the normal range), huge (it overflows),
    // and moderate plus one subnormal, one NaN or one huge value in the last row.
    for (const int case_index : {0, 1, 2, 3, 4, 5}) {
      for (const int64_t rows : {1, 2, 3}) {
        SCOPED_TRACE("scale bytes " + std::to_string(scales.lo) + ".." + std::to_string(scales.hi) +
                     ", input case " + std::to_string(case_index) + ", rows " +
                     std::to_string(rows));
        const int low[] = {-20, -125, 90, -20, -20, -20};
        const int high[] = {20, -100, 120, 20, 20, 20};
        std::uniform_int_distribution<int> exponent(low[case_index], high[case_index]);
        std::vector<float> x = RandomActivations(rows * in, rng);
        for (float& v : x) v = std::ldexp(v, exponent(rng));
        float* last = &x[(rows - 1) * in + 7];
        if (case_index == 3) *last = 0x1p-140f;
        if (case_index == 4) *last = std::numeric_limits<float>::quiet_NaN();
        if (case_index == 5) *last = 0x1p125f;
        std::vector<float> want(rows * out);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            want[r * out + o] = FmaOrderModel(&w[o * in], &x[r * in], in, false, 16);
          }
        }
        for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
          if (target > HWY_AVX2) continue;  // no fused multiply-add
          hwy::SetSupportedTargetsForTest(target);
          SCOPED_TRACE(hwy::TargetName(target));
          std::vector<float> y(rows * out, -7.0f);
          RunLinear(s.View(), x, rows, y, LinearOptions{}, Numerics::kFastFma);
          for (int64_t i = 0; i < rows * out; ++i) {
            ASSERT_TRUE(same_bits(y[i], want[i]))
                << "row " << i / out << " output " << i % out << ": " << y[i] << " vs " << want[i];
          }
        }
        hwy::SetSupportedTargetsForTest(0);
      }
    }
  }
}

// The kernels really differ: the accumulation order follows the kernel (fp32-FMA, bf16-dot, plain
// fp32, AMX), so at least two give different bits on a dot product whose fp32 rounding errors
// show. The products cancel exactly: x[512 + i] = −x[i] and
// W[o, 512 + i] = W[o, i], with |x| spread over 2^0..2^20. The exact sum is 0; what each kernel
// returns is the residue of its own rounding order.
TEST(LinearTest, EveryKernelIsExercised) {
  // The input is built for the lane trees of the uncapped kernels (a run under DSV41_SIMD has
  // its capped kernels compared in the other tests).
  if (CurrentSimdCap() != SimdCap::kBest) GTEST_SKIP() << "kernels capped by DSV41_SIMD";
  std::mt19937 rng(5);
  constexpr int64_t kHalf = 512;
  StoredWeight s = MakeWeight(WeightFormat::kBf16, 8, 2 * kHalf, 0, rng);
  for (int64_t o = 0; o < 8; ++o) {
    uint8_t* row = s.weight_buf.data() + 2 * o * 2 * kHalf;
    std::memcpy(row + 2 * kHalf, row, 2 * kHalf);
  }
  std::vector<float> x = RandomActivations(2 * kHalf, rng);
  std::uniform_int_distribution<int> exponent(0, 20);
  for (int64_t i = 0; i < kHalf; ++i) {
    x[i] = Bf16Round(std::ldexp(x[i], exponent(rng)));
    x[kHalf + i] = -x[i];
  }
  std::vector<std::vector<float>> results;
  ForEachKernel([&](Numerics numerics) {
    std::vector<float> y(8);
    RunLinear(s.View(), x, 1, y, LinearOptions{.bf16_inputs = true}, numerics);
    results.push_back(y);
  });
  if (results.size() < 2) GTEST_SKIP() << "one kernel only";
  bool any_differs = false;
  for (const auto& r : results) any_differs |= (r != results[0]);
  EXPECT_TRUE(any_differs);
}

// The bf16-dot kernel's fp64 lane sums l[0..15] are added by LaneTreeModel's tree however many
// outputs and rows a tile finishes at once. One lane holds 2^53, a `partner` lane −2^53 and a
// third lane 1 (a product pair each): whether the 1 survives depends on where the tree meets the
// three, which the model says for every placement.
TEST(LinearTest, Bf16DotLaneSumsFollowTheirTree) {
  if (!CpuHasBf16Dot()) GTEST_SKIP() << "no AVX512-BF16 here (or capped)";
  int ones_lost = 0;
  for (int partner = 1; partner < 16; ++partner) {
    for (int one = 1; one < 16; ++one) {
      if (one == partner) continue;
      double lanes[16] = {};
      lanes[0] = 0x1p53;
      lanes[partner] = -0x1p53;
      lanes[one] = 1.0;
      const float expected = LaneTreeModel(lanes);
      ones_lost += expected == 0.0f;
      const int64_t in = partner == 8 && one == 1 ? 2048 : 32;  // also a sum over two chunks
      for (const int64_t out : {int64_t{8}, int64_t{13}}) {
        for (const int64_t rows : {1, 2, 3, 4, 5}) {
          // Lane q of the last chunk's dots: elements base + 2q and base + 2q + 1.
          const int64_t base = in - 32;
          StoredWeight s;
          s.format = WeightFormat::kBf16;
          s.out = out;
          s.in = in;
          s.weight_bytes = static_cast<size_t>(2 * out * in);
          s.weight_buf.assign(s.weight_bytes, 0);
          std::vector<float> w_row(static_cast<size_t>(in), 0.0f);
          std::vector<float> x(static_cast<size_t>(rows * in), 0.0f);
          w_row[base] = 0x1p27f;                 // 2^27 · 2^26
          w_row[base + 2 * partner] = -0x1p27f;  // −2^27 · 2^26
          w_row[base + 2 * one] = 1.0f;
          for (int64_t o = 0; o < out; ++o) {
            for (int64_t i = 0; i < in; ++i) {
              const uint16_t bits = Bf16FromF32(w_row[i]);
              std::memcpy(s.weight_buf.data() + 2 * (o * in + i), &bits, 2);
            }
          }
          for (int64_t r = 0; r < rows; ++r) {
            x[r * in + base] = 0x1p26f;
            x[r * in + base + 2 * partner] = 0x1p26f;
            x[r * in + base + 2 * one] = 1.0f;
          }
          std::vector<float> y(static_cast<size_t>(rows * out), -1.0f);
          RunLinear(s.View(), x, rows, y, LinearOptions{.bf16_inputs = true},
                    Numerics::kFastBf16Dot);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_EQ(y[i], expected)
                << "lanes 0, " << partner << " (−2^53), " << one << " (1); in " << in << " out "
                << out << " rows " << rows << " at " << i;
          }
        }
      }
    }
  }
  EXPECT_GT(ones_lost, 0) << "no placement tells the tree from another";
}

// The bf16-dot kernel's input packing on the vector unit equals its scalar twin for every
// format, over odd row counts, lengths and source strides (values of every sign and zeros).
TEST(LinearTest, Bf16DotPrepareEqualsItsScalarTwin) {
  if (!CpuHasBf16Dot()) GTEST_SKIP() << "no AVX512-BF16 here (or capped): the scalar twin only";
  std::mt19937 rng(11);
  for (const WeightFormat format :
       {WeightFormat::kBf16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
    for (const int64_t in : {int64_t{1}, int64_t{31}, int64_t{130}, int64_t{700}}) {
      const LinearWeight w{format, 1, in, {}, {}};
      const int64_t stride = linear_internal::Bf16DotStride(w);
      for (const int64_t rows : {int64_t{1}, int64_t{3}}) {
        const int64_t src_stride = stride + 16;
        std::vector<float> x(static_cast<size_t>(rows * src_stride), 0.0f);
        std::vector<float> values = RandomActivations(rows * in, rng);
        for (size_t i = 0; i < values.size(); ++i) {
          values[i] = i % 7 == 3 ? 0.0f : Bf16Round(values[i]);
        }
        for (int64_t r = 0; r < rows; ++r) {
          std::copy_n(values.begin() + r * in, in, x.begin() + r * src_stride);
        }
        std::vector<uint16_t> vec(static_cast<size_t>(rows * stride), 0xDEAD);
        std::vector<uint16_t> scalar(vec.size(), 0xBEEF);
        linear_internal::Bf16DotPrepare(format, x.data(), rows, src_stride, stride, vec.data());
        linear_internal::Bf16DotPrepareScalar(format, x.data(), rows, src_stride, stride,
                                              scalar.data());
        EXPECT_EQ(vec, scalar) << static_cast<int>(format) << " in " << in << " rows " << rows;
      }
    }
  }
}

// The kernel choice follows the numerics mode and the inputs: fp32 weights and fp32 inputs never
// take the bf16 dot product.
// The exponent range the bf16 dot kernel reads off its prepared input (where it may move scales
// exactly) equals its scalar twin's: random words, with ±0, subnormals, infinities and NaNs among
// them, all-zero inputs, and a single non-zero word at every position of a 64-word input.
TEST(LinearTest, Bf16ExponentRangeEqualsItsScalarTwin) {
  if (!CpuHasBf16Dot()) GTEST_SKIP() << "no AVX512-BF16 here (or capped): the scalar twin only";
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> word(0, 0xFFFF);
  const auto check = [](const std::vector<uint16_t>& x, const std::string& what) {
    int low = -1, high = -1, scalar_low = -2, scalar_high = -2;
    linear_internal::Bf16ExponentRange(x.data(), static_cast<int64_t>(x.size()), &low, &high);
    linear_internal::Bf16ExponentRangeScalar(x.data(), static_cast<int64_t>(x.size()), &scalar_low,
                                             &scalar_high);
    EXPECT_EQ(low, scalar_low) << what;
    EXPECT_EQ(high, scalar_high) << what;
  };
  for (const int64_t n : {32, 64, 96, 1024}) {
    std::vector<uint16_t> x(n);
    for (uint16_t& v : x) v = static_cast<uint16_t>(word(rng));
    check(x, "random words, n " + std::to_string(n));
    // Exponent fields 100..140 only, every other word ±0 or subnormal.
    for (int64_t i = 0; i < n; ++i) {
      x[i] = i % 2 ? static_cast<uint16_t>((word(rng) & 0x807F) | (i % 4 == 1 ? 0 : 0x8000))
                   : static_cast<uint16_t>((word(rng) & 0x807F) | ((100 + word(rng) % 41) << 7));
    }
    check(x, "normal and subnormal words, n " + std::to_string(n));
    std::fill(x.begin(), x.end(), uint16_t{0x8000});
    check(x, "all -0, n " + std::to_string(n));
  }
  for (int64_t i = 0; i < 64; ++i) {
    std::vector<uint16_t> x(64, 0);
    x[i] = static_cast<uint16_t>(0x0080 * (1 + i * 3));  // exponent field 1 + 3i (wraps past 255)
    check(x, "one word at " + std::to_string(i));
  }
}

TEST(LinearTest, KernelSelection) {
  const LinearWeight bf16{WeightFormat::kBf16, 1, 1, {}, {}};
  const LinearWeight f32{WeightFormat::kF32, 1, 1, {}, {}};
  const LinearWeight fp8{WeightFormat::kFp8Block, 1, 1, {}, {}};
  EXPECT_EQ(SelectGemmKernel(fp8, {.quantize_activations = true}, Numerics::kReference),
            GemmKernel::kReference);
  EXPECT_EQ(SelectGemmKernel(fp8, {.quantize_activations = true}, Numerics::kFastFma),
            GemmKernel::kFma);
  EXPECT_EQ(SelectGemmKernel(bf16, {.bf16_inputs = true}, Numerics::kPlainFp32),
            GemmKernel::kPlainFp32);
  EXPECT_EQ(SelectGemmKernel(fp8, {.quantize_activations = true}, Numerics::kFastAmx),
            GemmKernel::kAmxBf16);
  EXPECT_EQ(SelectGemmKernel(f32, {.bf16_inputs = true}, Numerics::kFastAmx), GemmKernel::kFma);
  EXPECT_EQ(SelectGemmKernel(bf16, {}, Numerics::kFastBf16Dot), GemmKernel::kFma);
  EXPECT_EQ(SelectGemmKernel(f32, {.bf16_inputs = true}, Numerics::kFastBf16Dot), GemmKernel::kFma);
  const GemmKernel dot = CpuHasBf16Dot() ? GemmKernel::kBf16Dot : GemmKernel::kFma;
  EXPECT_EQ(SelectGemmKernel(bf16, {.bf16_inputs = true}, Numerics::kFastBf16Dot), dot);
  EXPECT_EQ(SelectGemmKernel(fp8, {.quantize_activations = true}, Numerics::kFastBf16Dot), dot);
}

// A forced fast kernel decides what Numerics::kFast selects, process-wide, until reset.
TEST(LinearTest, ForcedFastKernelDecidesWhatFastSelects) {
  const FastKernel before = CurrentFastKernel();
  const LinearWeight fp8{WeightFormat::kFp8Block, 1, 1, {}, {}};
  const LinearOptions quantized{.quantize_activations = true};
  ASSERT_TRUE(ApplyFastKernel(FastKernel::kFma).ok());
  EXPECT_EQ(SelectGemmKernel(fp8, quantized, Numerics::kFast), GemmKernel::kFma);
  const Status dot = ApplyFastKernel(FastKernel::kBf16Dot);
  if (CpuHasBf16DotUnit()) {
    ASSERT_TRUE(dot.ok()) << dot.ToString();
    EXPECT_EQ(SelectGemmKernel(fp8, quantized, Numerics::kFast),
              CpuHasBf16Dot() ? GemmKernel::kBf16Dot : GemmKernel::kFma);  // a SIMD cap narrows it
    const LinearWeight f32{WeightFormat::kF32, 1, 1, {}, {}};
    EXPECT_EQ(SelectGemmKernel(f32, quantized, Numerics::kFast), GemmKernel::kFma);
  } else {
    EXPECT_EQ(dot.code(), StatusCode::kUnimplemented);
    EXPECT_NE(dot.message().find("AVX512-BF16"), std::string::npos) << dot.message();
  }
  EXPECT_FALSE(ParseFastKernel("tpu").ok());
  EXPECT_NE(ParseFastKernel("tpu").status().message().find("'tpu'"), std::string::npos);
  EXPECT_EQ(*ParseFastKernel("amx"), FastKernel::kAmx);
  EXPECT_EQ(*ParseFastKernel("bf16-dot"), FastKernel::kBf16Dot);
  ASSERT_TRUE(ApplyFastKernel(before).ok());
}

// The AMX kernel's packing and loops on the CPU's tiles against the tiles' scalar model (odd
// shapes: partial output and row tiles, K tails, several 512-element runs, unfoldable scale
// bytes): within the fp32 bound of the exact sum like every kernel, and the count of results
// whose bits differ from the model printed (the model follows the SDM's pseudo-code; a hardware
// rounding it does not capture shows there, not as a failure). Where the CPU has no tiles only the
// model runs (every test through ForEachKernel), and this test says so.
TEST(LinearAmxTest, TilesAgreeWithTheModel) {
  if (!CpuHasAmxTiles()) {
    GTEST_SKIP() << "no AMX tiles on this CPU: the AMX kernel ran on the scalar model of the tiles";
  }
  std::mt19937 rng(31);
  size_t num_results = 0, num_differing = 0;
  for (const WeightFormat f :
       {WeightFormat::kBf16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
    for (const auto& [out, in, rows] : {std::tuple<int64_t, int64_t, int64_t>{37, 70, 1},
                                        std::tuple<int64_t, int64_t, int64_t>{64, 1100, 17},
                                        std::tuple<int64_t, int64_t, int64_t>{9, 96, 40}}) {
      const int64_t k = f == WeightFormat::kMxfp4 ? (in + 31) / 32 * 32 : in;
      const bool fp8 = f == WeightFormat::kFp8Block;
      const StoredWeight s = MakeWeight(f, out, k, 0, rng, fp8 ? 5 : 100, fp8 ? 250 : 150);
      const LinearWeight w = s.View();
      std::vector<float> x = RandomActivations(rows * k, rng);
      for (float& v : x) v = Bf16Round(v);
      const bool quantize = f != WeightFormat::kBf16;
      const LinearOptions options{.quantize_activations = quantize, .bf16_inputs = true};
      std::vector<std::byte> storage(LinearInputBytes(w, rows, GemmKernel::kAmxBf16) + 64);
      const size_t skip = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
      const LinearInput input =
          PrepareLinearInput(w, x, rows, options, GemmKernel::kAmxBf16,
                             std::span<std::byte>(storage).subspan(skip, storage.size() - skip));
      std::vector<float> tiles(rows * out), model(rows * out);
      linear_internal::AmxOutputs(w, input, 0, out, tiles.data(), out,
                                  linear_internal::AmxUnit::kHardware);
      linear_internal::AmxOutputs(w, input, 0, out, model.data(), out,
                                  linear_internal::AmxUnit::kEmulated);
      const Expected e = ExpandedProduct(s, x, rows, quantize);
      for (size_t i = 0; i < tiles.size(); ++i) {
        ASSERT_LE(std::fabs(static_cast<double>(tiles[i]) - e.exact[i]),
                  Bound(k, e.abs_sum[i], e.exact[i]))
            << Name(f) << " " << out << "x" << k << " rows " << rows << " index " << i;
        ++num_results;
        num_differing += std::bit_cast<uint32_t>(tiles[i]) != std::bit_cast<uint32_t>(model[i]);
      }
    }
  }
  std::printf("AMX tiles present: %zu of %zu results differ in bits from the tiles' model\n",
              num_differing, num_results);
}

}  // namespace
}  // namespace dsv41

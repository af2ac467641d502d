// The activation quantiser in front of FP8/FP4 weight products (model.md §12.3, trap R5 of
// real-weight-traps.md) as the GEMM kernels run it: rows with an outlier channel 100-1000x the
// others go through Linear on every kernel and target, against an oracle written from the spec.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/exec_context.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/linear.h"

namespace dsv41 {
namespace {

// e4m3fn value of a non-negative code 0x00..0x7E: (8 + m)·2^(e − 10), subnormals m·2^-9.
double E4m3Value(int code) {
  const int e = code >> 3, m = code & 7;
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
}

// fq8_b32 written from §12.2 steps 1-4 in double: amax floored at fp32(1e-4), the scale the least
// power of two >= fp32(amax · fp32(1/448)) (found by doubling and halving), y = x / s clamped to
// ±448, the nearest e4m3 value by search with ties to the even code, times s.
std::vector<float> OracleFq8(const std::vector<float>& x) {
  std::vector<double> grid;
  for (int c = 0; c < 0x7F; ++c) grid.push_back(E4m3Value(c));
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 1e-4f;
    for (size_t j = b; j < b + 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float t = amax * static_cast<float>(1.0 / 448.0);
    double s = 1.0;
    while (s < t) s *= 2;
    while (s / 2 >= t) s /= 2;
    for (size_t j = b; j < b + 32; ++j) {
      const double y = std::min(std::fabs(x[j] / s), 448.0);
      size_t pick = grid.size() - 1;
      for (size_t i = 0; i + 1 < grid.size(); ++i) {
        if (y > grid[i + 1]) continue;
        const double mid = (grid[i] + grid[i + 1]) / 2;
        pick = y < mid ? i : y > mid ? i + 1 : (i % 2 == 0 ? i : i + 1);
        break;
      }
      out[j] = static_cast<float>(std::copysign(grid[pick] * s, x[j]));
    }
  }
  return out;
}

float ToBf16(float x) {  // RNE, finite inputs
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  return std::bit_cast<float>((bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u);
}

// Rows of the released hidden width (5120) of bf16 values ~N(0, σ²), σ in [0.01, 3], with one
// outlier channel of ±1e3..1e4; some rows add a second outlier block or a block of tiny values
// (the 1e-4 amax floor).
std::vector<float> OutlierRows(int64_t rows, int64_t width, size_t outlier_channel) {
  std::mt19937 rng(77);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> magnitude(1e3f, 1e4f), sigma(0.01f, 3.0f);
  std::vector<float> x(static_cast<size_t>(rows * width));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * width;
    const float s = sigma(rng);
    for (int64_t i = 0; i < width; ++i) row[i] = ToBf16(normal(rng) * s);
    row[outlier_channel] = ToBf16((r % 2 ? -1.0f : 1.0f) * magnitude(rng));
    if (r % 4 == 0) row[outlier_channel + 97] = ToBf16(-0.7f * row[outlier_channel]);
    // Block 0 below the floor's reach, 1e-6 down to 1e-10: the floor's scale 2^-22 puts the
    // smaller ones on e4m3 subnormals (a scale from amax alone would keep them normal).
    if (r % 4 == 1) {
      for (int j = 0; j < 32; ++j) row[j] = ToBf16((j % 2 ? -1e-6f : 1e-6f) * std::pow(0.75f, j));
    }
  }
  return x;
}

// An FP8 [out, in] weight whose row o is the unit vector of column columns[o] (e4m3 1.0, every
// tile scale 2^0): y[o] = x'[columns[o]], the quantised activation itself, exactly on every kernel.
struct SelectorWeight {
  std::vector<uint8_t> weight, scale;
  LinearWeight view;
};

SelectorWeight Selector(const std::vector<int64_t>& columns, int64_t in) {
  SelectorWeight s;
  const int64_t out = static_cast<int64_t>(columns.size());
  s.weight.assign(static_cast<size_t>(out * in), 0x00);
  for (int64_t o = 0; o < out; ++o) s.weight[static_cast<size_t>(o * in + columns[o])] = 0x38;
  s.scale.assign(static_cast<size_t>(((out + 31) / 32) * ((in + 31) / 32)), 127);
  s.view = LinearWeight{.format = WeightFormat::kFp8Block,
                        .out = out,
                        .in = in,
                        .weight = std::as_bytes(std::span<const uint8_t>(s.weight)),
                        .scale = std::as_bytes(std::span<const uint8_t>(s.scale))};
  return s;
}

TEST(ActivationQuantKernelTest, OutlierRowsQuantiseLikeTheOracleOnEveryKernel) {
  constexpr int64_t kWidth = 5120;
  constexpr int64_t kRows = 12;
  constexpr size_t kOutlierChannel = 1234;  // block 38
  const std::vector<float> x = OutlierRows(kRows, kWidth, kOutlierChannel);
  const std::vector<float> want = OracleFq8(x);
  // Sanity of the inputs: the outlier block's scale follows the outlier, small values vanish.
  int64_t zeroed = 0;
  for (size_t i = 0; i < x.size(); ++i) zeroed += x[i] != 0.0f && want[i] == 0.0f ? 1 : 0;
  ASSERT_GT(zeroed, 0);

  // Read back the outlier block, its neighbours, the second-outlier block and block 0.
  std::vector<int64_t> columns;
  for (int64_t c = 0; c < 32; ++c) columns.push_back(c);
  for (int64_t c = 32 * 37; c < 32 * 42; ++c) columns.push_back(c);
  columns.push_back(kWidth - 1);
  const SelectorWeight w = Selector(columns, kWidth);
  const LinearOptions options{.quantize_activations = true, .bf16_inputs = true};

  auto check = [&](Numerics numerics, const std::string& what) {
    OwnedExecContext exec(1, numerics);
    std::vector<float> y(static_cast<size_t>(kRows) * columns.size());
    Linear(w.view, x, kRows, y, options, exec.ctx);
    for (int64_t r = 0; r < kRows; ++r) {
      for (size_t o = 0; o < columns.size(); ++o) {
        const size_t i = static_cast<size_t>(r * kWidth + columns[o]);
        // By value: a product sum shows −0 as +0; the prepared rows below keep the sign.
        ASSERT_EQ(y[r * columns.size() + o], want[i])
            << what << " row " << r << " channel " << columns[o] << " x " << x[i];
      }
    }
  };
  check(Numerics::kReference, "reference");
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    check(Numerics::kFastFma, std::string("fp32-fma ") + hwy::TargetName(target));
    if (HasFatalFailure()) break;
  }
  hwy::SetSupportedTargetsForTest(0);
  if (CpuHasBf16Dot()) check(Numerics::kFastBf16Dot, "bf16-dot");

  // The whole prepared row of the fp32 kernel (FP8 keeps the storage order) on every target.
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const size_t bytes = LinearInputBytes(w.view, kRows, GemmKernel::kFma);
    std::vector<std::byte> storage(bytes + 64);
    const size_t pad = (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    const LinearInput prepared = PrepareLinearInput(w.view, x, kRows, options, GemmKernel::kFma,
                                                    std::span(storage).subspan(pad, bytes));
    ASSERT_EQ(prepared.stride, kWidth);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(prepared.f32[i]), std::bit_cast<uint32_t>(want[i]))
          << hwy::TargetName(target) << " element " << i << " x " << x[i];
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace dsv41

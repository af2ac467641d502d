#include "kernels/activation.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

template <class Fn>
void ForEachTarget(const Fn& fn) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// CrExpSimd returns CrExp's bits over a dense sweep of the range that matters (every fp32 value
// in steps through [-110, 95], the subnormal results and the overflow included), every length
// 0..40 and misaligned starts.
TEST(CrExpSimdTest, EqualsCrExpEverywhere) {
  std::vector<float> x;
  for (float v = -110.0f; v < 95.0f; v = std::nextafter(v, 100.0f) + 0.000731f * std::fabs(v)) {
    x.push_back(v);
  }
  x.push_back(0.0f);
  x.push_back(-0.0f);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  ForEachTarget([&] {
    std::vector<float> out(x.size());
    CrExpSimd(x, out);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(Bits(out[i]), Bits(CrExp(x[i]))) << x[i];
    for (size_t n = 0; n <= 40; ++n) {
      for (size_t mis = 0; mis < 3; ++mis) {
        std::vector<float> o(n);
        CrExpSimd(std::span<const float>(x).subspan(1000 + mis, n), o);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(o[i]), Bits(CrExp(x[1000 + mis + i])));
      }
    }
  });
}

// The SwiGLU rows equal the scalar reference bit for bit: random bf16-scale inputs, gates and
// values beyond the clamp, routing weights and the shared expert's weight 1, odd row lengths.
TEST(SwigluRowsTest, SimdEqualsReference) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> value(-14.0f, 14.0f);
  std::uniform_real_distribution<float> weight(0.01f, 1.5f);
  for (int64_t n : {1, 7, 16, 33, 100}) {
    for (float limit : {10.0f, 0.0f}) {
      const int64_t rows = 3;
      std::vector<float> g(rows * n), u(rows * n), w(rows);
      for (float& v : g) v = value(rng);
      for (float& v : u) v = value(rng);
      for (float& v : w) v = weight(rng);
      SCOPED_TRACE("n " + std::to_string(n) + " limit " + std::to_string(limit));
      for (const bool weighted : {true, false}) {
        std::vector<float> want = g;
        SwigluRowsRef(want, u, rows, n,
                      weighted ? std::span<const float>(w) : std::span<const float>(), limit);
        ForEachTarget([&] {
          std::vector<float> got = g;
          SwigluRowsSimd(got, u, rows, n,
                         weighted ? std::span<const float>(w) : std::span<const float>(), limit);
          for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(Bits(got[i]), Bits(want[i])) << i;
        });
      }
    }
  }
}

}  // namespace
}  // namespace dsv41

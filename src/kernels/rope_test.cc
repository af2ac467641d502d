#include "kernels/rope.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// Every pair count 1..40 (past 2×lanes+1 on every x86 target), heads with and without leading
// dims, rows and angles misaligned by one float, values over a wide magnitude range, both
// directions: the SIMD form returns the reference's bits on every target.
TEST(RopeRotateRowsTest, SimdEqualsReference) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-40, 40);
  std::uniform_real_distribution<float> angle(-3000.0f, 3000.0f);
  const int64_t rows = 3;
  const int64_t heads = 2;
  for (size_t half = 1; half <= 40; ++half) {
    for (size_t lead : {0u, 3u}) {
      for (size_t offset : {0u, 1u}) {
        for (bool inverse : {false, true}) {
          const size_t head_dim = lead + 2 * half;
          std::vector<float> x_buf(offset + rows * heads * head_dim);
          std::vector<float> cos_buf(offset + rows * half);
          std::vector<float> sin_buf(offset + rows * half);
          for (float& v : x_buf) v = Bf16Round(std::ldexp(mant(rng), exp(rng)));
          for (size_t i = 0; i < cos_buf.size(); ++i) {
            cos_buf[i] = CrCos(angle(rng));
            sin_buf[i] = CrSin(angle(rng));
          }
          const std::span<const float> cos(cos_buf.data() + offset, rows * half);
          const std::span<const float> sin(sin_buf.data() + offset, rows * half);
          std::vector<float> want(x_buf.begin() + offset, x_buf.end());
          RopeRotateRowsRef(want, rows, heads, cos, sin, inverse);
          SCOPED_TRACE("half " + std::to_string(half) + " lead " + std::to_string(lead) +
                       " offset " + std::to_string(offset) + " inverse " + std::to_string(inverse));
          for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
            hwy::SetSupportedTargetsForTest(target);
            std::vector<float> got_buf = x_buf;
            const std::span<float> got(got_buf.data() + offset, want.size());
            RopeRotateRowsSimd(got, rows, heads, cos, sin, inverse);
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                  << hwy::TargetName(target) << " index " << i;
            }
          }
          hwy::SetSupportedTargetsForTest(0);
        }
      }
    }
  }
}

// The reference is the spec's pair rule: the leading dims stay, each product is rounded on its
// own (a fused a·c − b·s would differ), the inverse negates sin, and zero rows are allowed.
TEST(RopeRotateRowsTest, ReferenceFollowsThePairRule) {
  std::vector<float> x = {7.0f, 1.5f, -2.25f};
  const std::vector<float> c = {0.6f};
  const std::vector<float> s = {0.8f};
  RopeRotateRowsRef(x, 1, 1, c, s, /*inverse=*/false);
  EXPECT_EQ(x[0], 7.0f);
  const float a = 1.5f, b = -2.25f;
  EXPECT_EQ(x[1], Bf16Round(a * 0.6f - b * 0.8f));
  EXPECT_EQ(x[2], Bf16Round(a * 0.8f + b * 0.6f));
  std::vector<float> y = {1.5f, -2.25f};
  RopeRotateRowsRef(y, 1, 1, c, s, /*inverse=*/true);
  EXPECT_EQ(y[0], Bf16Round(a * 0.6f - b * -0.8f));
  EXPECT_EQ(y[1], Bf16Round(a * -0.8f + b * 0.6f));
  std::vector<float> none;
  RopeRotateRowsSimd(none, 0, 4, {}, {}, false);
}

}  // namespace
}  // namespace dsv41

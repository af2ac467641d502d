#include "kernels/sinkhorn.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "numerics/arith.h"

namespace dsv41 {
namespace {

// Every matrix size 1..8, matrix counts 0..19 (full and partial lane groups), a span misaligned by
// one float, logits over a wide range (rows whose softmax underflows, tied maxima), several
// iteration counts and eps: the SIMD form returns the reference's bits on every target.
TEST(SinkhornKernelTest, SimdEqualsReference) {
  std::mt19937 rng(20);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-12, 7);
  for (int32_t n = 1; n <= kSinkhornMaxN; ++n) {
    for (size_t count = 0; count < 20; ++count) {
      for (const auto& [iters, eps] :
           {std::pair{1, 0.0f}, std::pair{20, 1e-6f}, std::pair{3, 0.25f}}) {
        const size_t nn = static_cast<size_t>(n) * n;
        std::vector<float> buf(1 + count * nn);
        for (float& v : buf) v = std::ldexp(mant(rng), exp(rng));
        if (count > 1 && n > 1) buf[1 + nn + 1] = buf[1 + nn];  // a tied row maximum
        std::vector<float> want(buf.begin() + 1, buf.end());
        SinkhornRef(want, n, iters, eps);
        SCOPED_TRACE("n " + std::to_string(n) + " count " + std::to_string(count) + " iters " +
                     std::to_string(iters));
        for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
          hwy::SetSupportedTargetsForTest(target);
          std::vector<float> got_buf = buf;
          const std::span<float> got(got_buf.data() + 1, want.size());
          SinkhornSimd(got, n, iters, eps);
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                << hwy::TargetName(target) << " value " << i;
          }
        }
        hwy::SetSupportedTargetsForTest(0);
      }
    }
  }
}

// With many iterations the matrices become doubly stochastic (rows and columns sum to ~1).
TEST(SinkhornKernelTest, ReferenceConverges) {
  std::vector<float> c = {0.3f, -1.0f, 2.0f, 0.0f, 0.5f, 0.5f, -3.0f, 1.0f, 0.25f};
  SinkhornRef(c, 3, 60, 0.0f);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(c[i * 3] + c[i * 3 + 1] + c[i * 3 + 2], 1.0f, 1e-5f);
    EXPECT_NEAR(c[i] + c[3 + i] + c[6 + i], 1.0f, 1e-5f);
  }
}

}  // namespace
}  // namespace dsv41

#include "kernels/engram_gate.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// Gate dots and gated adds over 1..300 values (the terms' two fp32 roundings, a cancelling
// second half included) equal the references bit for bit on every Highway target.
TEST(EngramGateTest, SimdEqualsReference) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (size_t n = 1; n <= 300; n += (n < 40 ? 1 : 37)) {
    std::vector<float> h(n), w(n), k(n), v(n);
    for (float& x : h) x = Bf16Round(value(rng));
    for (float& x : w) x = value(rng);
    for (float& x : k) x = Bf16Round(value(rng));
    for (float& x : v) x = Bf16Round(value(rng));
    for (size_t d = n / 2; d < n && n > 3; ++d) {  // the second half cancels the first
      h[d] = h[d - n / 2];
      w[d] = w[d - n / 2];
      k[d] = -k[d - n / 2];
    }
    const float want = EngramGateDotRef(h, w, k);
    std::vector<float> added = h;
    AddGatedRef(added, 0.37f, v);
    SCOPED_TRACE("n " + std::to_string(n));
    for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      std::vector<float> scratch(n);
      const float got = EngramGateDotSimd(h, w, k, scratch);
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << hwy::TargetName(target);
      std::vector<float> simd = h;
      AddGatedSimd(simd, 0.37f, v);
      ASSERT_EQ(std::memcmp(simd.data(), added.data(), 4 * n), 0) << hwy::TargetName(target);
    }
    hwy::SetSupportedTargetsForTest(0);
  }
}

}  // namespace
}  // namespace dsv41

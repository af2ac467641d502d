#include "kernels/stream_mix.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

// hc_pre and hc_post over 1..8 streams of 1..70 values and the released 4 × 5120 (in place for
// hc_post), with mixing weights that make the sequential fp32 order matter: the SIMD forms return
// the references' bits on every Highway target.
TEST(StreamMixTest, SimdEqualsReference) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  std::vector<size_t> dims;
  for (size_t dim = 1; dim <= 70; dim += (dim < 20 ? 1 : 13)) dims.push_back(dim);
  dims.push_back(5120);
  for (size_t hc : {1u, 2u, 4u, 8u}) {
    for (const size_t dim : dims) {
      std::vector<float> x(hc * dim), pi(hc), y(dim), comb(hc * hc), post(hc);
      for (float& v : x) v = Bf16Round(value(rng));
      for (float& v : y) v = Bf16Round(value(rng) * 100.0f);
      for (float& v : pi) v = value(rng) * 0.37f;
      for (float& v : comb) v = value(rng) * 0.71f;
      for (float& v : post) v = value(rng) * 0.59f;
      std::vector<float> pre_want(dim), post_want(x.size());
      HcPreRef(x, pi, pre_want);
      HcPostRef(y, x, comb, post, post_want);
      SCOPED_TRACE("hc " + std::to_string(hc) + " dim " + std::to_string(dim));
      for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        std::vector<float> pre_got(dim, -1.0f), post_got = x;
        HcPreSimd(x, pi, pre_got);
        HcPostSimd(y, post_got, comb, post, post_got);  // in place
        ASSERT_TRUE(SameBits(pre_got, pre_want)) << hwy::TargetName(target);
        ASSERT_TRUE(SameBits(post_got, post_want)) << hwy::TargetName(target);
      }
      hwy::SetSupportedTargetsForTest(0);
    }
  }
}

}  // namespace
}  // namespace dsv41

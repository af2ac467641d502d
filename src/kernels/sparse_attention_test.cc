#include "kernels/sparse_attention.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// The SIMD form equals the scalar reference bit for bit, with the exact and with the fp32 sums:
// head sizes 1..130 (odd and beyond the vector widths) and the released 512, 1..200 keys (one to
// four 64-key blocks, partial last blocks) and the released window plus top-k (128 + 512), bf16
// queries and e4m3-like keys at several scales, sinks above and below the scores, on every Highway
// target.
TEST(SinkAttentionTest, SimdEqualsReference) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (size_t dim : {1u, 7u, 16u, 64u, 130u, 512u}) {
    for (size_t num_keys : {1u, 5u, 64u, 65u, 128u, 200u, 640u}) {
      for (float sink : {-3.0f, 0.5f, 8.0f}) {
        std::vector<float> q(dim);
        for (float& v : q) v = Bf16Round(4.0f * value(rng));
        std::vector<std::vector<float>> storage(num_keys, std::vector<float>(dim));
        std::vector<const float*> keys(num_keys);
        for (size_t k = 0; k < num_keys; ++k) {
          for (float& v : storage[k]) v = Bf16Round(value(rng) * (k % 3 == 0 ? 8.0f : 0.5f));
          keys[k] = storage[k].data();
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        for (const AttentionSums sums : {AttentionSums::kExact, AttentionSums::kFp32}) {
          std::vector<float> want(dim);
          SinkAttentionRef(q, keys, sink, scale, want, sums);
          SCOPED_TRACE("dim " + std::to_string(dim) + " keys " + std::to_string(num_keys) +
                       " sink " + std::to_string(sink) +
                       (sums == AttentionSums::kFp32 ? " fp32 sums" : " exact sums"));
          for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
            hwy::SetSupportedTargetsForTest(target);
            std::vector<float> got(dim, -7.0f);
            SinkAttention(q, keys, sink, scale, got, sums);
            for (size_t d = 0; d < dim; ++d) {
              ASSERT_EQ(std::bit_cast<uint32_t>(got[d]), std::bit_cast<uint32_t>(want[d]))
                  << hwy::TargetName(target) << " dim " << d;
            }
          }
          hwy::SetSupportedTargetsForTest(0);
        }
      }
    }
  }
}

TEST(SinkAttentionTest, NoKeysGiveZeros) {
  const std::vector<float> q(8, 1.0f);
  std::vector<float> out(8, 3.0f);
  SinkAttention(q, {}, 0.0f, 1.0f, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace dsv41

#include "kernels/indexer_topk.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The scores follow step 3 term by term: a negative dot contributes nothing, each weighted term
// is rounded to bf16 before the (exact) head sum.
TEST(IndexerScoresTest, ReferenceFollowsStep3) {
  const std::vector<float> q = {1.0f, 2.0f, /*head 1*/ -1.0f, 0.0f};
  const std::vector<float> w = {0.3f, 5.0f};
  const std::vector<float> keys = {0.5f, 0.25f};  // dots: 1.0, −0.5
  std::vector<float> score(1);
  IndexerScoresRef(q, w, keys, score);
  EXPECT_EQ(score[0], Bf16Round(Bf16Round(0.3f)));
}

// Score vectors drawn from a few values (many ties, ±0, −inf, +inf), every size 0..150, k from 0
// to past n, misaligned spans: the selection returns the reference's list on every target.
TEST(TopKAscendingKernelTest, SimdEqualsReference) {
  std::mt19937 rng(512);
  const std::vector<float> alphabet = {-kInf, -3.0f, -0.0f, 0.0f, 0.5f, 1.0f, 1e30f, kInf};
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::uniform_real_distribution<float> wide(-1e6f, 1e6f);
  for (size_t n = 0; n <= 150; ++n) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> buf(n + 1);
      for (float& v : buf) {
        // kind 0: ties everywhere; 1: distinct values; 2: mostly −inf (a filtered row).
        v = kind == 0   ? alphabet[pick(rng)]
            : kind == 1 ? wide(rng)
                        : (pick(rng) < 6 ? -kInf : alphabet[pick(rng)]);
      }
      const std::span<const float> scores(buf.data() + 1, n);  // misaligned by one float
      for (const int32_t k : {-1, 0, 1, 2, 3, 7, 8, 9, 16, 17, 33, static_cast<int32_t>(n) - 1,
                              static_cast<int32_t>(n), static_cast<int32_t>(n) + 5}) {
        std::vector<int32_t> scratch(n), want(n + 1);
        const int32_t want_count = TopKAscendingRef(scores, k, scratch, want);
        want.resize(want_count);
        SCOPED_TRACE("n " + std::to_string(n) + " kind " + std::to_string(kind) + " k " +
                     std::to_string(k));
        EXPECT_EQ(want_count, std::clamp(k, 0, static_cast<int32_t>(n)));
        for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
          hwy::SetSupportedTargetsForTest(target);
          std::vector<int32_t> got(n + 1, -7);
          std::vector<int32_t> simd_scratch(n);
          const int32_t got_count = TopKAscendingSimd(scores, k, simd_scratch, got);
          ASSERT_EQ(got_count, want_count) << hwy::TargetName(target);
          got.resize(got_count);
          ASSERT_EQ(got, want) << hwy::TargetName(target);
        }
        hwy::SetSupportedTargetsForTest(0);
      }
    }
  }
}

TEST(TopKAscendingKernelTest, TiesGoToTheLowerIndexAndZerosTie) {
  const std::vector<float> s = {0.0f, 2.0f, -0.0f, 2.0f, 0.0f, -kInf};
  std::vector<int32_t> scratch(s.size()), out(s.size());
  ASSERT_EQ(TopKAscendingSimd(s, 3, scratch, out), 3);
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 3), (std::vector<int32_t>{0, 1, 3}));
  ASSERT_EQ(TopKAscendingSimd(s, 4, scratch, out), 4);
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + 4), (std::vector<int32_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace dsv41

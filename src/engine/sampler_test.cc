#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "engine/sampling_params.h"

namespace dsv41 {
namespace {

constexpr uint64_t kSeed = 1234;
constexpr int kDraws = 2000;

SampledToken Sample(const std::vector<float>& logits, const SamplingParams& params,
                    int64_t position, uint64_t seed = kSeed) {
  SamplerScratch scratch;
  return SampleToken(logits, params, seed, position, {}, {}, scratch);
}

// The ids drawn over positions 0..kDraws-1.
std::set<int32_t> DrawnIds(const std::vector<float>& logits, const SamplingParams& params) {
  SamplerScratch scratch;
  std::set<int32_t> ids;
  for (int64_t pos = 0; pos < kDraws; ++pos) {
    ids.insert(SampleToken(logits, params, kSeed, pos, {}, {}, scratch).token_id);
  }
  return ids;
}

// Logits whose softmax is {0.1, 0.2, 0.3, 0.4}.
std::vector<float> QuarterLogits() {
  return {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
}

TEST(SamplerTest, GreedyTakesArgmaxLowestIdOnTies) {
  SamplingParams params;
  params.temperature = 0.0f;
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  for (int64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(Sample(logits, params, pos).token_id, 1);
  params.temperature = kGreedyTemperature;
  EXPECT_EQ(Sample({-5.0f, -1.0f, -2.0f, -1.0f}, params, 7).token_id, 1);
}

TEST(SamplerTest, UniformIsDeterministicInRangeAndVariesWithPosition) {
  std::set<double> values;
  double sum = 0.0;
  for (int64_t pos = 0; pos < kDraws; ++pos) {
    const double u = SamplerUniform(kSeed, pos);
    EXPECT_EQ(u, SamplerUniform(kSeed, pos));
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    values.insert(u);
    sum += u;
  }
  EXPECT_EQ(values.size(), static_cast<size_t>(kDraws));
  EXPECT_NEAR(sum / kDraws, 0.5, 0.05);  // 0.5 ± 7.7 sigma (sigma = 1/sqrt(12 * 2000))
  EXPECT_NE(SamplerUniform(1, 5), SamplerUniform(2, 5));
  EXPECT_NE(SamplerUniform(5, 1), SamplerUniform(1, 5));
}

TEST(SamplerTest, DrawIsInverseCdfInAscendingIdOrder) {
  // Temperature 0.5 turns {1/3, 2/3} into {1/5, 4/5}: token 0 exactly when u < 0.2.
  const std::vector<float> logits = {0.0f, std::log(2.0f)};
  SamplingParams params;
  params.temperature = 0.5f;
  int zeros = 0;
  for (int64_t pos = 0; pos < kDraws; ++pos) {
    const double u = SamplerUniform(kSeed, pos);
    if (std::fabs(u - 0.2) < 1e-6) continue;
    const int32_t token = Sample(logits, params, pos).token_id;
    EXPECT_EQ(token, u < 0.2 ? 0 : 1) << "pos " << pos << " u " << u;
    zeros += token == 0;
  }
  EXPECT_GT(zeros, 0);
}

TEST(SamplerTest, TopKKeepsTheKHighestAndRenormalises) {
  // top_k 3 keeps {1, 2, 3} with {2/9, 3/9, 4/9}: token 1 when u < 2/9, 2 when u < 5/9, else 3.
  SamplingParams params;
  params.top_k = 3;
  std::set<int32_t> seen;
  for (int64_t pos = 0; pos < kDraws; ++pos) {
    const double u = SamplerUniform(kSeed, pos);
    if (std::fabs(u - 2.0 / 9) < 1e-6 || std::fabs(u - 5.0 / 9) < 1e-6) continue;
    const int32_t token = Sample(QuarterLogits(), params, pos).token_id;
    EXPECT_EQ(token, u < 2.0 / 9 ? 1 : (u < 5.0 / 9 ? 2 : 3)) << "pos " << pos << " u " << u;
    seen.insert(token);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{1, 2, 3}));
}

TEST(SamplerTest, TopKTiesGoToTheLowerId) {
  SamplingParams params;
  params.top_k = 2;
  EXPECT_EQ(DrawnIds({1.0f, 2.0f, 2.0f, 2.0f, 0.0f}, params), (std::set<int32_t>{1, 2}));
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams params;
  params.top_p = 0.5f;  // 0.4 < 0.5 <= 0.4 + 0.3
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{2, 3}));
  params.top_p = 0.35f;  // 0.4 alone reaches it
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{3}));
  params.top_p = 0.95f;  // 0.4 + 0.3 + 0.2 = 0.9 < 0.95
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{0, 1, 2, 3}));
  // Four equal tokens: 0.4 needs two of them, the lower ids.
  params.top_p = 0.4f;
  EXPECT_EQ(DrawnIds({0.0f, 0.0f, 0.0f, 0.0f}, params), (std::set<int32_t>{0, 1}));
}

TEST(SamplerTest, TopPAppliesAfterTopK) {
  // top_k 2 leaves {0.3, 0.4} -> {3/7, 4/7}; top_p 0.6 then needs both (4/7 = 0.571 < 0.6).
  SamplingParams params;
  params.top_k = 2;
  params.top_p = 0.6f;
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{2, 3}));
  params.top_p = 0.55f;  // 4/7 reaches it alone
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{3}));
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  SamplingParams params;
  params.min_p = 0.6f;  // threshold 0.24: 0.1 and 0.2 go
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{2, 3}));
  params.min_p = 0.4f;  // threshold 0.16: 0.1 goes
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{1, 2, 3}));
  params.min_p = 1.0f;  // only the maximum
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{3}));
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  SamplingParams params;
  params.temperature = 2.0f;
  EXPECT_EQ(DrawnIds(QuarterLogits(), params), (std::set<int32_t>{0, 1, 2, 3}));
  // A token of probability 1 - 2e-13 is always drawn.
  params.temperature = 1.0f;
  EXPECT_EQ(DrawnIds({0.0f, 30.0f, 0.0f}, params), (std::set<int32_t>{1}));
  // Temperature 0.01 turns a gap of 1 into 100.
  params.temperature = 0.01f;
  EXPECT_EQ(DrawnIds({1.0f, 2.0f, 0.0f}, params), (std::set<int32_t>{1}));
}

TEST(SamplerTest, SameSeedAndPositionGiveTheSameTokenWhateverElse) {
  const std::vector<float> logits = {0.5f, 0.1f, 0.9f, 0.3f, 0.7f, 0.2f};
  SamplingParams params;
  params.top_k = 5;
  params.logprobs = 3;
  params.repetition_penalty = 1.3f;
  const std::vector<int32_t> prompt = {0, 2};
  const std::vector<int32_t> output = {4};
  SamplerScratch fresh_scratch;
  SamplerScratch dirty;
  // Dirty the scratch with a larger vocabulary, other params and other history.
  SamplingParams other;
  other.top_p = 0.3f;
  other.frequency_penalty = 1.0f;
  const std::vector<float> big(50, 0.25f);
  const std::vector<int32_t> big_history = {7, 49, 7};
  (void)SampleToken(big, other, 99, 3, big_history, big_history, dirty);
  std::set<int32_t> tokens;
  for (int64_t pos = 100; pos < 300; ++pos) {
    SamplerScratch fresh;
    const SampledToken a = SampleToken(logits, params, kSeed, pos, prompt, output, fresh);
    const SampledToken b = SampleToken(logits, params, kSeed, pos, prompt, output, dirty);
    const SampledToken c = SampleToken(logits, params, kSeed, pos, prompt, output, fresh_scratch);
    EXPECT_EQ(a.token_id, b.token_id);
    EXPECT_EQ(a.token_id, c.token_id);
    EXPECT_EQ(a.logprob, b.logprob);
    ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size());
    for (size_t i = 0; i < a.top_logprobs.size(); ++i) {
      EXPECT_EQ(a.top_logprobs[i].token_id, b.top_logprobs[i].token_id);
      EXPECT_EQ(a.top_logprobs[i].logprob, b.top_logprobs[i].logprob);
    }
    tokens.insert(a.token_id);
  }
  EXPECT_GE(tokens.size(), 3u) << "different positions should draw different tokens";
  // Another seed changes some draws.
  int differ = 0;
  for (int64_t pos = 0; pos < 200; ++pos) {
    differ += Sample(logits, params, pos, 1).token_id != Sample(logits, params, pos, 2).token_id;
  }
  EXPECT_GT(differ, 0);
}

TEST(SamplerTest, PenaltiesFollowTheFormulas) {
  // prompt {0}, output {1, 1, 2}; repetition 2, frequency 0.5, presence 0.25, by hand:
  //   id 0: 2 / 2 = 1;  id 1: -1 * 2 - 0.5 * 2 - 0.25 = -3.25;
  //   id 2: 0.5 / 2 - 0.5 * 1 - 0.25 = -0.5;  id 3: untouched 1.
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 1.0f};
  const std::vector<int32_t> prompt = {0};
  const std::vector<int32_t> output = {1, 1, 2};
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  params.logprobs = 4;
  SamplerScratch scratch;
  const SampledToken t = SampleToken(logits, params, kSeed, 0, prompt, output, scratch);
  const double penalised[4] = {1.0, -3.25, -0.5, 1.0};
  double sum = 0.0;
  for (double x : penalised) sum += std::exp(x);
  const double lse = std::log(sum);
  EXPECT_EQ(t.token_id, 0);  // 0 and 3 tie at 1: the lower id
  EXPECT_NEAR(t.logprob, 1.0 - lse, 1e-6);
  ASSERT_EQ(t.top_logprobs.size(), 4u);
  const int32_t order[4] = {0, 3, 2, 1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(t.top_logprobs[i].token_id, order[i]);
    EXPECT_NEAR(t.top_logprobs[i].logprob, penalised[order[i]] - lse, 1e-6) << "id " << order[i];
  }
}

TEST(SamplerTest, RepetitionPenaltyBelowOneRaisesSeenTokens) {
  // repetition 0.5 on a seen negative logit: -2 * 0.5 = -1; on a seen positive: 1 / 0.5 = 2.
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 0.5f;
  params.logprobs = 3;
  const std::vector<int32_t> output = {0, 1};
  const std::vector<float> logits = {-2.0f, 1.0f, 1.5f};
  SamplerScratch scratch;
  const SampledToken t = SampleToken(logits, params, kSeed, 0, {}, output, scratch);
  const double lse = std::log(std::exp(-1.0) + std::exp(2.0) + std::exp(1.5));
  EXPECT_EQ(t.token_id, 1);
  EXPECT_NEAR(t.logprob, 2.0 - lse, 1e-6);
  EXPECT_NEAR(t.top_logprobs[2].logprob, -1.0 - lse, 1e-6);
}

TEST(SamplerTest, LogprobsAreANormalisedSortedLogSoftmaxBeforeTemperature) {
  const std::vector<float> logits = {0.3f, -1.2f, 2.5f, 0.3f, 1.1f, -0.4f, 0.0f, 2.5f};
  SamplingParams params;
  params.temperature = 0.5f;
  params.logprobs = 8;
  for (int64_t pos = 0; pos < 20; ++pos) {
    const SampledToken t = Sample(logits, params, pos);
    ASSERT_EQ(t.top_logprobs.size(), 8u);
    double mass = 0.0;
    for (size_t i = 0; i < t.top_logprobs.size(); ++i) {
      mass += std::exp(static_cast<double>(t.top_logprobs[i].logprob));
      if (i > 0) {
        const TokenLogprob& prev = t.top_logprobs[i - 1];
        const TokenLogprob& cur = t.top_logprobs[i];
        EXPECT_TRUE(prev.logprob > cur.logprob ||
                    (prev.logprob == cur.logprob && prev.token_id < cur.token_id));
      }
      if (t.top_logprobs[i].token_id == t.token_id) {
        EXPECT_EQ(t.top_logprobs[i].logprob, t.logprob);
      }
    }
    EXPECT_NEAR(mass, 1.0, 1e-6);
    EXPECT_EQ(t.top_logprobs[0].token_id, 2);  // 2 and 7 tie: the lower id first
    EXPECT_EQ(t.top_logprobs[1].token_id, 7);
  }
  // Fewer requested: the head of the same list; the chosen token's logprob comes regardless.
  params.logprobs = 2;
  params.temperature = 0.0f;
  const SampledToken t = Sample(logits, params, 0);
  ASSERT_EQ(t.top_logprobs.size(), 2u);
  EXPECT_EQ(t.top_logprobs[1].token_id, 7);
  params.logprobs = 0;
  const SampledToken none = Sample({0.0f, std::log(3.0f)}, params, 0);
  EXPECT_TRUE(none.top_logprobs.empty());
  EXPECT_EQ(none.token_id, 1);
  EXPECT_NEAR(none.logprob, std::log(0.75), 1e-6);
}

}  // namespace
}  // namespace dsv41

#include "engine/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace dsv41 {
namespace {

using Ids = std::vector<int32_t>;

TEST(SpeculativeTest, MethodNamesRoundTrip) {
  for (SpeculativeMethod m :
       {SpeculativeMethod::kOff, SpeculativeMethod::kDspark, SpeculativeMethod::kNgram}) {
    Result<SpeculativeMethod> parsed = ParseSpeculativeMethod(SpeculativeMethodName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  Result<SpeculativeMethod> bad = ParseSpeculativeMethod("eagle");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'eagle'"), std::string::npos);
}

TEST(SpeculativeTest, OptionsOutsideTheirRangesAreRefusedNamingTheFlag) {
  SpeculativeOptions o;
  o.method = SpeculativeMethod::kDspark;
  o.num_speculative_tokens = 5;
  EXPECT_TRUE(ValidateSpeculativeOptions(o, 5).ok());
  o.num_speculative_tokens = 6;  // more than the draft block
  EXPECT_NE(ValidateSpeculativeOptions(o, 5).message().find("--num-speculative-tokens 6"),
            std::string::npos);
  o.num_speculative_tokens = 0;
  EXPECT_FALSE(ValidateSpeculativeOptions(o, 5).ok());
  o.method = SpeculativeMethod::kNgram;
  o.num_speculative_tokens = kMaxNgramSpeculativeTokens;
  EXPECT_TRUE(ValidateSpeculativeOptions(o, 5).ok());
  o.prompt_lookup_min = 3;
  o.prompt_lookup_max = 2;
  EXPECT_NE(ValidateSpeculativeOptions(o, 5).message().find("--prompt-lookup-min"),
            std::string::npos);
  o.prompt_lookup_max = 3;
  o.min_acceptance = 1.5;
  EXPECT_NE(ValidateSpeculativeOptions(o, 5).message().find("--speculative-min-acceptance"),
            std::string::npos);
  o.min_acceptance = std::nan("");
  EXPECT_FALSE(ValidateSpeculativeOptions(o, 5).ok());
  o.min_acceptance = 0.5;
  o.confidence_threshold = -0.1;
  EXPECT_NE(ValidateSpeculativeOptions(o, 5).message().find("--speculative-confidence"),
            std::string::npos);
  o.confidence_threshold = 0.0;
  o.guard_min_pause_steps = 0;
  EXPECT_NE(ValidateSpeculativeOptions(o, 5).message().find("guard pauses"), std::string::npos);
  o.guard_min_pause_steps = 128;
  o.guard_initial_pause_steps = -1;
  EXPECT_FALSE(ValidateSpeculativeOptions(o, 5).ok());
  o.method = SpeculativeMethod::kOff;  // nothing is checked when off
  EXPECT_TRUE(ValidateSpeculativeOptions(o, 5).ok());
}

// The examples of vLLM's NgramProposer docstring and the rules it states: the longest suffix
// n-gram in [min, max] wins, at its earliest occurrence, the continuation cut at the history end.
TEST(SpeculativeTest, NgramProposesTheContinuationOfTheLongestEarliestMatch) {
  // [1,2,3,4,2,3], min 2, max 3, k 4: [4,2,3] has no earlier match, [2,3] matches at 1 → [4,2,3].
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 3, 4, 2, 3}, 2, 3, 4), (Ids{4, 2, 3}));
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 3, 4, 2, 3}, 2, 3, 2), (Ids{4, 2}));
  // Earliest occurrence: [5,6] occurs at 0 and at 3; the proposal follows the first.
  EXPECT_EQ(ProposeNgram(Ids{5, 6, 7, 5, 6, 8, 5, 6}, 2, 2, 1), (Ids{7}));
  // Longest first: the 3-gram [3,1,9] (at 3) beats the earlier 2-gram [1,9] (at 0).
  EXPECT_EQ(ProposeNgram(Ids{1, 9, 5, 3, 1, 9, 4, 2, 3, 1, 9}, 2, 3, 2), (Ids{4, 2}));
  EXPECT_EQ(ProposeNgram(Ids{1, 9, 5, 3, 1, 9, 4, 2, 3, 1, 9}, 2, 2, 2), (Ids{5, 3}));
  // Overlapping matches repeat a run; min_n bounds the match from below.
  EXPECT_EQ(ProposeNgram(Ids{7, 7, 7, 7}, 1, 3, 3), (Ids{7}));
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 3, 1}, 2, 3, 3), Ids{});
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 3, 1}, 1, 3, 3), (Ids{2, 3, 1}));
  EXPECT_EQ(ProposeNgram(Ids{1}, 1, 3, 3), Ids{});
  EXPECT_EQ(ProposeNgram(Ids{}, 1, 3, 3), Ids{});
  EXPECT_EQ(ProposeNgram(Ids{1, 2, 1, 2}, 1, 2, 0), Ids{});
}

TEST(SpeculativeTest, ContinuationDrafterProposesTheKnownTokensOnly) {
  const DraftFn drafter = ContinuationDrafter({{1, 2}, {3}}, {{7, 8, 9}, {4, 5}});
  auto propose = [&](const Ids& history, int32_t max_tokens) {
    Ids drafts;
    drafter(history, max_tokens, drafts);
    return drafts;
  };
  EXPECT_EQ(propose({1, 2}, 2), (Ids{7, 8}));
  EXPECT_EQ(propose({1, 2, 7}, 5), (Ids{8, 9}));
  EXPECT_EQ(propose({1, 2, 7, 8, 9}, 5), Ids{});
  EXPECT_EQ(propose({1, 2, 6}, 5), Ids{});  // off the known path
  EXPECT_EQ(propose({3, 4}, 1), (Ids{5}));
  EXPECT_EQ(propose({2}, 3), Ids{});
}

TEST(SpeculativeTest, GuardOffNeverPauses) {
  DraftGuard guard(DraftGuard::Options{.min_acceptance = 0.0});
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(guard.DraftsNextStep(5), 5);
    guard.OnVerify(5, 0);
  }
  EXPECT_EQ(guard.num_pauses(), 0u);
}

TEST(SpeculativeTest, GuardPausesAfterAFailingProbeAndDoublesThePause) {
  DraftGuard guard(DraftGuard::Options{.min_acceptance = 0.5,
                                       .window_tokens = 10,
                                       .initial_pause_steps = 3,
                                       .min_pause_steps = 4,
                                       .max_pause_steps = 16});
  // The steps a pause skips before the next probe.
  auto skipped_steps = [&] {
    int skipped = 0;
    while (guard.DraftsNextStep(5) == 0) ++skipped;
    return skipped;
  };
  // Drafting starts after 3 steps with a probe of one draft; rejected, the pause is 4 steps.
  EXPECT_EQ(skipped_steps(), 3);
  guard.OnVerify(1, 0);
  EXPECT_TRUE(guard.paused());
  EXPECT_EQ(skipped_steps(), 4);
  EXPECT_EQ(guard.DraftsNextStep(5), 1) << "still probing: one draft";
  // The probes keep failing: 8 steps, then 16, then 16 (the cap).
  for (int want : {8, 16, 16}) {
    guard.OnVerify(1, 0);
    EXPECT_EQ(skipped_steps(), want);
  }
  EXPECT_EQ(guard.num_pauses(), 4u);
  // A passing probe resumes drafting with every draft and resets the pause; the window then
  // decides.
  guard.OnVerify(1, 1);
  EXPECT_FALSE(guard.paused());
  EXPECT_EQ(guard.DraftsNextStep(5), 5);
  guard.OnVerify(5, 4);
  guard.OnVerify(5, 3);  // the last 10: 7, above
  EXPECT_FALSE(guard.paused());
  guard.OnVerify(5, 0);  // the last 10: 3, below
  EXPECT_TRUE(guard.paused());
  EXPECT_EQ(skipped_steps(), 4);
  EXPECT_EQ(guard.DraftsNextStep(3), 1);
}

TEST(SpeculativeTest, GuardKeepsDraftingAboveTheThreshold) {
  DraftGuard guard(
      DraftGuard::Options{.min_acceptance = 0.5, .window_tokens = 10, .initial_pause_steps = 0});
  ASSERT_EQ(guard.DraftsNextStep(5), 1);  // the probe
  guard.OnVerify(1, 1);
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(guard.DraftsNextStep(5), 5) << "step " << i;
    guard.OnVerify(5, i % 2 == 0 ? 5 : 1);  // 6 of 10 over any two steps
  }
  EXPECT_EQ(guard.num_pauses(), 0u);
}

// The exact rule accepts the draft iff the row's own sample is the draft; the bonus row (no
// draft) never accepts. Greedy: accept iff the draft is the argmax.
TEST(SpeculativeTest, ExactAcceptanceAcceptsTheSampleOnly) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f};
  SamplerScratch scratch;
  VerifyRow row;
  row.logits = logits;
  row.params = &greedy;
  row.seed = 1;
  row.position = 9;
  row.draft = 1;
  RowVerdict v = ExactAcceptance(row, scratch);
  EXPECT_TRUE(v.accepted);
  EXPECT_EQ(v.token.token_id, 1);
  row.draft = 2;  // a tie, lost to the lower id
  v = ExactAcceptance(row, scratch);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.token.token_id, 1);
  row.draft = -1;
  EXPECT_FALSE(ExactAcceptance(row, scratch).accepted);

  SamplingParams sampled;
  sampled.temperature = 1.0f;
  row.params = &sampled;
  for (int64_t pos = 0; pos < 200; ++pos) {
    row.position = pos;
    row.draft = 3;
    v = ExactAcceptance(row, scratch);
    const SampledToken plain = SampleToken(logits, sampled, 1, pos, {}, {}, scratch);
    EXPECT_EQ(v.token.token_id, plain.token_id);
    EXPECT_EQ(v.accepted, plain.token_id == 3);
  }
}

}  // namespace
}  // namespace dsv41

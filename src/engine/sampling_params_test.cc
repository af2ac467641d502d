#include "engine/sampling_params.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "base/status.h"

namespace dsv41 {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kVocab = 100;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The message of validating the defaults changed by `edit`.
std::string ErrorOf(const std::function<void(SamplingParams&)>& edit) {
  SamplingParams params;
  edit(params);
  const Status status = ValidateSamplingParams(params, kVocab);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  return status.message();
}

TEST(SamplingParamsTest, DefaultsAndBoundsAreValid) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}, kVocab).ok());
  SamplingParams edge;
  edge.temperature = 0.0f;
  edge.top_p = 1.0f;
  edge.top_k = -1;
  edge.min_p = 1.0f;
  edge.presence_penalty = -2.0f;
  edge.frequency_penalty = 2.0f;
  edge.repetition_penalty = 0.01f;
  edge.stop_token_ids = {0, kVocab - 1};
  edge.stop = {"x"};
  edge.max_tokens = 1;
  edge.logprobs = 20;
  EXPECT_TRUE(ValidateSamplingParams(edge, kVocab).ok());
}

TEST(SamplingParamsTest, TemperatureMustBeFiniteAndNonNegative) {
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.temperature = -0.5f; }),
              HasSubstr("temperature -0.5"));
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.temperature = kNaN; }),
              HasSubstr("temperature nan"));
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.temperature = INFINITY; }),
              HasSubstr("temperature inf"));
}

TEST(SamplingParamsTest, TopPMustBeInHalfOpenUnitInterval) {
  EXPECT_EQ(ErrorOf([](SamplingParams& p) { p.top_p = 1.5f; }), "top_p 1.5 is outside (0, 1]");
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.top_p = 0.0f; }), HasSubstr("top_p 0 "));
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.top_p = kNaN; }), HasSubstr("top_p nan"));
}

TEST(SamplingParamsTest, TopKBelowMinusOneFails) {
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.top_k = -2; }), HasSubstr("top_k -2"));
}

TEST(SamplingParamsTest, MinPMustBeInUnitInterval) {
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.min_p = 1.25f; }), HasSubstr("min_p 1.25"));
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.min_p = -0.25f; }), HasSubstr("min_p -0.25"));
}

TEST(SamplingParamsTest, PenaltiesMustBeInRange) {
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.presence_penalty = 2.5f; }),
              HasSubstr("presence_penalty 2.5"));
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.frequency_penalty = -3.0f; }),
              HasSubstr("frequency_penalty -3"));
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.repetition_penalty = 0.0f; }),
              HasSubstr("repetition_penalty 0"));
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.repetition_penalty = kNaN; }),
              HasSubstr("repetition_penalty nan"));
}

TEST(SamplingParamsTest, StopTokenIdsMustBeInVocab) {
  EXPECT_EQ(ErrorOf([](SamplingParams& p) {
              p.stop_token_ids = {3, kVocab};
            }),
            "stop_token_ids[1] 100 is outside [0, 100)");
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.stop_token_ids = {-1}; }),
              HasSubstr("stop_token_ids[0] -1"));
}

TEST(SamplingParamsTest, EmptyStopStringFails) {
  EXPECT_EQ(ErrorOf([](SamplingParams& p) { p.stop = {"end", ""}; }), "stop[1] is an empty string");
}

TEST(SamplingParamsTest, MaxTokensMustBePositive) {
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.max_tokens = 0; }), HasSubstr("max_tokens 0"));
}

TEST(SamplingParamsTest, LogprobsMustBeAtMostTwenty) {
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.logprobs = 21; }), HasSubstr("logprobs 21"));
  EXPECT_THAT(ErrorOf([](SamplingParams& p) { p.logprobs = -1; }), HasSubstr("logprobs -1"));
}

}  // namespace
}  // namespace dsv41

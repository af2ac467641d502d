#include "vision/image_span.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "vision/vision_goldens_testing.h"

namespace dsv41 {
namespace {

// Every golden case: the prompt before expansion with its plan expands to input_ids and types
// exactly, with the recorded span starts.
TEST(ImageSpanTest, GoldenExpansionsAndRoles) {
  const int32_t image_token_id =
      ReadGoldenJson(kVisionCheckpoint + "/config.json")["image_token_id"].get<int32_t>();
  for (const std::string& name : VisionGoldenCases()) {
    SCOPED_TRACE(name);
    const Json c = ReadGoldenJson(VisionCaseDir(name) + "/case.json");
    std::vector<ImagePlan> plans;
    for (const Json& image : c["images"]) {
      Result<ImagePlan> plan =
          PlanImage(image["plan"]["input_w"].get<int64_t>(),
                    image["plan"]["input_h"].get<int64_t>(), TinyVPlanParams());
      ASSERT_TRUE(plan.ok());
      plans.push_back(*plan);
    }
    Result<ExpandedPrompt> expanded = ExpandImagePlaceholders(
        c["prompt_ids_before_expansion"].get<std::vector<int32_t>>(), image_token_id, plans);
    ASSERT_TRUE(expanded.ok()) << expanded.status().ToString();
    const std::vector<int64_t> want_ids =
        ReadVisionArray(VisionCaseDir(name) + "/input_ids.npy").ToInt64();
    const std::vector<int64_t> want_roles =
        ReadVisionArray(VisionCaseDir(name) + "/types.npy").ToInt64();
    EXPECT_EQ(std::vector<int64_t>(expanded->ids.begin(), expanded->ids.end()), want_ids);
    EXPECT_EQ(std::vector<int64_t>(expanded->roles.begin(), expanded->roles.end()), want_roles);
    EXPECT_EQ(expanded->span_starts, c["span_starts"].get<std::vector<int32_t>>());
  }
}

// §10 by hand: H = 2, W = 3 gives [0, 1, 1, 1, 2, 1, 1, 1, 2, 3], L = 10, image rows 0 .. 5.
TEST(ImageSpanTest, SpanLayoutByHand) {
  ImagePlan plan;
  plan.token_rows = 2;
  plan.token_cols = 3;
  plan.span_length = 10;
  std::vector<int> roles, rows;
  for (int64_t o = 0; o < plan.span_length; ++o) {
    const SpanPosition p = SpanPositionAt(plan, o);
    roles.push_back(static_cast<int>(p.role));
    rows.push_back(p.image_row);
  }
  EXPECT_EQ(roles, (std::vector<int>{0, 1, 1, 1, 2, 1, 1, 1, 2, 3}));
  EXPECT_EQ(rows, (std::vector<int>{-1, 0, 1, 2, -1, 3, 4, 5, -1, -1}));
  // Two adjacent images: told apart only by their starts.
  Result<ExpandedPrompt> two = ExpandImagePlaceholders(std::vector<int32_t>{5, 9, 9, 6}, 9,
                                                       std::vector<ImagePlan>{plan, plan});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->ids.size(), 22u);
  EXPECT_EQ(two->span_starts, (std::vector<int32_t>{1, 11}));
  EXPECT_EQ(two->roles[10], 3);
  EXPECT_EQ(two->roles[11], 0);
}

TEST(ImageSpanTest, PlaceholderCountMustMatchTheImages) {
  ImagePlan plan;
  plan.token_rows = plan.token_cols = 1;
  plan.span_length = 4;
  Result<ExpandedPrompt> r =
      ExpandImagePlaceholders(std::vector<int32_t>{1, 2, 3}, 9, std::vector<ImagePlan>{plan});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("0 image placeholders (token 9) for 1 image"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace dsv41

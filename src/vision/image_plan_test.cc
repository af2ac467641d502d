#include "vision/image_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "vision/vision_goldens_testing.h"

namespace dsv41 {
namespace {

// vision.md §1: the released vision_config.
constexpr ImagePlanParams kReleased = {
    .patch_size = 14, .downsample_ratio = 3, .max_image_tokens = 1024, .min_pixels = 295936};

// vision.md §5's worked plans with the released constants.
TEST(ImagePlanTest, SpecWorkedPlans) {
  struct Worked {
    int64_t w, h;
    int32_t bw, bh, span_length;
  };
  for (const Worked& c : {Worked{1024, 768, 1036, 770, 496}, Worked{1920, 1080, 1708, 966, 968},
                          Worked{8192, 1, 42882, 42, 1024}}) {
    Result<ImagePlan> plan = PlanImage(c.w, c.h, kReleased);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->bw, c.bw) << c.w << "x" << c.h;
    EXPECT_EQ(plan->bh, c.bh) << c.w << "x" << c.h;
    EXPECT_EQ(plan->span_length, c.span_length) << c.w << "x" << c.h;
  }
}

// Every field of the goldens' image{k}_plan.json (the tiny-v vision_config).
TEST(ImagePlanTest, GoldenPlans) {
  const ImagePlanParams params = TinyVPlanParams();
  for (const std::string& name : VisionGoldenCases()) {
    const Json want = ReadGoldenJson(VisionCaseDir(name) + "/image0_plan.json");
    Result<ImagePlan> plan =
        PlanImage(want["input_w"].get<int64_t>(), want["input_h"].get<int64_t>(), params);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status().ToString();
    EXPECT_EQ(plan->upscaled, want["upscaled"].get<bool>()) << name;
    EXPECT_EQ(plan->solver, want["solver"].get<bool>()) << name;
    EXPECT_EQ(plan->plan_w, want["plan_w"].get<int64_t>()) << name;
    EXPECT_EQ(plan->plan_h, want["plan_h"].get<int64_t>()) << name;
    EXPECT_EQ(plan->bw, want["bw"].get<int32_t>()) << name;
    EXPECT_EQ(plan->bh, want["bh"].get<int32_t>()) << name;
    EXPECT_EQ(plan->patch_rows, want["Hv"].get<int32_t>()) << name;
    EXPECT_EQ(plan->patch_cols, want["Wv"].get<int32_t>()) << name;
    EXPECT_EQ(plan->token_rows, want["H"].get<int32_t>()) << name;
    EXPECT_EQ(plan->token_cols, want["W"].get<int32_t>()) << name;
    EXPECT_EQ(plan->span_length, want["L"].get<int32_t>()) << name;
    EXPECT_EQ(plan->num_patches(), want["n_patches"].get<int64_t>()) << name;
    EXPECT_EQ(plan->resized_w, want["resized_w"].get<int32_t>()) << name;
    EXPECT_EQ(plan->resized_h, want["resized_h"].get<int32_t>()) << name;
    EXPECT_EQ(plan->paste_x, want["paste_x"].get<int32_t>()) << name;
    EXPECT_EQ(plan->paste_y, want["paste_y"].get<int32_t>()) << name;
  }
}

// §6 step 3: Python's round, half to even: gaps 1, 3, 5, 7 paste at 0, 2, 2, 4.
TEST(ImagePlanTest, PasteOffsetsRoundHalfToEven) {
  EXPECT_EQ(RoundHalfEven(1 * 0.5), 0.0);
  EXPECT_EQ(RoundHalfEven(3 * 0.5), 2.0);
  EXPECT_EQ(RoundHalfEven(5 * 0.5), 2.0);
  EXPECT_EQ(RoundHalfEven(7 * 0.5), 4.0);
  EXPECT_EQ(RoundHalfEven(-2.5), -2.0);
}

// Over a spread of sizes and two configs: L within M, the canvas a multiple of p holding the
// contain size, the grid and span length as §5 defines them, the image centred.
TEST(ImagePlanTest, PlansHoldTheirInvariants) {
  const ImagePlanParams other = {
      .patch_size = 16, .downsample_ratio = 2, .max_image_tokens = 64, .min_pixels = 1000};
  for (const ImagePlanParams& params : {kReleased, TinyVPlanParams(), other}) {
    for (int64_t w : {1, 2, 3, 13, 14, 99, 544, 1000, 4097, 65535, 1000000}) {
      for (int64_t h : {1, 5, 14, 15, 300, 2000, 70000}) {
        Result<ImagePlan> plan = PlanImage(w, h, params);
        if (!plan.ok()) {
          // Only an aspect no canvas fits may be refused.
          EXPECT_NE(plan.status().message().find("no canvas"), std::string::npos)
              << w << "x" << h << ": " << plan.status().ToString();
          continue;
        }
        const int32_t p = params.patch_size;
        const int32_t r = params.downsample_ratio;
        SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " p=" + std::to_string(p));
        EXPECT_LE(plan->span_length, params.max_image_tokens);
        EXPECT_EQ(plan->bw % p, 0);
        EXPECT_EQ(plan->bh % p, 0);
        EXPECT_EQ(plan->patch_cols * p, plan->bw);
        EXPECT_EQ(plan->token_rows, (plan->patch_rows + r - 1) / r);
        EXPECT_EQ(plan->span_length, plan->token_rows * (plan->token_cols + 1) + 2);
        EXPECT_LE(plan->resized_w, plan->bw);
        EXPECT_LE(plan->resized_h, plan->bh);
        EXPECT_TRUE(plan->resized_w == plan->bw || plan->resized_h == plan->bh);
        EXPECT_LE(plan->paste_x * 2, plan->bw - plan->resized_w + 1);
        EXPECT_LE(plan->paste_y * 2, plan->bh - plan->resized_h + 1);
      }
    }
  }
}

TEST(ImagePlanTest, BadSizesAndParametersAreRefused) {
  EXPECT_FALSE(PlanImage(0, 10, kReleased).ok());
  EXPECT_FALSE(PlanImage(10, -1, kReleased).ok());
  EXPECT_FALSE(PlanImage(int64_t{1} << 40, 10, kReleased).ok());
  ImagePlanParams bad = kReleased;
  bad.patch_size = 0;
  Result<ImagePlan> plan = PlanImage(100, 100, bad);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("patch_size 0"), std::string::npos);
}

}  // namespace
}  // namespace dsv41

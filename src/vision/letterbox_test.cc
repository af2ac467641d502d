#include "vision/letterbox.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "numerics/codecs.h"
#include "vision/image_input.h"
#include "vision/patches.h"
#include "vision/vision_goldens_testing.h"

namespace dsv41 {
namespace {

std::vector<uint8_t> Bytes(const NpyArray& a) {
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(a.data.data()),
                              reinterpret_cast<const uint8_t*>(a.data.data()) + a.data.size());
}

RgbImage GoldenDecoded(const std::string& name) {
  const NpyArray a = ReadVisionArray(VisionCaseDir(name) + "/image0_decoded.npy");
  RgbImage image;
  if (a.shape.size() != 3) return image;
  image.height = static_cast<int32_t>(a.shape[0]);
  image.width = static_cast<int32_t>(a.shape[1]);
  image.pixels = Bytes(a);
  return image;
}

// The resizer and the pad, from the goldens' decoded arrays (so JPEG cases test the resizer
// independently of the decoder): bit for bit (vision.md §13.1).
TEST(LetterboxTest, GoldenLetterboxesBitForBit) {
  const ImagePlanParams params = TinyVPlanParams();
  for (const std::string& name : VisionGoldenCases()) {
    const RgbImage image = GoldenDecoded(name);
    Result<PreparedImage> prepared = PrepareDecodedImage(image, params);
    ASSERT_TRUE(prepared.ok()) << name << ": " << prepared.status().ToString();
    const NpyArray want = ReadVisionArray(VisionCaseDir(name) + "/image0_letterboxed.npy");
    ASSERT_EQ(want.shape, (std::vector<int64_t>{prepared->plan.bh, prepared->plan.bw, 3})) << name;
    const std::vector<uint8_t> want_bytes = Bytes(want);
    size_t differing = 0;
    for (size_t i = 0; i < want_bytes.size(); ++i)
      differing += want_bytes[i] != prepared->canvas[i];
    EXPECT_EQ(differing, 0u) << name << ": " << differing << " of " << want_bytes.size()
                             << " bytes differ";
  }
}

// Normalisation and patch layout from the goldens' letterboxed arrays: exact.
TEST(LetterboxTest, GoldenPatchesExactly) {
  for (const std::string& name : VisionGoldenCases()) {
    const Json plan = ReadGoldenJson(VisionCaseDir(name) + "/image0_plan.json");
    const NpyArray canvas = ReadVisionArray(VisionCaseDir(name) + "/image0_letterboxed.npy");
    const std::vector<float> want =
        ReadVisionArray(VisionCaseDir(name) + "/image0_patches.npy").ToFloat();
    std::vector<float> patches(want.size());
    ExtractPatches(Bytes(canvas), plan["bw"].get<int32_t>(), plan["bh"].get<int32_t>(),
                   TinyVPlanParams().patch_size, patches);
    EXPECT_EQ(std::memcmp(patches.data(), want.data(), want.size() * sizeof(float)), 0) << name;
  }
}

// vision.md §7's table examples: 127 (the pad gray) is not zero.
TEST(LetterboxTest, NormalisationTableMatchesTheSpec) {
  EXPECT_EQ(Bf16FromF32(NormalizePixel(0)), 0xBF80);
  EXPECT_EQ(Bf16FromF32(NormalizePixel(1)), 0xBF7E);
  EXPECT_EQ(NormalizePixel(127), -0.003936767578125f);
  EXPECT_EQ(Bf16FromF32(NormalizePixel(127)), 0xBB81);
  EXPECT_EQ(Bf16FromF32(NormalizePixel(128)), 0x3B81);
  EXPECT_EQ(Bf16FromF32(NormalizePixel(254)), 0x3F7E);
  EXPECT_EQ(NormalizePixel(255), 1.0f);
}

// The same size is an exact copy; a zero side gives nothing; a flat image stays flat through
// up- and downscaling (the weights of each output sum to 2^22 up to rounding).
TEST(LetterboxTest, ResizeEdgeCases) {
  std::vector<uint8_t> src(7 * 5 * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 11);
  EXPECT_EQ(ResizeBicubic(src, 7, 5, 7, 5), src);
  EXPECT_TRUE(ResizeBicubic(src, 7, 5, 0, 5).empty());
  const std::vector<uint8_t> flat(7 * 5 * 3, 200);
  for (auto [w, h] : {std::pair{3, 2}, std::pair{30, 11}, std::pair{1, 1}, std::pair{7, 40}}) {
    const std::vector<uint8_t> out = ResizeBicubic(flat, 7, 5, w, h);
    EXPECT_EQ(out, std::vector<uint8_t>(static_cast<size_t>(w) * h * 3, 200)) << w << "x" << h;
  }
}

// An aspect ratio whose contain size has a zero side (1 × 100000, shrunk by the solver to a
// 14 × 6986 canvas: width round(6986 / 100000) = 0) pastes nothing: the canvas is all gray.
// (Found by image_fuzz: the paste copied from an empty image.)
TEST(LetterboxTest, ZeroContainSizeGivesAGrayCanvas) {
  const ImagePlanParams params = {
      .patch_size = 14, .downsample_ratio = 1, .max_image_tokens = 1000, .min_pixels = 0};
  RgbImage image;
  image.width = 1;
  image.height = 100000;
  image.pixels.assign(3 * 100000, 9);
  Result<ImagePlan> plan = PlanImage(image.width, image.height, params);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->resized_w, 0) << "the case needs a zero contain width";
  EXPECT_EQ(Letterbox(image, *plan),
            std::vector<uint8_t>(static_cast<size_t>(plan->bw) * plan->bh * 3, kLetterboxGray));
}

}  // namespace
}  // namespace dsv41

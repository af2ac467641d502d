// libFuzzer target: the image decoders and the size plan (vision/image_decode.h, image_plan.h,
// letterbox.h, patches.h). Any bytes give an image or a Status naming the fault, never a crash; a
// decoded image plans within the span budget, letterboxes to its canvas and patchifies.
// Inputs starting with "PLAN" are a size and plan parameters instead (little-endian int32 each:
// width, height, patch size, downsample ratio, max image tokens, min pixels).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "base/check.h"
#include "vision/image_decode.h"
#include "vision/image_input.h"
#include "vision/image_plan.h"
#include "vision/patches.h"

namespace {

// Small enough for the fuzzer's speed and memory, large enough for every seed.
constexpr int64_t kFuzzMaxPixels = int64_t{1} << 22;

void CheckPlan(const dsv41::ImagePlan& plan, const dsv41::ImagePlanParams& params) {
  DSV41_CHECK(plan.span_length <= params.max_image_tokens, "L %d > M %d", plan.span_length,
              params.max_image_tokens);
  DSV41_CHECK(plan.bw % params.patch_size == 0 && plan.bh % params.patch_size == 0);
  DSV41_CHECK(plan.resized_w <= plan.bw && plan.resized_h <= plan.bh && plan.resized_w >= 0 &&
              plan.resized_h >= 0);
  DSV41_CHECK(plan.paste_x + plan.resized_w <= plan.bw && plan.paste_y + plan.resized_h <= plan.bh);
}

int32_t ReadInt32(const uint8_t* data) {
  uint32_t v = 0;
  std::memcpy(&v, data, 4);
  return static_cast<int32_t>(v);
}

void FuzzPlan(const uint8_t* data, size_t size) {
  if (size < 4 + 6 * 4) return;
  const uint8_t* v = data + 4;
  // Parameters in the ranges a validated config allows (config/vision_config), kept small.
  dsv41::ImagePlanParams params;
  params.patch_size = 1 + (ReadInt32(v + 8) & 63);
  params.downsample_ratio = 1 + (ReadInt32(v + 12) & 7);
  params.max_image_tokens = 4 + (ReadInt32(v + 16) & 4095);
  params.min_pixels = ReadInt32(v + 20) & 0xffffff;
  auto plan = dsv41::PlanImage(ReadInt32(v), ReadInt32(v + 4), params);
  if (plan.ok()) CheckPlan(*plan, params);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && std::memcmp(data, "PLAN", 4) == 0) {
    FuzzPlan(data, size);
    return 0;
  }
  dsv41::ImageDecodeOptions options;
  options.max_pixels = kFuzzMaxPixels;
  auto image = dsv41::DecodeImage(std::span<const uint8_t>(data, size), options);
  if (!image.ok()) return 0;
  DSV41_CHECK(image->pixels.size() == static_cast<size_t>(image->width) * image->height * 3);
  // A small config so the canvas stays small whatever the image.
  const dsv41::ImagePlanParams params{
      .patch_size = 4, .downsample_ratio = 2, .max_image_tokens = 40, .min_pixels = 256};
  auto prepared = dsv41::PrepareDecodedImage(*image, params);
  if (!prepared.ok()) return 0;
  CheckPlan(prepared->plan, params);
  DSV41_CHECK(prepared->canvas.size() ==
              static_cast<size_t>(prepared->plan.bw) * prepared->plan.bh * 3);
  std::vector<float> patches(prepared->canvas.size());
  dsv41::ExtractPatches(prepared->canvas, prepared->plan.bw, prepared->plan.bh, params.patch_size,
                        patches);
  return 0;
}

#include "vision/image_input.h"

#include "vision/letterbox.h"

namespace dsv41 {

Sha256Digest ImageContentSha256(const RgbImage& image) {
  Sha256 hash;
  uint8_t size[8];
  for (int i = 0; i < 4; ++i) {
    size[i] = static_cast<uint8_t>(static_cast<uint32_t>(image.width) >> (8 * i));
    size[4 + i] = static_cast<uint8_t>(static_cast<uint32_t>(image.height) >> (8 * i));
  }
  hash.Update(size);
  hash.Update(image.pixels);
  return hash.Finish();
}

uint64_t ImageSpanKey(const Sha256Digest& content_sha256, const ImagePlan& plan) {
  Sha256 hash;
  hash.Update(content_sha256);
  const int32_t grid[] = {plan.bw, plan.bh, plan.token_rows, plan.token_cols, plan.span_length};
  hash.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(grid), sizeof(grid)));
  const Sha256Digest digest = hash.Finish();
  uint64_t key = 0;
  for (int i = 0; i < 8; ++i) key = key << 8 | digest[i];
  return key;
}

Result<PreparedImage> PrepareDecodedImage(const RgbImage& image, const ImagePlanParams& params) {
  PreparedImage prepared;
  DSV41_ASSIGN_OR_RETURN(prepared.plan, PlanImage(image.width, image.height, params));
  prepared.canvas = Letterbox(image, prepared.plan);
  prepared.content_sha256 = ImageContentSha256(image);
  return prepared;
}

Result<PreparedImage> PrepareImage(std::span<const uint8_t> bytes, const ImagePlanParams& params,
                                   const ImageDecodeOptions& options) {
  DSV41_ASSIGN_OR_RETURN(RgbImage image, DecodeImage(bytes, options));
  return PrepareDecodedImage(image, params);
}

}  // namespace dsv41

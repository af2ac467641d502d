#pragma once

// One image of a request from its encoded bytes to what the tower reads (vision.md §4–§7, §12):
// decode, plan, letterbox, and the content key of its span for the prefix cache. Frontends
// (the server's HTTP threads, the CLI) run this; the engine patchifies and encodes the canvas.

#include <cstdint>
#include <span>
#include <vector>

#include "base/sha256.h"
#include "base/status.h"
#include "vision/image_decode.h"
#include "vision/image_plan.h"

namespace dsv41 {

struct PreparedImage {
  ImagePlan plan;
  std::vector<uint8_t> canvas;  // the letterbox [plan.bh, plan.bw, 3]
  // sha256 over the decoded size (two little-endian uint32) and the decoded RGB bytes.
  Sha256Digest content_sha256 = {};
};

// The content hash of a decoded image (PreparedImage::content_sha256).
Sha256Digest ImageContentSha256(const RgbImage& image);

// The prefix-cache key of an image's span (vision.md §12): its content hash folded with the
// planned canvas and grid, so the same image planned the same way keys alike.
uint64_t ImageSpanKey(const Sha256Digest& content_sha256, const ImagePlan& plan);

// Decodes, plans and letterboxes `bytes`. InvalidArgument naming the fault (DecodeImage,
// PlanImage); callers prefix the image's name. Thread-safe.
Result<PreparedImage> PrepareImage(std::span<const uint8_t> bytes, const ImagePlanParams& params,
                                   const ImageDecodeOptions& options);
// The same from a decoded image.
Result<PreparedImage> PrepareDecodedImage(const RgbImage& image, const ImagePlanParams& params);

}  // namespace dsv41

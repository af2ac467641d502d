#pragma once

// The images of an API request (vision.md §3): each image part's source resolved (data: URLs and
// base64 sources; local files only when the server allows them; http(s) never fetched), checked
// against the limits, decoded, planned and letterboxed on the HTTP thread; then the prompt's
// placeholders expanded to their spans and the images handed to the engine with the submission.
// A bad image is a 400 naming the part and the reason, before the engine sees the request.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "server/engine_loop.h"
#include "text/chat_encoding.h"
#include "vision/image_plan.h"

namespace dsv41 {

// What the served model accepts (vision.md §3.5). Immutable; thread-safe to read.
struct ImageServing {
  bool enabled = false;  // the model has a vision tower
  int32_t image_token_id = -1;
  ImagePlanParams plan;
  int32_t max_images = 16;                      // per request
  size_t max_payload_bytes = size_t{32} << 20;  // per decoded payload
  int64_t max_pixels = int64_t{64} << 20;       // per image (--max-image-pixels)
  bool allow_local_files = false;               // file:// URLs (--allow-local-image-files)
};

// Resolves, decodes and plans `images` (a rendered prompt's image parts, in order), expands the
// image token ids of `submission.prompt_ids` to their spans and sets submission.options.images.
// InvalidArgument naming the part's field: image input on a model without a tower, more images
// than the limit, an unsupported or undecodable source, a payload or image over its limit, and
// a prompt whose placeholders do not pair with the images.
Status AttachImages(std::span<const ChatImage> images, const ImageServing& serving,
                    Submission& submission);

// The bytes of one image source (data: URL, Anthropic base64, or a local file when allowed).
Result<std::vector<uint8_t>> ResolveImageSource(const ChatImage& image,
                                                const ImageServing& serving);

}  // namespace dsv41

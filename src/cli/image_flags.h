#pragma once

// Image flags shared by the commands that read images (vision, logits, run, bench, serve), and
// the one way a command reads an image file.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine_api.h"
#include "engine/loaded_model.h"
#include "vision/image_decode.h"
#include "vision/image_input.h"
#include "vision/image_plan.h"
#include "vision/image_span.h"

namespace CLI {
class App;
}  // namespace CLI

namespace dsv41 {

struct ImageFlags {
  int64_t max_image_pixels = kDefaultMaxImagePixels;

  ImageDecodeOptions decode_options() const {
    ImageDecodeOptions options;
    options.max_pixels = max_image_pixels;
    return options;
  }
};

// --max-image-pixels.
void AddImageFlags(CLI::App& sub, ImageFlags& flags);

// The bytes of an image file; errors name the path.
Result<std::vector<uint8_t>> ReadImageFile(const std::string& path);
// Reads, decodes, plans and letterboxes an image file; errors are prefixed "image '<path>'".
Result<PreparedImage> PrepareImageFile(const std::string& path, const ImagePlanParams& params,
                                       const ImageFlags& flags);

// A prompt of token ids with its images: each image placeholder id of the prompt, in order, is
// expanded to the span of the next image.
struct ImageFilePrompt {
  std::vector<RequestImage> images;  // span starts set
  ExpandedPrompt expanded;
};
// The images of `paths` (PNG / JPEG through the model's tower) and of `embedding_paths` (float32
// [H, W, hidden] .npy aligner rows), in that order, placed in `ids`. Errors name the file, or
// the counts when placeholders and images do not pair.
Result<ImageFilePrompt> AttachImageFiles(const LoadedTextModel& model,
                                         std::span<const std::string> paths,
                                         std::span<const std::string> embedding_paths,
                                         const ImageFlags& flags, std::span<const int32_t> ids);

}  // namespace dsv41

#pragma once

// Image flags shared by the commands that read images (vision, logits, run, bench, serve), and
// the one way a command reads an image file.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "vision/image_decode.h"
#include "vision/image_input.h"
#include "vision/image_plan.h"

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

}  // namespace dsv41

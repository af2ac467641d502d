#pragma once

// Image decoding (vision.md §4): PNG (libpng) and baseline / progressive JPEG (libjpeg-turbo at
// its default settings: ISLOW IDCT, fancy upsampling, no DCT scaling: the decoder Pillow uses),
// converted to 8-bit RGB as Pillow's `Image.open(...).convert("RGB")` does: gray is replicated,
// alpha is dropped without compositing, a palette is looked up, no EXIF orientation is applied.
// Every fault is an InvalidArgument naming the format and the reason, never a crash: another
// format, a corrupt or truncated file, a zero size, a size over the pixel limit, and the inputs
// this engine refuses instead of converting (16-bit PNG, CMYK / YCCK JPEG).

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// vision.md §3.5: at most 64 Mpixel per image (64 · 2^20).
inline constexpr int64_t kDefaultMaxImagePixels = int64_t{64} << 20;

struct ImageDecodeOptions {
  // Images with more pixels (width · height, read from the header before any pixel is decoded)
  // are refused.
  int64_t max_pixels = kDefaultMaxImagePixels;
};

// A decoded image: 8-bit RGB, row-major, [height, width, 3].
struct RgbImage {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> pixels;
};

enum class ImageFormat : uint8_t { kUnknown, kPng, kJpeg };

// The format the leading bytes announce (PNG signature, JPEG SOI marker), or kUnknown.
ImageFormat SniffImageFormat(std::span<const uint8_t> bytes);
// "PNG", "JPEG", or a name for a recognised but unsupported format ("GIF", "WebP", "BMP",
// "TIFF"), or "unknown".
std::string_view ImageFormatName(std::span<const uint8_t> bytes);

// Decodes `bytes` to RGB. Errors (InvalidArgument) say what is wrong, e.g. "PNG: truncated
// data", "JPEG: CMYK color space is not supported", "GIF images are not supported (PNG and JPEG
// are)", "PNG: 30000 x 30000 = 900000000 pixels, over the limit of 67108864"; callers prefix the
// image's name. Thread-safe.
Result<RgbImage> DecodeImage(std::span<const uint8_t> bytes, const ImageDecodeOptions& options);

}  // namespace dsv41

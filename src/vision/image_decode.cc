#include "vision/image_decode.h"

#include <cstring>

#include "vision/image_decoders.h"

namespace dsv41 {
namespace {

bool StartsWith(std::span<const uint8_t> bytes, std::string_view magic, size_t offset = 0) {
  return bytes.size() >= offset + magic.size() &&
         std::memcmp(bytes.data() + offset, magic.data(), magic.size()) == 0;
}

}  // namespace

ImageFormat SniffImageFormat(std::span<const uint8_t> bytes) {
  if (StartsWith(bytes, std::string_view("\x89PNG\r\n\x1a\n", 8))) return ImageFormat::kPng;
  if (StartsWith(bytes, std::string_view("\xff\xd8\xff", 3))) return ImageFormat::kJpeg;
  return ImageFormat::kUnknown;
}

std::string_view ImageFormatName(std::span<const uint8_t> bytes) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kUnknown:
      break;
  }
  if (StartsWith(bytes, "GIF8")) return "GIF";
  if (StartsWith(bytes, "RIFF") && StartsWith(bytes, "WEBP", 8)) return "WebP";
  if (StartsWith(bytes, "BM")) return "BMP";
  if (StartsWith(bytes, std::string_view("II*\0", 4)) ||
      StartsWith(bytes, std::string_view("MM\0*", 4))) {
    return "TIFF";
  }
  return "unknown";
}

Status CheckDecodedSize(const char* format, int64_t width, int64_t height,
                        const ImageDecodeOptions& options) {
  if (width <= 0 || height <= 0) {
    return InvalidArgumentError("%s: zero size (%lld x %lld)", format,
                                static_cast<long long>(width), static_cast<long long>(height));
  }
  if (width * height > options.max_pixels) {
    return InvalidArgumentError("%s: %lld x %lld = %lld pixels, over the limit of %lld", format,
                                static_cast<long long>(width), static_cast<long long>(height),
                                static_cast<long long>(width * height),
                                static_cast<long long>(options.max_pixels));
  }
  return OkStatus();
}

Result<RgbImage> DecodeImage(std::span<const uint8_t> bytes, const ImageDecodeOptions& options) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kPng:
      return DecodePng(bytes, options);
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, options);
    case ImageFormat::kUnknown:
      break;
  }
  if (bytes.empty()) return InvalidArgumentError("empty image data");
  const std::string_view name = ImageFormatName(bytes);
  if (name == "unknown") {
    return InvalidArgumentError("not a PNG or JPEG image (unrecognised leading bytes)");
  }
  return InvalidArgumentError("%.*s images are not supported (PNG and JPEG are)",
                              static_cast<int>(name.size()), name.data());
}

}  // namespace dsv41

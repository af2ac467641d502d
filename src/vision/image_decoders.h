#pragma once

// The format readers behind DecodeImage (vision/image_decode.h), one per library. Each checks the
// size against the limit from the header, before any pixel is decoded.

#include <cstdint>
#include <span>

#include "base/status.h"
#include "vision/image_decode.h"

namespace dsv41 {

// PNG through libpng: bit depths 1-8, gray, gray + alpha, RGB, RGBA, palette; interlaced or not.
Result<RgbImage> DecodePng(std::span<const uint8_t> bytes, const ImageDecodeOptions& options);
// JPEG through libjpeg-turbo at default settings: gray, YCbCr or RGB, baseline or progressive.
Result<RgbImage> DecodeJpeg(std::span<const uint8_t> bytes, const ImageDecodeOptions& options);

// The size check shared by the readers: InvalidArgument naming the format for a zero or
// over-limit size.
Status CheckDecodedSize(const char* format, int64_t width, int64_t height,
                        const ImageDecodeOptions& options);

}  // namespace dsv41

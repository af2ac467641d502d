#pragma once

// Test-only image encoders (libpng, libjpeg-turbo) for the decoder tests and the bad-image tests
// of the CLI and the server: any PNG color type and bit depth, JPEG in any supported or refused
// color space, baseline or progressive. They abort on a libpng / libjpeg error (a test bug).

#include <cstdint>
#include <string>
#include <vector>

namespace dsv41 {

struct PngSpec {
  int32_t width = 0;
  int32_t height = 0;
  int bit_depth = 8;        // 1, 2, 4, 8 or 16
  int color_type = 2;       // PNG_COLOR_TYPE_*: 0 gray, 2 RGB, 3 palette, 4 gray + alpha, 6 RGBA
  bool interlaced = false;  // Adam7
  std::vector<uint16_t> samples;      // [height, width, channels] sample values (palette: indexes)
  std::vector<uint8_t> palette;       // RGB triples (palette images)
  std::vector<uint8_t> transparency;  // tRNS alpha per palette entry (palette images), optional
};
std::vector<uint8_t> EncodePng(const PngSpec& spec);
// A spec without samples.
PngSpec MakePngSpec(int32_t width, int32_t height, int color_type, int bit_depth = 8);

enum class JpegColor : uint8_t { kGray, kYCbCr, kRgb, kCmyk };
struct JpegSpec {
  int32_t width = 0;
  int32_t height = 0;
  JpegColor color = JpegColor::kYCbCr;  // how the file stores the color
  int quality = 90;
  bool progressive = false;
  bool subsample_420 = true;     // 2×2 chroma subsampling (YCbCr only)
  std::vector<uint8_t> samples;  // [height, width, 1 (gray), 3 (RGB input) or 4 (CMYK)]
};
std::vector<uint8_t> EncodeJpeg(const JpegSpec& spec);
// A spec holding `samples`.
JpegSpec MakeJpegSpec(int32_t width, int32_t height, JpegColor color, std::vector<uint8_t> samples);

// A PNG whose header declares width × height (any values, CRCs right), with a stub of image data
// and an IEND: the size is read, the pixels never.
std::vector<uint8_t> PngWithHeaderOnly(uint32_t width, uint32_t height);

// One of the bad images every image entry point must refuse (issue 21's list): its bytes and a
// part of the error message that names the reason.
struct BadImageCase {
  std::string name;
  std::vector<uint8_t> bytes;
  std::string reason;
};
// Truncated PNG and JPEG, wrong magic, 0 × 0, huge dimensions, CMYK JPEG, 16-bit PNG, GIF.
std::vector<BadImageCase> BadImageCases();
// A small valid PNG (RGB) and JPEG (4:2:0) of the test pattern.
std::vector<uint8_t> SmallPng(int32_t width, int32_t height);
std::vector<uint8_t> SmallJpeg(int32_t width, int32_t height);

// A deterministic test pattern: [height, width, channels] bytes varying in both directions.
std::vector<uint8_t> TestPattern(int32_t width, int32_t height, int channels, uint32_t seed);

}  // namespace dsv41

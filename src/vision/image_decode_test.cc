#include "vision/image_decode.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "vision/image_testing.h"
#include "vision/vision_goldens_testing.h"

namespace dsv41 {
namespace {

std::vector<uint8_t> DecodedGolden(const std::string& case_name) {
  const NpyArray a = ReadVisionArray(VisionCaseDir(case_name) + "/image0_decoded.npy");
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(a.data.data()),
                              reinterpret_cast<const uint8_t*>(a.data.data()) + a.data.size());
}

// Every golden image decodes to the oracle's `Image.open(...).convert("RGB")` array: the PNGs
// and, because libjpeg-turbo is the decoder Pillow uses, the JPEGs too (vision.md §4, §13.1).
TEST(ImageDecodeTest, GoldenImagesDecodeToTheirDecodedArrays) {
  for (const std::string& name : VisionGoldenCases()) {
    const Json plan = ReadGoldenJson(VisionCaseDir(name) + "/image0_plan.json");
    const std::vector<uint8_t> bytes =
        ReadGoldenBytes(kVisionGoldens + "/images/" + plan["file"].get<std::string>());
    Result<RgbImage> image = DecodeImage(bytes, {});
    ASSERT_TRUE(image.ok()) << name << ": " << image.status().ToString();
    EXPECT_EQ(image->width, plan["input_w"].get<int32_t>()) << name;
    EXPECT_EQ(image->height, plan["input_h"].get<int32_t>()) << name;
    EXPECT_TRUE(image->pixels == DecodedGolden(name)) << name;
  }
}

PngSpec GrayPng(int bit_depth, int32_t width, int32_t height) {
  PngSpec spec = MakePngSpec(width, height, 0, bit_depth);
  for (int32_t i = 0; i < width * height; ++i) {
    spec.samples.push_back(static_cast<uint16_t>((i * 7 + 3) % (1 << bit_depth)));
  }
  return spec;
}

// Gray of 1, 2, 4 and 8 bits: each value scaled to 8 bits (v · 255 / (2^d − 1)) and replicated
// to R, G and B.
TEST(ImageDecodeTest, GrayPngOfEveryDepthIsScaledAndReplicated) {
  for (int depth : {1, 2, 4, 8}) {
    const PngSpec spec = GrayPng(depth, 13, 5);
    Result<RgbImage> image = DecodeImage(EncodePng(spec), {});
    ASSERT_TRUE(image.ok()) << depth << ": " << image.status().ToString();
    ASSERT_EQ(image->pixels.size(), spec.samples.size() * 3);
    for (size_t i = 0; i < spec.samples.size(); ++i) {
      const int want = spec.samples[i] * 255 / ((1 << depth) - 1);
      for (int c = 0; c < 3; ++c) {
        ASSERT_EQ(image->pixels[i * 3 + c], want) << "depth " << depth << " sample " << i;
      }
    }
  }
}

// RGBA and gray + alpha: the alpha is dropped, not composited (a transparent pixel keeps its
// color).
TEST(ImageDecodeTest, AlphaIsDroppedWithoutCompositing) {
  PngSpec rgba = MakePngSpec(4, 3, 6);
  PngSpec gray_alpha = MakePngSpec(4, 3, 4);
  std::vector<uint8_t> want_rgba, want_gray;
  for (int i = 0; i < 12; ++i) {
    for (int c = 0; c < 3; ++c) {
      rgba.samples.push_back(static_cast<uint16_t>(i * 20 + c * 5));
      want_rgba.push_back(static_cast<uint8_t>(i * 20 + c * 5));
      want_gray.push_back(static_cast<uint8_t>(200 - i * 9));
    }
    rgba.samples.push_back(i % 2 == 0 ? 0 : 128);  // fully transparent or half
    gray_alpha.samples.push_back(static_cast<uint16_t>(200 - i * 9));
    gray_alpha.samples.push_back(0);
  }
  Result<RgbImage> a = DecodeImage(EncodePng(rgba), {});
  Result<RgbImage> b = DecodeImage(EncodePng(gray_alpha), {});
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_EQ(a->pixels, want_rgba);
  EXPECT_EQ(b->pixels, want_gray);
}

// Palette images go through their palette (tRNS ignored); an index past the PLTE reads Pillow's
// padding, gray (i, i, i).
TEST(ImageDecodeTest, PaletteIsLookedUpAndPaddedWithGray) {
  PngSpec spec = MakePngSpec(3, 2, 3);
  spec.palette = {10, 20, 30, 40, 50, 60, 70, 80, 90};
  spec.transparency = {0, 255, 7};
  spec.samples = {0, 1, 2, 2, 1, 0};
  Result<RgbImage> image = DecodeImage(EncodePng(spec), {});
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->pixels, (std::vector<uint8_t>{10, 20, 30, 40, 50, 60, 70, 80, 90, 70, 80, 90, 40,
                                                 50, 60, 10, 20, 30}));
  // 4-bit indexes, one past the 3-entry palette.
  PngSpec packed = MakePngSpec(2, 1, 3, 4);
  packed.palette = spec.palette;
  packed.samples = {1, 9};
  image = DecodeImage(EncodePng(packed), {});
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->pixels, (std::vector<uint8_t>{40, 50, 60, 9, 9, 9}));
}

TEST(ImageDecodeTest, InterlacedPngEqualsTheSamePixelsStraight) {
  PngSpec spec = MakePngSpec(37, 23, 2);
  const std::vector<uint8_t> pattern = TestPattern(37, 23, 3, 1);
  spec.samples.assign(pattern.begin(), pattern.end());
  spec.interlaced = true;
  Result<RgbImage> image = DecodeImage(EncodePng(spec), {});
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->pixels, pattern);
}

// The same quantised coefficients, sent progressively, decode to the same pixels as baseline;
// gray JPEGs are replicated; a JPEG stored as RGB decodes too.
TEST(ImageDecodeTest, ProgressiveJpegDecodesAsBaseline) {
  for (bool subsample : {true, false}) {
    JpegSpec spec = MakeJpegSpec(61, 45, JpegColor::kYCbCr, TestPattern(61, 45, 3, 2));
    spec.subsample_420 = subsample;
    Result<RgbImage> baseline = DecodeImage(EncodeJpeg(spec), {});
    spec.progressive = true;
    Result<RgbImage> progressive = DecodeImage(EncodeJpeg(spec), {});
    ASSERT_TRUE(baseline.ok() && progressive.ok()) << baseline.status().ToString();
    EXPECT_EQ(progressive->pixels, baseline->pixels) << "4:2:0 " << subsample;
    EXPECT_EQ(baseline->width, 61);
    EXPECT_EQ(baseline->height, 45);
  }
  JpegSpec gray = MakeJpegSpec(16, 8, JpegColor::kGray, TestPattern(16, 8, 1, 3));
  gray.quality = 100;
  Result<RgbImage> image = DecodeImage(EncodeJpeg(gray), {});
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  for (size_t i = 0; i < gray.samples.size(); ++i) {
    EXPECT_EQ(image->pixels[3 * i], image->pixels[3 * i + 1]);
    EXPECT_EQ(image->pixels[3 * i], image->pixels[3 * i + 2]);
    EXPECT_NEAR(image->pixels[3 * i], gray.samples[i], 8) << i;
  }
  const JpegSpec rgb = MakeJpegSpec(8, 8, JpegColor::kRgb, TestPattern(8, 8, 3, 4));
  EXPECT_TRUE(DecodeImage(EncodeJpeg(rgb), {}).ok());
}

void ExpectRefused(const std::vector<uint8_t>& bytes, const std::string& want_text,
                   const ImageDecodeOptions& options = {}) {
  Result<RgbImage> image = DecodeImage(bytes, options);
  ASSERT_FALSE(image.ok()) << "accepted; want an error with '" << want_text << "'";
  EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(image.status().message().find(want_text), std::string::npos)
      << image.status().message();
}

ImageDecodeOptions Limit(int64_t max_pixels) {
  ImageDecodeOptions options;
  options.max_pixels = max_pixels;
  return options;
}

// STYLE.md §11: handcrafted bad inputs, each refused with the reason.
TEST(ImageDecodeTest, BadImagesAreRefusedWithTheReason) {
  for (const BadImageCase& bad : BadImageCases()) {
    SCOPED_TRACE(bad.name);
    ExpectRefused(bad.bytes, bad.reason);
  }
  const std::vector<uint8_t> good_png = SmallPng(40, 30);
  const std::vector<uint8_t> good_jpeg = SmallJpeg(40, 30);
  ASSERT_TRUE(DecodeImage(good_png, {}).ok());
  ASSERT_TRUE(DecodeImage(good_jpeg, {}).ok());
  ExpectRefused(std::vector<uint8_t>(good_png.begin(), good_png.begin() + 20), "PNG");
  ExpectRefused({}, "empty image data");
  ExpectRefused(PngWithHeaderOnly(0, 10), "PNG");
  ExpectRefused(PngWithHeaderOnly(100000, 100000), "over the limit of 67108864");
  ExpectRefused(good_png, "40 x 30 = 1200 pixels, over the limit of 1000", Limit(1000));
  ExpectRefused(good_jpeg, "JPEG: 40 x 30 = 1200 pixels, over the limit", Limit(1199));
}

// Flipped bytes anywhere in a PNG or a JPEG give an image or an error, never a crash (the fuzz
// target explores further: fuzz/image_fuzz.cc).
TEST(ImageDecodeTest, CorruptedBytesNeverCrash) {
  PngSpec png = MakePngSpec(24, 16, 2);
  const std::vector<uint8_t> pattern = TestPattern(24, 16, 3, 8);
  png.samples.assign(pattern.begin(), pattern.end());
  JpegSpec progressive = MakeJpegSpec(24, 16, JpegColor::kYCbCr, pattern);
  progressive.progressive = true;
  for (const std::vector<uint8_t>& good :
       {EncodePng(png), EncodeJpeg(MakeJpegSpec(24, 16, JpegColor::kYCbCr, pattern)),
        EncodeJpeg(progressive)}) {
    for (size_t i = 0; i < good.size(); i += 3) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= static_cast<uint8_t>(0x5a + i);
      Result<RgbImage> image = DecodeImage(bad, {});
      if (image.ok()) {
        EXPECT_EQ(image->pixels.size(), static_cast<size_t>(image->width) * image->height * 3);
      }
    }
  }
}

}  // namespace
}  // namespace dsv41

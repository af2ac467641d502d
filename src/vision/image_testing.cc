#include "vision/image_testing.h"

#include <png.h>
#include <zlib.h>

#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/check.h"

namespace dsv41 {
namespace {

[[noreturn]] void OnPngWriteError(png_structp, png_const_charp message) {
  DSV41_CHECK(false, "libpng (test encoder): %s", message);
  std::abort();
}

void AppendPngBytes(png_structp png, png_bytep data, size_t size) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + size);
}

int PngChannels(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_RGB:
      return 3;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return 2;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      return 4;
    default:
      return 1;
  }
}

// One packed PNG row from the spec's sample values (big-endian 16-bit, MSB-first sub-byte).
std::vector<uint8_t> PackPngRow(const PngSpec& spec, int32_t y) {
  const int channels = PngChannels(spec.color_type);
  const size_t values = static_cast<size_t>(spec.width) * channels;
  const uint16_t* in = spec.samples.data() + y * values;
  std::vector<uint8_t> row((values * spec.bit_depth + 7) / 8, 0);
  for (size_t i = 0; i < values; ++i) {
    if (spec.bit_depth == 16) {
      row[2 * i] = static_cast<uint8_t>(in[i] >> 8);
      row[2 * i + 1] = static_cast<uint8_t>(in[i]);
    } else {
      const size_t bit = i * spec.bit_depth;
      row[bit / 8] |= static_cast<uint8_t>(in[i] << (8 - spec.bit_depth - bit % 8));
    }
  }
  return row;
}

}  // namespace

std::vector<uint8_t> EncodePng(const PngSpec& spec) {
  DSV41_CHECK(spec.samples.size() ==
              static_cast<size_t>(spec.width) * spec.height * PngChannels(spec.color_type));
  std::vector<uint8_t> out;
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, OnPngWriteError, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, AppendPngBytes, nullptr);
  png_set_IHDR(png, info, spec.width, spec.height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> palette;
  for (size_t i = 0; i + 2 < spec.palette.size(); i += 3) {
    palette.push_back({spec.palette[i], spec.palette[i + 1], spec.palette[i + 2]});
  }
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  if (!spec.transparency.empty()) {
    png_set_tRNS(png, info, spec.transparency.data(), static_cast<int>(spec.transparency.size()),
                 nullptr);
  }
  std::vector<std::vector<uint8_t>> rows;
  std::vector<png_bytep> row_pointers;
  for (int32_t y = 0; y < spec.height; ++y) rows.push_back(PackPngRow(spec, y));
  for (auto& row : rows) row_pointers.push_back(row.data());
  png_write_info(png, info);
  png_write_image(png, row_pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

PngSpec MakePngSpec(int32_t width, int32_t height, int color_type, int bit_depth) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = color_type;
  spec.bit_depth = bit_depth;
  return spec;
}

JpegSpec MakeJpegSpec(int32_t width, int32_t height, JpegColor color,
                      std::vector<uint8_t> samples) {
  JpegSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color = color;
  spec.samples = std::move(samples);
  return spec;
}

std::vector<uint8_t> EncodeJpeg(const JpegSpec& spec) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr error;
  cinfo.err = jpeg_std_error(&error);  // the default error_exit prints and exits: a test bug
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = spec.width;
  cinfo.image_height = spec.height;
  int channels = 3;
  switch (spec.color) {
    case JpegColor::kGray:
      channels = 1;
      cinfo.in_color_space = JCS_GRAYSCALE;
      break;
    case JpegColor::kCmyk:
      channels = 4;
      cinfo.in_color_space = JCS_CMYK;
      break;
    default:
      cinfo.in_color_space = JCS_RGB;
  }
  DSV41_CHECK(spec.samples.size() == static_cast<size_t>(spec.width) * spec.height * channels);
  cinfo.input_components = channels;
  jpeg_set_defaults(&cinfo);
  if (spec.color == JpegColor::kRgb) jpeg_set_colorspace(&cinfo, JCS_RGB);
  jpeg_set_quality(&cinfo, spec.quality, TRUE);
  if (spec.color == JpegColor::kYCbCr && !spec.subsample_420) {
    cinfo.comp_info[0].h_samp_factor = cinfo.comp_info[0].v_samp_factor = 1;
  }
  if (spec.progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t row_bytes = static_cast<size_t>(spec.width) * channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(spec.samples.data()) + cinfo.next_scanline * row_bytes;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

std::vector<uint8_t> PngWithHeaderOnly(uint32_t width, uint32_t height) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    for (int i = 3; i >= 0; --i) out.push_back(static_cast<uint8_t>(data.size() >> (8 * i)));
    std::vector<uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    out.insert(out.end(), body.begin(), body.end());
    const uLong crc = crc32(0, body.data(), static_cast<uInt>(body.size()));
    for (int i = 3; i >= 0; --i) out.push_back(static_cast<uint8_t>(crc >> (8 * i)));
  };
  std::vector<uint8_t> ihdr;
  for (uint32_t v : {width, height}) {
    for (int i = 3; i >= 0; --i) ihdr.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB
  chunk("IHDR", ihdr);
  chunk("IDAT", {0x78, 0x9c, 0x03, 0x00});
  chunk("IEND", {});
  return out;
}

std::vector<uint8_t> SmallPng(int32_t width, int32_t height) {
  PngSpec spec = MakePngSpec(width, height, 2);
  const std::vector<uint8_t> pattern = TestPattern(width, height, 3, 5);
  spec.samples.assign(pattern.begin(), pattern.end());
  return EncodePng(spec);
}

std::vector<uint8_t> SmallJpeg(int32_t width, int32_t height) {
  return EncodeJpeg(
      MakeJpegSpec(width, height, JpegColor::kYCbCr, TestPattern(width, height, 3, 6)));
}

std::vector<BadImageCase> BadImageCases() {
  const std::vector<uint8_t> png = SmallPng(40, 30);
  const std::vector<uint8_t> jpeg = SmallJpeg(40, 30);
  std::vector<uint8_t> wrong_magic = png;
  wrong_magic[1] = 'X';
  PngSpec deep = MakePngSpec(3, 2, 2, 16);
  deep.samples.assign(18, 40000);
  return {
      {"truncated_png", std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2),
       "PNG: truncated data"},
      {"truncated_jpeg", std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + jpeg.size() / 2),
       "JPEG: truncated data"},
      {"wrong_magic", wrong_magic, "not a PNG or JPEG image"},
      {"zero_size", PngWithHeaderOnly(0, 0), "Image width is zero in IHDR"},
      {"huge_size", PngWithHeaderOnly(100000, 100000), "pixels, over the limit of"},
      {"cmyk_jpeg", EncodeJpeg(MakeJpegSpec(8, 8, JpegColor::kCmyk, TestPattern(8, 8, 4, 7))),
       "JPEG: CMYK color space is not supported"},
      {"png_16_bit", EncodePng(deep), "PNG: 16-bit samples are not supported"},
      {"gif", {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0}, "GIF images are not supported"},
  };
}

std::vector<uint8_t> TestPattern(int32_t width, int32_t height, int channels, uint32_t seed) {
  std::vector<uint8_t> out(static_cast<size_t>(width) * height * channels);
  uint32_t state = seed * 2654435761u + 1;
  for (int32_t y = 0; y < height; ++y) {
    for (int32_t x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        state = state * 1664525u + 1013904223u;
        // A smooth gradient per channel plus a little noise: compressible, not flat.
        const int smooth = (x * (c + 1) * 7 + y * (3 - c % 3) * 5) % 256;
        out[(static_cast<size_t>(y) * width + x) * channels + c] =
            static_cast<uint8_t>((smooth + (state >> 28)) & 0xff);
      }
    }
  }
  return out;
}

}  // namespace dsv41

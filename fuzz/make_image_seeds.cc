// Writes the seed corpus of image_fuzz (fuzz/corpus/image/): small valid PNGs of every color type
// and depth, baseline / progressive / gray / RGB JPEGs, the refused kinds (16-bit PNG, CMYK JPEG,
// GIF), truncated files, and plan inputs. The files are committed; rerun only to change the seeds:
//   cmake --build build/release --target make_image_seeds
//   build/release/fuzz/make_image_seeds fuzz/corpus/image
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "vision/image_testing.h"

namespace {

void Write(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  std::ofstream out(dir + "/" + name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> Plan(std::vector<int32_t> values) {
  std::vector<uint8_t> out = {'P', 'L', 'A', 'N'};
  for (int32_t v : values) {
    for (int i = 0; i < 4; ++i)
      out.push_back(static_cast<uint8_t>(static_cast<uint32_t>(v) >> (8 * i)));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dsv41;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  for (int color_type : {0, 2, 3, 4, 6}) {
    for (int depth : {1, 2, 4, 8, 16}) {
      const bool legal = (color_type == 0 && depth <= 16) || (color_type == 3 && depth <= 8) ||
                         ((color_type == 2 || color_type == 4 || color_type == 6) && depth >= 8);
      if (!legal) continue;
      PngSpec spec = MakePngSpec(9, 7, color_type, depth);
      const int channels = color_type == 2 ? 3 : color_type == 4 ? 2 : color_type == 6 ? 4 : 1;
      for (int i = 0; i < 9 * 7 * channels; ++i) {
        spec.samples.push_back(static_cast<uint16_t>((i * 37 + 5) % (1 << depth)));
      }
      if (color_type == 3) {
        for (int i = 0; i < 3 * (1 << depth); ++i)
          spec.palette.push_back(static_cast<uint8_t>(i * 29));
      }
      spec.interlaced = depth == 8;
      const std::vector<uint8_t> png = EncodePng(spec);
      const std::string name = "png_c" + std::to_string(color_type) + "_d" + std::to_string(depth);
      Write(dir, name + ".png", png);
      if (depth == 8) {
        Write(dir, name + "_truncated.png",
              std::vector<uint8_t>(png.begin(), png.begin() + png.size() * 2 / 3));
      }
    }
  }
  const std::vector<uint8_t> rgb = TestPattern(33, 17, 3, 1);
  JpegSpec jpeg = MakeJpegSpec(33, 17, JpegColor::kYCbCr, rgb);
  const std::vector<uint8_t> baseline = EncodeJpeg(jpeg);
  Write(dir, "jpeg_420.jpg", baseline);
  Write(dir, "jpeg_truncated.jpg",
        std::vector<uint8_t>(baseline.begin(), baseline.begin() + baseline.size() / 2));
  jpeg.progressive = true;
  Write(dir, "jpeg_progressive.jpg", EncodeJpeg(jpeg));
  jpeg.subsample_420 = false;
  Write(dir, "jpeg_progressive_444.jpg", EncodeJpeg(jpeg));
  Write(dir, "jpeg_rgb.jpg",
        EncodeJpeg(MakeJpegSpec(16, 16, JpegColor::kRgb, TestPattern(16, 16, 3, 2))));
  Write(dir, "jpeg_gray.jpg",
        EncodeJpeg(MakeJpegSpec(16, 16, JpegColor::kGray, TestPattern(16, 16, 1, 3))));
  Write(dir, "jpeg_cmyk.jpg",
        EncodeJpeg(MakeJpegSpec(8, 8, JpegColor::kCmyk, TestPattern(8, 8, 4, 4))));
  Write(dir, "gif_header.gif", {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0});
  Write(dir, "plan_released_1024x768", Plan({1024, 768, 14, 3, 1020, 295936}));
  Write(dir, "plan_wide", Plan({8192, 1, 14, 3, 1020, 295936}));
  Write(dir, "plan_tall_r1", Plan({1, 100000, 16, 0, 60, 1000}));
  Write(dir, "plan_small", Plan({3, 2, 13, 1, 10, 40000}));
  return 0;
}

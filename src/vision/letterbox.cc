#include "vision/letterbox.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"

namespace dsv41 {
namespace {

// §6.1: the fraction bits of the fixed-point coefficients (Pillow: 32 − 8 − 2).
constexpr int kPrecisionBits = 22;

// Pillow's bicubic kernel, a = −0.5, evaluated left to right in double.
double BicubicKernel(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// The taps of one pass: output i reads inputs first[i] .. first[i] + count[i] − 1 with the
// fixed-point weights coeffs[i · max_taps + k].
struct ResampleTaps {
  std::vector<int32_t> first;
  std::vector<int32_t> count;
  std::vector<int32_t> coeffs;
  int32_t max_taps = 0;
};

// §6.1 "Coefficients" for in → out samples, in double, then the 8-bit fixed-point weights.
ResampleTaps ComputeTaps(int32_t in_size, int32_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  const double ss = 1.0 / filter_scale;
  ResampleTaps taps;
  taps.max_taps = static_cast<int32_t>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.coeffs.assign(static_cast<size_t>(out_size) * taps.max_taps, 0);
  std::vector<double> weights(taps.max_taps);
  for (int32_t i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // C casts: truncation toward zero.
    const int32_t xmin = std::max(static_cast<int32_t>(center - support + 0.5), 0);
    const int32_t xmax = std::min(static_cast<int32_t>(center + support + 0.5), in_size) - xmin;
    double sum = 0.0;
    for (int32_t k = 0; k < xmax; ++k) {
      weights[k] = BicubicKernel(((k + xmin) - center + 0.5) * ss);
      sum += weights[k];
    }
    int32_t* coeffs = taps.coeffs.data() + static_cast<size_t>(i) * taps.max_taps;
    for (int32_t k = 0; k < xmax; ++k) {
      const double w = sum != 0.0 ? weights[k] / sum : weights[k];
      const double fixed = w * (1 << kPrecisionBits);
      coeffs[k] = static_cast<int32_t>(w < 0 ? fixed - 0.5 : fixed + 0.5);
    }
    taps.first[i] = xmin;
    taps.count[i] = std::max(xmax, 0);
  }
  return taps;
}

// §6.1 "Apply": 2^21 + Σ src · q in 32-bit integers, arithmetic shift, clamp to 8 bits.
uint8_t ApplyTaps(const uint8_t* src, int64_t stride, const int32_t* coeffs, int32_t count) {
  int32_t acc = 1 << (kPrecisionBits - 1);
  for (int32_t k = 0; k < count; ++k) acc += static_cast<int32_t>(src[k * stride]) * coeffs[k];
  return static_cast<uint8_t>(std::clamp(acc >> kPrecisionBits, 0, 255));
}

std::vector<uint8_t> ResizeHorizontal(std::span<const uint8_t> src, int32_t src_w, int32_t h,
                                      int32_t dst_w) {
  const ResampleTaps taps = ComputeTaps(src_w, dst_w);
  std::vector<uint8_t> out(static_cast<size_t>(h) * dst_w * 3);
  for (int32_t y = 0; y < h; ++y) {
    const uint8_t* row = src.data() + static_cast<size_t>(y) * src_w * 3;
    uint8_t* out_row = out.data() + static_cast<size_t>(y) * dst_w * 3;
    for (int32_t x = 0; x < dst_w; ++x) {
      const int32_t* coeffs = taps.coeffs.data() + static_cast<size_t>(x) * taps.max_taps;
      for (int c = 0; c < 3; ++c) {
        out_row[x * 3 + c] =
            ApplyTaps(row + static_cast<size_t>(taps.first[x]) * 3 + c, 3, coeffs, taps.count[x]);
      }
    }
  }
  return out;
}

std::vector<uint8_t> ResizeVertical(std::span<const uint8_t> src, int32_t w, int32_t src_h,
                                    int32_t dst_h) {
  const ResampleTaps taps = ComputeTaps(src_h, dst_h);
  const int64_t stride = static_cast<int64_t>(w) * 3;
  std::vector<uint8_t> out(static_cast<size_t>(dst_h) * stride);
  for (int32_t y = 0; y < dst_h; ++y) {
    const int32_t* coeffs = taps.coeffs.data() + static_cast<size_t>(y) * taps.max_taps;
    const uint8_t* first_row = src.data() + static_cast<size_t>(taps.first[y]) * stride;
    uint8_t* out_row = out.data() + static_cast<size_t>(y) * stride;
    for (int64_t i = 0; i < stride; ++i) {
      out_row[i] = ApplyTaps(first_row + i, stride, coeffs, taps.count[y]);
    }
  }
  return out;
}

}  // namespace

std::vector<uint8_t> ResizeBicubic(std::span<const uint8_t> src, int32_t src_w, int32_t src_h,
                                   int32_t dst_w, int32_t dst_h) {
  DSV41_CHECK(src_w >= 1 && src_h >= 1 && dst_w >= 0 && dst_h >= 0 &&
                  src.size() == static_cast<size_t>(src_w) * src_h * 3,
              "resize %d x %d (%zu bytes) to %d x %d", src_w, src_h, src.size(), dst_w, dst_h);
  if (dst_w == 0 || dst_h == 0) return {};
  std::vector<uint8_t> image(src.begin(), src.end());
  if (dst_w != src_w) image = ResizeHorizontal(image, src_w, src_h, dst_w);
  if (dst_h != src_h) image = ResizeVertical(image, dst_w, src_h, dst_h);
  return image;
}

std::vector<uint8_t> Letterbox(const RgbImage& image, const ImagePlan& plan) {
  DSV41_CHECK(image.width == plan.input_w && image.height == plan.input_h,
              "image %d x %d, plan for %d x %d", image.width, image.height, plan.input_w,
              plan.input_h);
  const std::vector<uint8_t> resized =
      ResizeBicubic(image.pixels, image.width, image.height, plan.resized_w, plan.resized_h);
  std::vector<uint8_t> canvas(static_cast<size_t>(plan.bw) * plan.bh * 3, kLetterboxGray);
  // A contain size with a zero side (an extreme aspect ratio) pastes nothing: all gray.
  if (resized.empty()) return canvas;
  const size_t row_bytes = static_cast<size_t>(plan.resized_w) * 3;
  for (int32_t y = 0; y < plan.resized_h; ++y) {
    std::memcpy(
        canvas.data() + (static_cast<size_t>(y + plan.paste_y) * plan.bw + plan.paste_x) * 3,
        resized.data() + y * row_bytes, row_bytes);
  }
  return canvas;
}

}  // namespace dsv41

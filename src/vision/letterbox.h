#pragma once

// The letterbox of vision.md §6: Pillow's `ImageOps.pad(img, (bw, bh), BICUBIC, color=(127, 127,
// 127), centering=(0.5, 0.5))`, bit for bit. The resampler is Pillow's 8-bit BICUBIC (§6.1):
// separable, horizontal pass first (only when the width changes) into an 8-bit image, then the
// vertical pass (only when the height changes), each with fixed-point coefficients (22 fraction
// bits) computed in double.

#include <cstdint>
#include <span>
#include <vector>

#include "vision/image_decode.h"
#include "vision/image_plan.h"

namespace dsv41 {

// The gray of the canvas around the resized image (vision.md §6: u8 127, not 0).
inline constexpr uint8_t kLetterboxGray = 127;

// Resizes an 8-bit RGB image [src_h, src_w, 3] to [dst_h, dst_w, 3] as Pillow's
// `Image.resize(..., BICUBIC)` does; the same size is an exact copy, a zero side gives nothing.
// Requires src_w, src_h >= 1 and dst_w, dst_h >= 0 (caller bugs otherwise).
std::vector<uint8_t> ResizeBicubic(std::span<const uint8_t> src, int32_t src_w, int32_t src_h,
                                   int32_t dst_w, int32_t dst_h);

// The canvas [plan.bh, plan.bw, 3]: `image` (of the plan's input size) resized to the plan's
// contain size and pasted at its offset on gray.
std::vector<uint8_t> Letterbox(const RgbImage& image, const ImagePlan& plan);

}  // namespace dsv41

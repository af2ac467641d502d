#pragma once

// The size plan of one image (vision.md §5) and the contain size and paste offset of its
// letterbox (§6): pure integer and IEEE-double arithmetic in the spec's operation order, so the
// plan is exact (compiled with -ffp-contract=off, no fast-math).

#include <cstdint>

#include "base/status.h"

namespace dsv41 {

// The vision_config fields the plan reads (vision.md §1); validated with the config.
struct ImagePlanParams {
  int32_t patch_size = 0;        // p
  int32_t downsample_ratio = 0;  // r
  int32_t max_image_tokens = 0;  // M: bound on the span length L, delimiters included
  int64_t min_pixels = 0;        // P: smaller images are planned larger
};

// The plan of one image. Field comments give the spec's names (and the goldens' plan.json keys).
struct ImagePlan {
  int32_t input_w = 0;  // the decoded size
  int32_t input_h = 0;
  bool upscaled = false;  // below min_pixels: planned from an upscaled size
  bool solver = false;    // the span was over M: shrunk by the solver
  int64_t plan_w = 0;     // the (possibly upscaled) size the plan starts from
  int64_t plan_h = 0;
  int32_t bw = 0;  // the letterbox canvas, a multiple of p each way
  int32_t bh = 0;
  int32_t patch_rows = 0;   // Hv = bh / p
  int32_t patch_cols = 0;   // Wv = bw / p
  int32_t token_rows = 0;   // H = ceil(Hv / r)
  int32_t token_cols = 0;   // W = ceil(Wv / r)
  int32_t span_length = 0;  // L = H · (W + 1) + 2
  int32_t resized_w = 0;    // the contain size the source is resized to (0 allowed: nothing pasted)
  int32_t resized_h = 0;
  int32_t paste_x = 0;  // where the resized image sits on the canvas
  int32_t paste_y = 0;

  int64_t num_patches() const { return int64_t{patch_rows} * patch_cols; }
  int64_t num_image_tokens() const { return int64_t{token_rows} * token_cols; }
};

// Plans an image of the decoded size width × height. InvalidArgument for a size that is not
// positive, parameters that cannot plan (p, r, M below their minimum), or a size no canvas
// within M fits (a zero canvas side, which extreme aspect ratios with r = 1 can give).
Result<ImagePlan> PlanImage(int64_t width, int64_t height, const ImagePlanParams& params);

// Python's round() on doubles: half to even (IEEE nearbyint in the default rounding mode).
double RoundHalfEven(double x);

}  // namespace dsv41

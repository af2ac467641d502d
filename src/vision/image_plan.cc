#include "vision/image_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsv41 {
namespace {

// The canvas (bw, bh) gives the grid and the span length (§5 "recompute").
void SetGrid(int64_t bw, int64_t bh, const ImagePlanParams& params, ImagePlan& plan) {
  const int64_t p = params.patch_size;
  const int64_t r = params.downsample_ratio;
  plan.bw = static_cast<int32_t>(bw);
  plan.bh = static_cast<int32_t>(bh);
  plan.patch_rows = static_cast<int32_t>(bh / p);
  plan.patch_cols = static_cast<int32_t>(bw / p);
  plan.token_rows = static_cast<int32_t>((plan.patch_rows + r - 1) / r);
  plan.token_cols = static_cast<int32_t>((plan.patch_cols + r - 1) / r);
  plan.span_length = plan.token_rows * (plan.token_cols + 1) + 2;
}

// §5's ceil(w / p) · p (true division, then ceil) for the sizes a plan meets.
int64_t CeilToMultiple(int64_t w, int64_t p) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(w) / static_cast<double>(p))) * p;
}

// §5's shrink solver for a span over M, from the (possibly upscaled) size w × h: the canvas.
void SolveShrink(int64_t w, int64_t h, const ImagePlanParams& params, int64_t& bw, int64_t& bh) {
  const int64_t p = params.patch_size;
  const int64_t m = params.max_image_tokens;
  const int64_t cell = p * params.downsample_ratio;
  const double rho = static_cast<double>(h) / static_cast<double>(w);
  const double mw = std::sqrt(static_cast<double>(m - 2) / rho + 0.25) - 0.5;
  const double mh = mw * rho;
  if (mw < 1) {
    bh = (m - 2) / 2 * cell;
    bw = cell;
  } else if (mh < 1) {
    bh = cell;
    bw = (m - 3) * cell;
  } else {
    // (int · int) / int in double, as Python's true division of ints.
    const double beta_w =
        static_cast<double>(static_cast<int64_t>(std::floor(mw)) * cell) / static_cast<double>(w);
    const double beta_h =
        static_cast<double>(static_cast<int64_t>(std::floor(mh)) * cell) / static_cast<double>(h);
    const double beta = std::min(beta_w, beta_h);
    bh = static_cast<int64_t>(std::floor(static_cast<double>(h) * beta / static_cast<double>(p))) *
         p;
    bw = static_cast<int64_t>(std::floor(static_cast<double>(w) * beta / static_cast<double>(p))) *
         p;
  }
}

// §6 step 1 and 3: the contain size of the decoded image in the canvas and its paste offset.
void SetContain(ImagePlan& plan) {
  const double iw = plan.input_w;
  const double ih = plan.input_h;
  const double a = iw / ih;
  const double d = static_cast<double>(plan.bw) / static_cast<double>(plan.bh);
  plan.resized_w = plan.bw;
  plan.resized_h = plan.bh;
  if (a > d) {
    plan.resized_h = static_cast<int32_t>(RoundHalfEven((ih / iw) * plan.bw));
  } else if (a < d) {
    plan.resized_w = static_cast<int32_t>(RoundHalfEven((iw / ih) * plan.bh));
  }
  plan.paste_x = 0;
  plan.paste_y = 0;
  if (plan.resized_w != plan.bw) {
    plan.paste_x = static_cast<int32_t>(RoundHalfEven((plan.bw - plan.resized_w) * 0.5));
  } else if (plan.resized_h != plan.bh) {
    plan.paste_y = static_cast<int32_t>(RoundHalfEven((plan.bh - plan.resized_h) * 0.5));
  }
}

}  // namespace

double RoundHalfEven(double x) {
  // nearbyint follows the current rounding mode; the process never leaves round-to-nearest.
  return std::nearbyint(x);
}

Result<ImagePlan> PlanImage(int64_t width, int64_t height, const ImagePlanParams& params) {
  if (params.patch_size < 1 || params.downsample_ratio < 1 || params.max_image_tokens < 4 ||
      params.min_pixels < 0) {
    return InvalidArgumentError(
        "vision plan: patch_size %d, downsample_ratio %d, max_image_tokens %d, min_pixels %lld "
        "cannot plan (want p >= 1, r >= 1, M >= 4, P >= 0)",
        params.patch_size, params.downsample_ratio, params.max_image_tokens,
        static_cast<long long>(params.min_pixels));
  }
  // Sizes beyond 2^31 cannot be decoded; refusing them keeps every product below in range.
  constexpr int64_t kMaxSide = std::numeric_limits<int32_t>::max();
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide) {
    return InvalidArgumentError("image size %lld x %lld cannot be planned",
                                static_cast<long long>(width), static_cast<long long>(height));
  }
  ImagePlan plan;
  plan.input_w = static_cast<int32_t>(width);
  plan.input_h = static_cast<int32_t>(height);
  int64_t w = width;
  int64_t h = height;
  if (w * h < params.min_pixels) {
    const double s =
        std::pow(static_cast<double>(params.min_pixels) / static_cast<double>(w * h), 0.5);
    w = static_cast<int64_t>(static_cast<double>(w) * s);
    h = static_cast<int64_t>(static_cast<double>(h) * s);
    plan.upscaled = true;
  }
  plan.plan_w = w;
  plan.plan_h = h;
  const int64_t p = params.patch_size;
  const int64_t m = params.max_image_tokens;
  // Up to the shrink, the canvas may be far beyond int32: the span length decides in 64 bits.
  int64_t bw = CeilToMultiple(w, p);
  int64_t bh = CeilToMultiple(h, p);
  const int64_t r = params.downsample_ratio;
  const int64_t rows = (bh / p + r - 1) / r;
  const int64_t cols = (bw / p + r - 1) / r;
  if (rows * (cols + 1) + 2 > m) {
    SolveShrink(w, h, params, bw, bh);
    plan.solver = true;
  }
  if (bw < p || bh < p || bw > kMaxSide || bh > kMaxSide) {
    return InvalidArgumentError(
        "image size %lld x %lld: no canvas within %lld tokens fits its aspect ratio (planned "
        "%lld x %lld)",
        static_cast<long long>(width), static_cast<long long>(height), static_cast<long long>(m),
        static_cast<long long>(bw), static_cast<long long>(bh));
  }
  SetGrid(bw, bh, params, plan);
  if (plan.span_length > m) {
    return InvalidArgumentError(
        "image size %lld x %lld: the planned span of %d tokens is over %lld",
        static_cast<long long>(width), static_cast<long long>(height), plan.span_length,
        static_cast<long long>(m));
  }
  SetContain(plan);
  return plan;
}

}  // namespace dsv41

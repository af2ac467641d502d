#pragma once

// `dsv41 bench --image FILE`: the vision tower's speed on one image (STYLE.md §12): the median
// time of the tower (patches, ViT, aligner) over repetitions, images/s, and its multiply-adds as
// GFLOP/s against the machine's arithmetic roof; the frontend's decode + plan + letterbox time
// apart; and what the released tower (vision.md §1: 32 layers, width 1024) would cost per image
// at the rate measured.

#include <cstdint>

#include "base/machine_limits.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/loaded_model.h"
#include "vision/image_input.h"

namespace dsv41 {

struct VisionBenchFigures {
  ImagePlan plan;
  double prepare_seconds = 0;  // decode, plan, letterbox (the HTTP thread's share), median
  double encode_seconds = 0;   // patches, ViT and aligner on the pool, median
  double images_per_second = 0;
  double multiply_adds = 0;      // per image: weight products and the attention's two products
  double gflops_per_second = 0;  // 2 · multiply_adds / encode_seconds / 1e9
  double roof_fraction = 0;      // of MachineLimits::compute_roof_flops_per_second
  // The released tower on the same image (planned with the released vision_config and the
  // text width of the release): its multiply-adds, and its time at the rate measured here.
  ImagePlan released_plan;
  double released_multiply_adds = 0;
  double released_seconds_at_measured_rate = 0;
};

// Encodes the image of `bytes` `repetitions` times (after one warm-up) on `pool` with `numerics`.
// InvalidArgument when the model has no tower or the image is bad.
Result<VisionBenchFigures> RunVisionBench(const LoadedTextModel& model,
                                          std::span<const uint8_t> bytes,
                                          const ImageDecodeOptions& decode, ThreadPool& pool,
                                          const MachineLimits& limits, int32_t repetitions,
                                          Numerics numerics);

}  // namespace dsv41

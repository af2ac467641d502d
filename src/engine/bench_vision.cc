#include "engine/bench_vision.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "config/config.h"
#include "model/vision_tower.h"
#include "vision/patches.h"

namespace dsv41 {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

}  // namespace

Result<VisionBenchFigures> RunVisionBench(const LoadedTextModel& model,
                                          std::span<const uint8_t> bytes,
                                          const ImageDecodeOptions& decode, ThreadPool& pool,
                                          const MachineLimits& limits, int32_t repetitions,
                                          Numerics numerics) {
  if (model.vision == nullptr) {
    return InvalidArgumentError("bench --image: the model has no vision tower");
  }
  const VisionTower& tower = *model.vision;
  const VisionConfig& v = tower.config();
  VisionBenchFigures out;
  std::vector<double> prepare_times, encode_times;
  StepArena arena;
  ExecContext ctx{pool, arena, numerics};
  std::vector<float> patches, rows;
  for (int32_t r = -1; r < std::max(repetitions, 1); ++r) {  // r = -1: the warm-up
    const auto begin = std::chrono::steady_clock::now();
    DSV41_ASSIGN_OR_RETURN(PreparedImage image, PrepareImage(bytes, v.plan_params(), decode));
    const double prepared = SecondsSince(begin);
    const auto encode_begin = std::chrono::steady_clock::now();
    const ImagePlan& plan = image.plan;
    patches.resize(static_cast<size_t>(plan.num_patches() * v.patch_values()));
    ExtractPatches(image.canvas, plan.bw, plan.bh, v.patch_size, patches);
    rows.resize(static_cast<size_t>(plan.num_image_tokens() * tower.output_dim()));
    arena.Reset();
    tower.Encode(patches, std::span<const ImagePlan>(&plan, 1), rows, ctx);
    if (r >= 0) {
      prepare_times.push_back(prepared);
      encode_times.push_back(SecondsSince(encode_begin));
    }
    out.plan = plan;
  }
  out.prepare_seconds = Median(prepare_times);
  out.encode_seconds = Median(encode_times);
  out.images_per_second = out.encode_seconds > 0 ? 1.0 / out.encode_seconds : 0;
  out.multiply_adds = VisionTower::MultiplyAddsPerImage(v, tower.output_dim(), out.plan);
  out.gflops_per_second = 2 * out.multiply_adds / out.encode_seconds / 1e9;
  const double roof = limits.compute_roof_flops_per_second();
  out.roof_fraction = roof > 0 ? out.gflops_per_second * 1e9 / roof : 0;
  const VisionConfig released = ReleasedVisionConfig();
  DSV41_ASSIGN_OR_RETURN(out.released_plan,
                         PlanImage(out.plan.input_w, out.plan.input_h, released.plan_params()));
  out.released_multiply_adds =
      VisionTower::MultiplyAddsPerImage(released, ReleasedConfig().hidden_size, out.released_plan);
  out.released_seconds_at_measured_rate =
      2 * out.released_multiply_adds / (out.gflops_per_second * 1e9);
  return out;
}

}  // namespace dsv41

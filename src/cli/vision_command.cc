// `dsv41 vision`: one image through the vision input path of a model (vision.md §4–§9), every
// stage written out for comparison with a reference: plan.json (the keys of the goldens'
// image{k}_plan.json), letterboxed.npy (uint8 [bh, bw, 3]), patches.npy (float32 [N, 3p²]),
// vit_out.npy (float32 [N, D]) and aligner_out.npy (float32 [H · W, dim]).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"
#include "base/npy.h"
#include "base/sha256.h"
#include "base/thread_pool.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/image_flags.h"
#include "config/config.h"
#include "model/vision_tower.h"
#include "model/weights.h"
#include "vision/patches.h"

namespace dsv41 {
namespace {

struct VisionFlags {
  std::string model_dir;
  std::string image;
  std::string out_dir;
  int threads = 0;
  std::string numerics = "fast";
  ImageFlags image_flags;
};

// The goldens' image{k}_plan.json fields.
OrderedJson PlanJson(const ImagePlan& plan, const std::string& file, const Sha256Digest& sha256) {
  OrderedJson j;
  j["input_w"] = plan.input_w;
  j["input_h"] = plan.input_h;
  j["upscaled"] = plan.upscaled;
  j["solver"] = plan.solver;
  j["plan_w"] = plan.plan_w;
  j["plan_h"] = plan.plan_h;
  j["bw"] = plan.bw;
  j["bh"] = plan.bh;
  j["Hv"] = plan.patch_rows;
  j["Wv"] = plan.patch_cols;
  j["H"] = plan.token_rows;
  j["W"] = plan.token_cols;
  j["L"] = plan.span_length;
  j["n_patches"] = plan.num_patches();
  j["resized_w"] = plan.resized_w;
  j["resized_h"] = plan.resized_h;
  j["paste_x"] = plan.paste_x;
  j["paste_y"] = plan.paste_y;
  j["file"] = std::filesystem::path(file).filename().string();
  j["sha256"] = Sha256Hex(sha256);
  return j;
}

// The tower's two outputs for the image's patches.
Status WriteTowerOutputs(const VisionFlags& flags, const ModelWeights& weights,
                         const ImagePlan& plan, std::span<const float> patches) {
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<VisionTower> tower, VisionTower::Load(weights));
  DSV41_ASSIGN_OR_RETURN(Numerics numerics, ParseNumerics(flags.numerics));
  EngineFlags engine_flags;
  engine_flags.threads = flags.threads;
  ThreadPool pool(ComputeThreads(engine_flags));
  StepArena arena;
  ExecContext ctx{pool, arena};
  ctx.numerics = numerics;
  const int64_t d = tower->config().hidden_size;
  const int64_t dim = tower->output_dim();
  std::vector<float> vit_out(static_cast<size_t>(plan.num_patches() * d));
  tower->ForwardVit(patches, std::span<const ImagePlan>(&plan, 1), vit_out, ctx);
  std::vector<float> rows(static_cast<size_t>(plan.num_image_tokens() * dim));
  tower->ForwardAligner(vit_out, std::span<const ImagePlan>(&plan, 1), rows, ctx);
  const std::string dir = flags.out_dir + "/";
  const int64_t vit_shape[] = {plan.num_patches(), d};
  DSV41_RETURN_IF_ERROR(WriteNpyFloat32(dir + "vit_out.npy", vit_out, vit_shape));
  const int64_t rows_shape[] = {plan.num_image_tokens(), dim};
  return WriteNpyFloat32(dir + "aligner_out.npy", rows, rows_shape);
}

Status WriteStages(const VisionFlags& flags, const ModelWeights& weights) {
  const VisionConfig& vision = weights.config().vision;
  DSV41_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadImageFile(flags.image));
  Result<PreparedImage> image =
      PrepareImage(bytes, vision.plan_params(), flags.image_flags.decode_options());
  if (!image.ok()) return image.status().WithPrefix("image '" + flags.image + "'");
  const ImagePlan& plan = image->plan;
  std::error_code error;
  std::filesystem::create_directories(flags.out_dir, error);
  const std::string dir = flags.out_dir + "/";
  DSV41_RETURN_IF_ERROR(WriteStringToFile(
      dir + "plan.json", PlanJson(plan, flags.image, Sha256Of(bytes)).dump(1) + "\n"));
  const int64_t canvas_shape[] = {plan.bh, plan.bw, 3};
  DSV41_RETURN_IF_ERROR(WriteNpyUint8(dir + "letterboxed.npy", image->canvas, canvas_shape));
  std::vector<float> patches(image->canvas.size());
  ExtractPatches(image->canvas, plan.bw, plan.bh, vision.patch_size, patches);
  const int64_t patch_shape[] = {plan.num_patches(), vision.patch_values()};
  DSV41_RETURN_IF_ERROR(WriteNpyFloat32(dir + "patches.npy", patches, patch_shape));
  DSV41_RETURN_IF_ERROR(WriteTowerOutputs(flags, weights, plan, patches));
  std::fprintf(stderr, "image %d x %d: canvas %d x %d, %d x %d tokens, span of %d positions\n",
               plan.input_w, plan.input_h, plan.bw, plan.bh, plan.token_cols, plan.token_rows,
               plan.span_length);
  return OkStatus();
}

int RunVision(const VisionFlags& flags) {
  Result<ModelWeights> weights = ModelWeights::Load(flags.model_dir, LoadOptions{});
  if (!weights.ok()) {
    std::fprintf(stderr, "dsv41 vision: %s\n", weights.status().ToString().c_str());
    return 1;
  }
  if (!weights->config().vision.has_tower()) {
    std::fprintf(stderr, "dsv41 vision: %s: the model has no vision tower\n",
                 flags.model_dir.c_str());
    return 1;
  }
  const Status written = WriteStages(flags, *weights);
  if (!written.ok()) {
    std::fprintf(stderr, "dsv41 vision: %s\n", written.ToString().c_str());
    return 1;
  }
  return 0;
}

std::function<int()> SetupVision(CLI::App& sub) {
  auto flags = std::make_shared<VisionFlags>();
  sub.add_option("-m,--model", flags->model_dir, "model directory")->required();
  sub.add_option("--image", flags->image, "a PNG or JPEG file")->required();
  sub.add_option("--out-dir", flags->out_dir,
                 "where plan.json, letterboxed.npy, patches.npy, vit_out.npy and aligner_out.npy "
                 "are written")
      ->required();
  sub.add_option("-t,--threads", flags->threads, "compute threads (0: all cores)")
      ->capture_default_str();
  sub.add_option("--numerics", flags->numerics,
                 "weight-product accumulation: fast, reference, fma or bf16-dot")
      ->capture_default_str();
  AddImageFlags(sub, flags->image_flags);
  return [flags] { return RunVision(*flags); };
}

DSV41_REGISTER_COMMAND(kVisionCommand, "vision",
                       "one image through the vision input path, every stage written as .npy",
                       SetupVision);

}  // namespace
}  // namespace dsv41

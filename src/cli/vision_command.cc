// `dsv41 vision`: one image through the vision input path of a model (vision.md §4–§9), every
// stage written out for comparison with a reference: plan.json (the keys of the goldens'
// image{k}_plan.json), letterboxed.npy (uint8 [bh, bw, 3]) and patches.npy (float32 [N, 3p²]).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"
#include "base/npy.h"
#include "base/sha256.h"
#include "cli/command.h"
#include "cli/image_flags.h"
#include "config/config.h"
#include "vision/patches.h"

namespace dsv41 {
namespace {

struct VisionFlags {
  std::string model_dir;
  std::string image;
  std::string out_dir;
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

Status WriteStages(const VisionFlags& flags, const VisionConfig& vision) {
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
  std::fprintf(stderr, "image %d x %d: canvas %d x %d, %d x %d tokens, span of %d positions\n",
               plan.input_w, plan.input_h, plan.bw, plan.bh, plan.token_cols, plan.token_rows,
               plan.span_length);
  return OkStatus();
}

int RunVision(const VisionFlags& flags) {
  Result<ModelConfig> config = LoadModelConfig(flags.model_dir);
  if (!config.ok()) {
    std::fprintf(stderr, "dsv41 vision: %s\n", config.status().ToString().c_str());
    return 1;
  }
  if (!config->vision.has_tower()) {
    std::fprintf(stderr, "dsv41 vision: %s: the model has no vision tower\n",
                 flags.model_dir.c_str());
    return 1;
  }
  const Status written = WriteStages(flags, config->vision);
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
                 "where plan.json, letterboxed.npy and patches.npy are written")
      ->required();
  AddImageFlags(sub, flags->image_flags);
  return [flags] { return RunVision(*flags); };
}

DSV41_REGISTER_COMMAND(kVisionCommand, "vision",
                       "one image through the vision input path, every stage written as .npy",
                       SetupVision);

}  // namespace
}  // namespace dsv41

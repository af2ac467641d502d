#include "cli/image_flags.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <utility>

#include "base/mapped_file.h"
#include "base/npy.h"
#include "base/sha256.h"

namespace dsv41 {

void AddImageFlags(CLI::App& sub, ImageFlags& flags) {
  sub.add_option("--max-image-pixels", flags.max_image_pixels,
                 "refuse images with more pixels (width x height, read from the header)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

Result<std::vector<uint8_t>> ReadImageFile(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  const auto bytes = file.bytes();
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                              reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size());
}

Result<PreparedImage> PrepareImageFile(const std::string& path, const ImagePlanParams& params,
                                       const ImageFlags& flags) {
  Result<std::vector<uint8_t>> bytes = ReadImageFile(path);
  if (!bytes.ok()) return bytes.status();
  Result<PreparedImage> image = PrepareImage(*bytes, params, flags.decode_options());
  if (!image.ok()) return image.status().WithPrefix("image '" + path + "'");
  return image;
}

namespace {

// An --image-embeddings file: float32 [H, W, hidden] aligner rows of one image.
Result<RequestImage> ReadImageEmbeddings(const std::string& path, int32_t hidden_size) {
  DSV41_ASSIGN_OR_RETURN(NpyArray array, ReadNpy(path));
  if (array.descr != "<f4" || array.shape.size() != 3 || array.shape[0] < 1 || array.shape[1] < 1 ||
      array.shape[2] != hidden_size || array.shape[0] > 1 << 16 || array.shape[1] > 1 << 16) {
    return InvalidArgumentError("%s: want float32 [H, W, %d] image embeddings", path.c_str(),
                                hidden_size);
  }
  RequestImage image;
  image.plan.token_rows = static_cast<int32_t>(array.shape[0]);
  image.plan.token_cols = static_cast<int32_t>(array.shape[1]);
  image.plan.span_length = image.plan.token_rows * (image.plan.token_cols + 1) + 2;
  image.embeddings = std::make_shared<const std::vector<float>>(array.ToFloat());
  image.content_key =
      ImageSpanKey(Sha256Of(std::span<const uint8_t>(
                       reinterpret_cast<const uint8_t*>(array.data.data()), array.data.size())),
                   image.plan);
  return image;
}

}  // namespace

Result<ImageFilePrompt> AttachImageFiles(const LoadedTextModel& model,
                                         std::span<const std::string> paths,
                                         std::span<const std::string> embedding_paths,
                                         const ImageFlags& flags, std::span<const int32_t> ids) {
  ImageFilePrompt out;
  for (const std::string& path : paths) {
    if (model.vision == nullptr) {
      return InvalidArgumentError("--image: the model has no vision tower");
    }
    DSV41_ASSIGN_OR_RETURN(PreparedImage prepared,
                           PrepareImageFile(path, model.vision->config().plan_params(), flags));
    RequestImage image;
    image.plan = prepared.plan;
    image.content_key = ImageSpanKey(prepared.content_sha256, prepared.plan);
    image.canvas = std::make_shared<const std::vector<uint8_t>>(std::move(prepared.canvas));
    out.images.push_back(std::move(image));
  }
  for (const std::string& path : embedding_paths) {
    DSV41_ASSIGN_OR_RETURN(RequestImage image,
                           ReadImageEmbeddings(path, model.config().hidden_size));
    out.images.push_back(std::move(image));
  }
  std::vector<ImagePlan> plans;
  for (const RequestImage& image : out.images) plans.push_back(image.plan);
  DSV41_ASSIGN_OR_RETURN(out.expanded,
                         ExpandImagePlaceholders(ids, model.config().image_token_id, plans));
  for (size_t k = 0; k < out.images.size(); ++k) {
    out.images[k].span_start = out.expanded.span_starts[k];
  }
  return out;
}

}  // namespace dsv41

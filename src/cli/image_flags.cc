#include "cli/image_flags.h"

#include <CLI/CLI.hpp>

#include "base/mapped_file.h"

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

}  // namespace dsv41

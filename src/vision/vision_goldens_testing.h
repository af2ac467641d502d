#pragma once

// The vision goldens (goldens/vision/README.md) for tests: case names, paths, the tiny-v
// vision_config's plan parameters, read as shipped.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"
#include "base/npy.h"
#include "vision/image_plan.h"

namespace dsv41 {

inline const std::string kVisionGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/vision";
inline const std::string kVisionCheckpoint = kVisionGoldens + "/checkpoints/tiny-v";

inline const std::vector<std::string>& VisionGoldenCases() {
  static const std::vector<std::string> cases = {"c1_grad", "c2_shapes", "c3_wide", "c4_tall"};
  return cases;
}
inline std::string VisionCaseDir(const std::string& name) {
  return kVisionGoldens + "/cases/" + name;
}

// A JSON file of the goldens (a failed read fails the test and gives null).
inline Json ReadGoldenJson(const std::string& path) {
  Result<Json> json = ReadJsonFile(path);
  EXPECT_TRUE(json.ok()) << json.status().ToString();
  return json.ok() ? std::move(json).value() : Json();
}
inline NpyArray ReadVisionArray(const std::string& path) {
  Result<NpyArray> a = ReadNpy(path);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(a).value() : NpyArray{};
}
// The bytes of a file of the goldens.
inline std::vector<uint8_t> ReadGoldenBytes(const std::string& path) {
  Result<MappedFile> file = MappedFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (!file.ok()) return {};
  const auto bytes = file->bytes();
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()),
                              reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size());
}

// The plan parameters of tiny-v's vision_config.
inline ImagePlanParams TinyVPlanParams() {
  const Json config = ReadGoldenJson(kVisionCheckpoint + "/config.json");
  const Json& vision = config["vision_config"];
  return ImagePlanParams{.patch_size = vision["patch_size"].get<int32_t>(),
                         .downsample_ratio = vision["downsample_ratio"].get<int32_t>(),
                         .max_image_tokens = vision["max_image_tokens"].get<int32_t>(),
                         .min_pixels = vision["min_pixels"].get<int64_t>()};
}

}  // namespace dsv41

#pragma once

// The vision goldens (goldens/vision/README.md) for tests: case names, paths, the tiny-v
// vision_config's plan parameters, read as shipped.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// §13.3 for rows [n, width]: every element within 0.125 + 2^-6 |golden|, every row's cosine with
// the golden row at least `min_cosine`. Returns the largest |d| (for the log).
inline double ExpectWithinTowerTolerance(const std::vector<float>& got,
                                         const std::vector<float>& want, int64_t width,
                                         double min_cosine, bool check_elements,
                                         const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size() || width == 0) return INFINITY;
  double max_diff = 0;
  int64_t bad_elements = 0, bad_rows = 0;
  for (size_t row = 0; row * width < got.size(); ++row) {
    double dot = 0, got2 = 0, want2 = 0;
    for (int64_t c = 0; c < width; ++c) {
      const double g = got[row * width + c], w = want[row * width + c];
      const double diff = std::fabs(g - w);
      max_diff = std::max(max_diff, diff);
      if (check_elements && diff > 0.125 + std::ldexp(std::fabs(w), -6)) ++bad_elements;
      dot += g * w;
      got2 += g * g;
      want2 += w * w;
    }
    const double cosine = got2 == 0 && want2 == 0 ? 1.0 : dot / std::sqrt(got2 * want2);
    if (!(cosine >= min_cosine)) ++bad_rows;
  }
  EXPECT_EQ(bad_elements, 0) << what << ": elements beyond 0.125 + 2^-6 |golden|";
  EXPECT_EQ(bad_rows, 0) << what << ": rows with cosine below " << min_cosine;
  return max_diff;
}

}  // namespace dsv41

#pragma once

// The nine model golden cases (goldens/model/README.md: tiny-a/b/c × chat5/mix40/long120) and
// readers for their arrays, shared by the golden tests of this folder.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/npy.h"

namespace dsv41 {

inline const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model";

struct GoldenCase {
  const char* model;
  const char* prompt;
};

// "tiny_a_chat5": a test-name-safe name of the case.
inline std::string GoldenCaseName(const ::testing::TestParamInfo<GoldenCase>& info) {
  std::string name = std::string(info.param.model) + "_" + info.param.prompt;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

inline const std::vector<GoldenCase>& AllGoldenCases() {
  static const std::vector<GoldenCase> cases = {
      {"tiny-a", "chat5"}, {"tiny-a", "mix40"}, {"tiny-a", "long120"},
      {"tiny-b", "chat5"}, {"tiny-b", "mix40"}, {"tiny-b", "long120"},
      {"tiny-c", "chat5"}, {"tiny-c", "mix40"}, {"tiny-c", "long120"}};
  return cases;
}

// The array at `path` (a failed read fails the test and gives an empty array).
inline NpyArray ReadGolden(const std::string& path) {
  Result<NpyArray> a = ReadNpy(path);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(a).value() : NpyArray{};
}
inline std::vector<float> ReadFloats(const std::string& path) { return ReadGolden(path).ToFloat(); }
inline std::vector<int64_t> ReadInts(const std::string& path) { return ReadGolden(path).ToInt64(); }

}  // namespace dsv41

// Code-shape rules of STYLE.md that a compiler does not check:
// - §1: a layer folder includes only its own layer and the layers below it (docs/layers.md);
// - the server reaches the engine only through engine/engine_api.h: none of the headers it
//   includes, directly or through others, is the engine core or in model/, kv/, config/ or
//   kernels/ (docs/layers.md);
// - §8: model/, kernels/ and engram/ code (not their tests) uses numerics/arith.h for elementary
//   functions, never the C library's (model.md §12.8 fixes their rounding).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace dsv41 {
namespace {

const std::filesystem::path kSrc = std::filesystem::path(DSV41_SOURCE_ROOT) / "src";

// Bottom to top, as docs/layers.md lists them.
const std::map<std::string, int> kLayerRank = {
    {"base", 0},    {"numerics", 1}, {"vision", 2},  {"checkpoint", 3}, {"kernels", 4},
    {"text", 5},    {"config", 6},   {"kv", 7},      {"engram", 8},     {"model", 9},
    {"engine", 10}, {"tiny", 11},    {"server", 12}, {"cli", 13},
};

std::vector<std::filesystem::path> SourceFiles() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(kSrc)) {
    const std::string ext = entry.path().extension().string();
    if (entry.is_regular_file() && (ext == ".h" || ext == ".cc")) files.push_back(entry.path());
  }
  return files;
}

std::string LayerOf(const std::filesystem::path& file) {
  return std::filesystem::relative(file, kSrc).begin()->string();
}

TEST(LayeringTest, EveryFolderIsAKnownLayer) {
  for (const auto& file : SourceFiles()) {
    EXPECT_TRUE(kLayerRank.count(LayerOf(file))) << file << ": add its layer to docs/layers.md";
  }
}

TEST(LayeringTest, NoIncludeReachesAHigherLayer) {
  const std::regex include_re(R"(^\s*#\s*include\s+"([a-z_]+)/)");
  int checked = 0;
  for (const auto& file : SourceFiles()) {
    const auto own = kLayerRank.find(LayerOf(file));
    if (own == kLayerRank.end()) continue;
    std::ifstream in(file);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      std::smatch m;
      if (!std::regex_search(line, m, include_re)) continue;
      const auto target = kLayerRank.find(m[1].str());
      if (target == kLayerRank.end()) continue;
      ++checked;
      EXPECT_LE(target->second, own->second)
          << file.string() << ":" << line_no << ": layer '" << own->first
          << "' includes the higher layer '" << target->first << "'";
    }
  }
  EXPECT_GT(checked, 100) << "the scan found too few includes to be meaningful";
}

// The project headers `file` includes, as paths under src/.
std::vector<std::filesystem::path> ProjectIncludes(const std::filesystem::path& file) {
  const std::regex include_re(R"re(^\s*#\s*include\s+"([^"]+)")re");
  std::vector<std::filesystem::path> includes;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, include_re)) continue;
    const std::filesystem::path target = kSrc / m[1].str();
    if (std::filesystem::exists(target)) includes.push_back(target);
  }
  return includes;
}

TEST(LayeringTest, ServerReachesTheEngineOnlyThroughItsApi) {
  const std::set<std::string> forbidden_layers = {"model", "kv", "config", "kernels"};
  const std::filesystem::path engine_core = kSrc / "engine" / "engine.h";
  // Every file the server's files reach, with the file that first included it.
  std::map<std::filesystem::path, std::filesystem::path> reached;
  std::vector<std::filesystem::path> todo;
  for (const auto& file : SourceFiles()) {
    if (LayerOf(file) == "server") todo.push_back(file);
  }
  ASSERT_GT(todo.size(), 10u) << "the scan found too few server files";
  while (!todo.empty()) {
    const std::filesystem::path file = todo.back();
    todo.pop_back();
    for (const auto& target : ProjectIncludes(file)) {
      if (reached.emplace(target, file).second) todo.push_back(target);
    }
  }
  EXPECT_TRUE(reached.count(kSrc / "engine" / "engine_api.h")) << "the scan missed the API";
  for (const auto& [target, includer] : reached) {
    EXPECT_FALSE(forbidden_layers.count(LayerOf(target)) || target == engine_core)
        << "the server reaches " << std::filesystem::relative(target, kSrc).string()
        << " (included by " << std::filesystem::relative(includer, kSrc).string() << ")";
  }
}

TEST(LayeringTest, CanonicalLayersUseNumericsArith) {
  // std::log stays allowed: YaRN's ramp bounds are double-precision formulas (model.md §6.2).
  const std::regex forbidden(
      R"((std::(exp|sqrt|pow|sin|cos|tanh)\s*\()|(\b(expf|sqrtf|powf|sinf|cosf|tanhf|exp2f)\s*\())");
  for (const auto& file : SourceFiles()) {
    const std::string layer = LayerOf(file);
    if (layer != "model" && layer != "kernels" && layer != "engram" && layer != "kv" &&
        layer != "config") {
      continue;
    }
    // Tests compute independent references in double with the C library, as they should.
    if (file.stem().string().ends_with("_test") || file.stem().string().ends_with("_bench")) {
      continue;
    }
    std::ifstream in(file);
    std::string line;
    int line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      const std::string code = line.substr(0, line.find("//"));
      EXPECT_FALSE(std::regex_search(code, forbidden))
          << file.string() << ":" << line_no << ": use numerics/arith.h (Cr* functions): " << line;
    }
  }
}

}  // namespace
}  // namespace dsv41

// `dsv41 vision` end to end on the vision goldens (goldens/vision/README.md rule 1: plan,
// letterboxed and patches identical), and bad images refused naming the image and the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/json.h"
#include "cli_runner.h"
#include "text/tokenizer.h"
#include "vision/image_testing.h"
#include "vision/vision_goldens_testing.h"

namespace dsv41 {
namespace {

std::string TempDir(const std::string& name) {
  const std::string dir =
      (std::filesystem::path(::testing::TempDir()) / ("dsv41_vision_cli_" + name)).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

RunResult RunVision(const std::string& image, const std::string& out_dir,
                    const std::string& extra = "") {
  return RunCommand(kDsv41Binary + " vision --model " + kVisionCheckpoint + " --image '" + image +
                    "' --out-dir " + out_dir + " " + extra + " 2>&1");
}

bool SameBytes(const NpyArray& a, const NpyArray& b) {
  return a.descr == b.descr && a.shape == b.shape && a.data == b.data;
}

// Every golden case: plan.json carries the plan json's fields with their values, the arrays are
// identical (the patches compared as the float32 values the golden stores).
TEST(VisionCliTest, WritesTheGoldenPlanLetterboxAndPatches) {
  for (const std::string& name : VisionGoldenCases()) {
    SCOPED_TRACE(name);
    const std::string case_dir = VisionCaseDir(name);
    const Json want = ReadGoldenJson(case_dir + "/image0_plan.json");
    const std::string out = TempDir(name);
    const RunResult run =
        RunVision(kVisionGoldens + "/images/" + want["file"].get<std::string>(), out);
    ASSERT_EQ(run.exit_code, 0) << run.out;
    const Json plan = ReadGoldenJson(out + "/plan.json");
    for (auto it = plan.begin(); it != plan.end(); ++it) {
      EXPECT_EQ(*it, want[it.key()]) << it.key();
    }
    for (const char* key : {"bw", "bh", "Hv", "Wv", "H", "W", "L", "resized_w", "resized_h",
                            "paste_x", "paste_y", "sha256", "upscaled", "solver"}) {
      EXPECT_TRUE(plan.contains(key)) << key;
    }
    const NpyArray letterboxed = ReadVisionArray(out + "/letterboxed.npy");
    EXPECT_TRUE(SameBytes(letterboxed, ReadVisionArray(case_dir + "/image0_letterboxed.npy")));
    const NpyArray patches = ReadVisionArray(out + "/patches.npy");
    EXPECT_TRUE(SameBytes(patches, ReadVisionArray(case_dir + "/image0_patches.npy")));
  }
}

// Issue 21's bad images: exit 1, the message names the image file and the reason.
TEST(VisionCliTest, BadImagesAreRefusedNamingTheImage) {
  const std::string dir = TempDir("bad");
  for (const BadImageCase& bad : BadImageCases()) {
    SCOPED_TRACE(bad.name);
    const std::string path = dir + "/" + bad.name + ".img";
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bad.bytes.data()),
               static_cast<std::streamsize>(bad.bytes.size()));
    const RunResult run = RunVision(path, dir + "/out");
    EXPECT_EQ(run.exit_code, 1) << run.out;
    EXPECT_NE(run.out.find("image '" + path + "'"), std::string::npos) << run.out;
    EXPECT_NE(run.out.find(bad.reason), std::string::npos) << run.out;
  }
  const RunResult missing = RunVision(dir + "/no_such.png", dir + "/out");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("no_such.png"), std::string::npos) << missing.out;
  // --max-image-pixels: the golden 100 x 60 image is refused under a limit of 5999.
  const RunResult limited = RunVision(kVisionGoldens + "/images/grad_100x60.png", dir + "/out",
                                      "--max-image-pixels 5999");
  EXPECT_EQ(limited.exit_code, 1);
  EXPECT_NE(limited.out.find("100 x 60 = 6000 pixels, over the limit of 5999"), std::string::npos)
      << limited.out;
}

// The whole path from the image file: vit_out and aligner_out within vision.md §13.3 of the
// goldens (the fp32 tower's rows by cosine).
TEST(VisionCliTest, WritesTowerOutputsWithinTheTowerTolerance) {
  for (const std::string& name : VisionGoldenCases()) {
    SCOPED_TRACE(name);
    const std::string case_dir = VisionCaseDir(name);
    const Json plan = ReadGoldenJson(case_dir + "/image0_plan.json");
    const std::string out = TempDir(name + "_tower");
    const RunResult run =
        RunVision(kVisionGoldens + "/images/" + plan["file"].get<std::string>(), out, "-t 2");
    ASSERT_EQ(run.exit_code, 0) << run.out;
    const NpyArray vit = ReadVisionArray(out + "/vit_out.npy");
    const NpyArray rows = ReadVisionArray(out + "/aligner_out.npy");
    ASSERT_EQ(vit.shape.size(), 2u);
    ASSERT_EQ(rows.shape.size(), 2u);
    EXPECT_EQ(vit.shape[0], plan["n_patches"].get<int64_t>());
    EXPECT_EQ(rows.shape[0], plan["H"].get<int64_t>() * plan["W"].get<int64_t>());
    ExpectWithinTowerTolerance(vit.ToFloat(),
                               ReadVisionArray(case_dir + "/image0_vit_out.npy").ToFloat(),
                               vit.shape[1], 0.9995, true, name + " vit_out");
    ExpectWithinTowerTolerance(rows.ToFloat(),
                               ReadVisionArray(case_dir + "/image0_aligner_out.npy").ToFloat(),
                               rows.shape[1], 0.9995, true, name + " aligner_out");
    ExpectWithinTowerTolerance(rows.ToFloat(),
                               ReadVisionArray(case_dir + "/image0_aligner_out_fp32.npy").ToFloat(),
                               rows.shape[1], 0.999, false, name + " aligner_out vs fp32");
  }
}

std::string IdsOf(const Json& case_json) {
  std::string ids;
  for (const Json& id : case_json["prompt_ids_before_expansion"]) {
    if (!ids.empty()) ids += ',';
    ids += std::to_string(id.get<int32_t>());
  }
  return ids;
}

// A float32 .npy of `shape` holding `values`, as numpy writes it (format 1.0).
void WriteFloatNpy(const std::string& path, const std::vector<float>& values,
                   const std::vector<int64_t>& shape) {
  ASSERT_TRUE(WriteNpyFloat32(path, values, shape).ok());
}

// `dsv41 logits` with images: --ids-out and --types-out are the goldens' input_ids and types;
// with --image-embeddings of the golden aligner rows ([H, W, dim]) every position's logits are
// within 1e-3 (README rule 3); with --image and --numerics reference the whole pipeline is too.
TEST(VisionCliTest, LogitsWithImagesMatchTheGoldens) {
  for (const std::string& name : VisionGoldenCases()) {
    SCOPED_TRACE(name);
    const std::string dir = VisionCaseDir(name);
    const Json c = ReadGoldenJson(dir + "/case.json");
    const Json& plan = c["images"][0]["plan"];
    const std::string out = TempDir(name + "_logits");
    const std::vector<float> want = ReadVisionArray(dir + "/logits.npy").ToFloat();
    const std::string base =
        kDsv41Binary + " logits --model " + kVisionCheckpoint + " --ids " + IdsOf(c) + " -t 2 ";
    const RunResult expanded = RunCommand(
        base + "--image " + kVisionGoldens + "/images/" +
        c["images"][0]["file"].get<std::string>() + " --ids-out " + out + "/ids.npy --types-out " +
        out + "/types.npy --out " + out + "/image.npy --numerics reference 2>&1");
    ASSERT_EQ(expanded.exit_code, 0) << expanded.out;
    EXPECT_EQ(ReadVisionArray(out + "/ids.npy").ToInt64(),
              ReadVisionArray(dir + "/input_ids.npy").ToInt64());
    EXPECT_EQ(ReadVisionArray(out + "/types.npy").ToInt64(),
              ReadVisionArray(dir + "/types.npy").ToInt64());
    const std::vector<float> whole = ReadVisionArray(out + "/image.npy").ToFloat();
    ASSERT_EQ(whole.size(), want.size());
    const std::string rows_path = out + "/rows.npy";
    WriteFloatNpy(rows_path, ReadVisionArray(dir + "/image0_aligner_out.npy").ToFloat(),
                  {plan["H"].get<int64_t>(), plan["W"].get<int64_t>(), 128});
    const RunResult injected = RunCommand(base + "--image-embeddings " + rows_path + " --out " +
                                          out + "/rows_logits.npy 2>&1");
    ASSERT_EQ(injected.exit_code, 0) << injected.out;
    const std::vector<float> got = ReadVisionArray(out + "/rows_logits.npy").ToFloat();
    ASSERT_EQ(got.size(), want.size());
    double whole_err = 0, injected_err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      whole_err = std::max(whole_err, static_cast<double>(std::fabs(whole[i] - want[i])));
      injected_err = std::max(injected_err, static_cast<double>(std::fabs(got[i] - want[i])));
    }
    EXPECT_LE(whole_err, 1e-3);
    EXPECT_LE(injected_err, 1e-3);
  }
}

// Placeholders and images must pair up; a bad image names the file; embeddings of the wrong
// width are refused.
TEST(VisionCliTest, LogitsRefusesMismatchedImages) {
  const std::string out = TempDir("logits_bad");
  const std::string base =
      kDsv41Binary + " logits --model " + kVisionCheckpoint + " --out " + out + "/x.npy ";
  const RunResult missing = RunCommand(base + "--ids 0,511,511,3 --image " + kVisionGoldens +
                                       "/images/grad_100x60.png 2>&1");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("2 image placeholders (token 511) for 1 image"), std::string::npos)
      << missing.out;
  const std::string bad = out + "/bad.png";
  std::ofstream(bad) << "not an image";
  const RunResult refused = RunCommand(base + "--ids 0,511 --image " + bad + " 2>&1");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.out.find("image '" + bad + "': not a PNG or JPEG"), std::string::npos)
      << refused.out;
  WriteFloatNpy(out + "/narrow.npy", std::vector<float>(2 * 3 * 64, 0.5f), {2, 3, 64});
  const RunResult narrow =
      RunCommand(base + "--ids 0,511 --image-embeddings " + out + "/narrow.npy 2>&1");
  EXPECT_EQ(narrow.exit_code, 1);
  EXPECT_NE(narrow.out.find("want float32 [H, W, 128]"), std::string::npos) << narrow.out;
  // A checkpoint without a tower has no START / NEWLINE / END rows: aligner rows given as
  // embeddings are refused too (they crashed the step once).
  const std::string text_only = out + "/text_only";
  ASSERT_EQ(RunCommand(kDsv41Binary + " tiny --vision-layers 0 --out " + text_only).exit_code, 0);
  Result<Json> config = ReadJsonFile(text_only + "/config.json");
  ASSERT_TRUE(config.ok());
  const int hidden = (*config)["text_config"]["hidden_size"].get<int>();
  const int image_token = (*config)["image_token_id"].get<int>();
  WriteFloatNpy(out + "/rows.npy", std::vector<float>(2 * 3 * hidden, 0.5f), {2, 3, hidden});
  const RunResult no_tower = RunCommand(kDsv41Binary + " logits --model " + text_only + " --out " +
                                        out + "/y.npy --ids 0," + std::to_string(image_token) +
                                        " --image-embeddings " + out + "/rows.npy 2>&1");
  EXPECT_EQ(no_tower.exit_code, 1) << no_tower.out;
  EXPECT_NE(no_tower.out.find("no vision tower"), std::string::npos) << no_tower.out;
}

// `dsv41 run --image` on every golden case: the prompt's placeholder expands to the image's
// span (the prefill counts the golden T positions) and, under the reference numerics (the
// oracle's tower bit for bit, README rule 4), the 8 generated tokens are the golden greedy ids,
// decoded. A placeholder without an image is refused naming the counts.
TEST(VisionCliTest, RunGeneratesTheGoldenGreedyTokens) {
  Result<Tokenizer> tokenizer = Tokenizer::Load(kVisionCheckpoint + "/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  for (const std::string& name : VisionGoldenCases()) {
    SCOPED_TRACE(name);
    const Json c = ReadGoldenJson(VisionCaseDir(name) + "/case.json");
    const std::string out = TempDir("run_" + name);
    std::ofstream(out + "/prompt.txt") << c["prompt_text"].get<std::string>();
    const std::string base = kDsv41Binary + " run --model " + kVisionCheckpoint +
                             " -n 8 -t 2 --numerics reference -p \"$(cat " + out +
                             "/prompt.txt)\" 2>" + out + "/stderr.txt ";
    const RunResult run = RunCommand(base + "--image " + kVisionGoldens + "/images/" +
                                     c["images"][0]["file"].get<std::string>());
    std::ifstream stderr_file(out + "/stderr.txt");
    const std::string log((std::istreambuf_iterator<char>(stderr_file)),
                          std::istreambuf_iterator<char>());
    ASSERT_EQ(run.exit_code, 0) << log;
    const std::vector<int32_t> greedy = c["greedy_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(run.out, tokenizer->Decode(greedy) + "\n");
    EXPECT_NE(log.find("prefill: " + std::to_string(c["T"].get<int>()) + " tokens"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("decode: 8 tokens"), std::string::npos) << log;
    if (name != VisionGoldenCases().front()) continue;
    const RunResult missing = RunCommand(base);
    EXPECT_EQ(missing.exit_code, 1);
    std::ifstream missing_file(out + "/stderr.txt");
    const std::string missing_log((std::istreambuf_iterator<char>(missing_file)),
                                  std::istreambuf_iterator<char>());
    EXPECT_NE(missing_log.find("1 image placeholder (token 511) for 0 images"), std::string::npos)
        << missing_log;
  }
}

}  // namespace
}  // namespace dsv41

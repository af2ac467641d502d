// `dsv41 bench` end to end on the tiny preset: one repetition exits 0 and prints every figure's
// field name, the speculative ones too (no timing assertions: the values depend on the machine),
// and bad usage exits 2.

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "base/json.h"
#include "cli_runner.h"

namespace dsv41 {
namespace {

// A tiny model in a directory of the running test's own (ctest runs the tests of this file in
// parallel processes).
std::string TinyModel() {
  const std::string dir = testing::TempDir() + "/bench_cli_" +
                          testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  const RunResult tiny = RunCommand(kDsv41Binary + " tiny --preset tiny --out " + dir);
  EXPECT_EQ(tiny.exit_code, 0) << tiny.out;
  return dir;
}

TEST(BenchCliTest, PrintsEveryFigure) {
  const std::string dir = TinyModel();
  const RunResult run = RunCommand(kDsv41Binary + " bench --model " + dir +
                                   " --prompt-tokens 8 --decode-tokens 4 --repetitions 1 -t 2");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  for (const char* field :
       {"time_to_first_token_ms", "prefill_tokens_per_s", "decode_tokens_per_s",
        "decode_ms_per_token", "decode_weight_mib_per_token", "decode_weight_gb_per_s",
        "read_bandwidth_gb_per_s", "fma_peak_gflops", "bf16_dot_peak_gflops",
        "fp16_fma_peak_gflops", "amx_bf16_peak_gflops", "amx_int8_peak_gops", "matrix_unit",
        "read_bandwidth_ratio", "prefill_gflops", "prefill_roof_ratio", "prefill_roofline_ratio"}) {
    EXPECT_NE(run.out.find(field), std::string::npos) << field << " missing from:\n" << run.out;
  }
}

// --json: one object per level with the keys of issue 9 and 7, positive where they must be, and
// the ratios consistent with the figures they divide.
TEST(BenchCliTest, JsonLinesCarryTheRatiosAndTheirParts) {
  const std::string dir = TinyModel();
  const RunResult run = RunCommand(kDsv41Binary + " bench --model " + dir +
                                   " --prompt-tokens 8 --decode-tokens 4 --repetitions 1 -t 2 "
                                   "--concurrency 1,2 --json 2>/dev/null");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  std::istringstream lines(run.out);
  std::string line;
  int levels = 0;
  while (std::getline(lines, line)) {
    Result<Json> j = ParseJson(line, "bench line");
    ASSERT_TRUE(j.ok()) << line;
    for (const char* key :
         {"concurrency", "decode_tokens_per_s", "tpot_ms_median", "ttft_ms_median",
          "read_bandwidth_ratio", "prefill_gflops", "fma_roof_gflops", "prefill_roof_ratio",
          "decode_weight_bytes_per_token", "decode_weight_gb_per_s", "read_bandwidth_gb_per_s",
          "matrix_unit_peak_gflops", "fma_peak_gflops", "bf16_dot_peak_gflops",
          "fp16_fma_peak_gflops", "amx_bf16_peak_gflops", "amx_int8_peak_gops",
          "prefill_roofline_ratio"}) {
      ASSERT_TRUE(j->contains(key) && (*j)[key].is_number()) << key << " in " << line;
    }
    // The matrix unit is the fastest exact unit measured, and its peak the roof.
    ASSERT_TRUE(j->contains("matrix_unit") && (*j)["matrix_unit"].is_string()) << line;
    const std::string unit = (*j)["matrix_unit"].get<std::string>();
    const char* peak_key = unit == "amx-bf16"      ? "amx_bf16_peak_gflops"
                           : unit == "avx512-bf16" ? "bf16_dot_peak_gflops"
                                                   : "fma_peak_gflops";
    ASSERT_TRUE(unit == "amx-bf16" || unit == "avx512-bf16" || unit == "fp32-fma") << unit;
    const double peak = (*j)["matrix_unit_peak_gflops"].get<double>();
    EXPECT_EQ(peak, (*j)[peak_key].get<double>());
    EXPECT_EQ(peak, (*j)["fma_roof_gflops"].get<double>());
    for (const char* other : {"amx_bf16_peak_gflops", "bf16_dot_peak_gflops", "fma_peak_gflops"}) {
      EXPECT_LE((*j)[other].get<double>(), peak) << other;
    }
    // The products' time at the roofs cannot exceed the measured prefill time by more than the
    // peaks' own noise (they are the best of three passes, the prefill one run), nor vanish.
    const double roofline = (*j)["prefill_roofline_ratio"].get<double>();
    EXPECT_GT(roofline, 0.0);
    EXPECT_LT(roofline, 1.5);
    EXPECT_GT((*j)["decode_tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT((*j)["decode_weight_bytes_per_token"].get<double>(), 0.0);
    EXPECT_GT((*j)["prefill_gflops"].get<double>(), 0.0);
    const double ratio = (*j)["read_bandwidth_ratio"].get<double>();
    const double parts = (*j)["decode_weight_gb_per_s"].get<double>() /
                         (*j)["read_bandwidth_gb_per_s"].get<double>();
    EXPECT_NEAR(ratio, parts, 1e-9 + 1e-6 * parts);
    const double roof =
        (*j)["prefill_gflops"].get<double>() / (*j)["fma_roof_gflops"].get<double>();
    EXPECT_NEAR((*j)["prefill_roof_ratio"].get<double>(), roof, 1e-9 + 1e-6 * roof);
    ++levels;
  }
  EXPECT_EQ(levels, 2);
}

// --speculative runs the plain and the speculative engine in the same repetition; --json carries
// the speculative figures, --oracle those of the verify path with drafts that are always right.
TEST(BenchCliTest, SpeculativeFiguresAreReported) {
  const std::string dir = TinyModel();
  const RunResult json = RunCommand(kDsv41Binary + " bench --model " + dir +
                                    " --prompt-tokens 8 --decode-tokens 4 --repetitions 1 -t 2 "
                                    "--speculative dspark --speculative-min-acceptance 0 --oracle "
                                    "--json");
  ASSERT_EQ(json.exit_code, 0) << json.out;
  for (const char* key :
       {"\"decode_tokens_per_s\"", "\"speculative\":\"dspark\"", "\"spec_decode_tokens_per_s\"",
        "\"spec_speedup\"", "\"acceptance_rate\"", "\"mean_accepted_length\"",
        "\"verify_step_ratio\"", "\"plain_step_ratio\"", "\"acceptance_rate_by_position\"",
        "\"oracle_acceptance_rate\":1.0", "\"oracle_decode_tokens_per_s\"",
        "\"oracle_verify_step_ratio\""}) {
    EXPECT_NE(json.out.find(key), std::string::npos) << key << " missing from:\n" << json.out;
  }
}

// Engram tiers interleaved, cold: one line per (level, tier, prefetch) with the offload keys; the
// disk tier read rows from the file after each cold drop.
TEST(BenchCliTest, EngramTiersInterleavedColdCarryTheOffloadKeys) {
  const std::string dir = TinyModel();
  const RunResult run = RunCommand(kDsv41Binary + " bench --model " + dir +
                                   " --prompt-tokens 8 --decode-tokens 3 --repetitions 2 -t 2 "
                                   "--engram-storage resident,disk --engram-prefetch on,off "
                                   "--engram-cache-gib 0.001 --cold --json 2>/dev/null");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  std::istringstream lines(run.out);
  std::string line;
  std::vector<std::string> configs;
  while (std::getline(lines, line)) {
    Result<Json> j = ParseJson(line, "bench line");
    ASSERT_TRUE(j.ok()) << line;
    for (const char* key :
         {"decode_tokens_per_s", "prefill_tokens_per_s", "engram_wait_ms_per_step",
          "engram_decode_wait_ms_per_step", "engram_cache_hit_rate", "engram_read_mib"}) {
      ASSERT_TRUE(j->contains(key) && (*j)[key].is_number()) << key << " in " << line;
    }
    ASSERT_TRUE(j->contains("engram_storage") && (*j)["engram_storage"].is_string()) << line;
    const std::string storage = (*j)["engram_storage"].get<std::string>();
    configs.push_back(storage + "/" + (*j)["engram_prefetch"].get<std::string>());
    EXPECT_TRUE((*j)["engram_cold"].get<bool>());
    if (storage == "disk") {
      EXPECT_GT((*j)["engram_read_mib"].get<double>(), 0.0) << line;
    }
  }
  EXPECT_EQ(configs,
            (std::vector<std::string>{"resident/on", "resident/off", "disk/on", "disk/off"}));
}

// Every command that loads a model takes the Engram flags and prints the resolved tier.
TEST(BenchCliTest, ModelCommandsPrintTheResolvedEngramTier) {
  const std::string dir = TinyModel();
  const RunResult logits = RunCommand(kDsv41Binary + " logits --model " + dir +
                                      " --ids 5,6,7 --top-k 1 -t 2 --engram-storage disk "
                                      "--engram-cache-gib 0.01 --engram-io-threads 3 2>&1");
  ASSERT_EQ(logits.exit_code, 0) << logits.out;
  EXPECT_NE(logits.out.find("engram: disk tier, 2 tables"), std::string::npos) << logits.out;
  EXPECT_NE(logits.out.find("3 I/O threads per table, prefetch on"), std::string::npos)
      << logits.out;
  const RunResult run = RunCommand(kDsv41Binary + " run --model " + dir +
                                   " -p hi -n 2 -t 2 --engram-storage resident "
                                   "--engram-prefetch off 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  EXPECT_NE(run.out.find("engram: resident tier"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("prefetch off"), std::string::npos) << run.out;
  const RunResult mapped =
      RunCommand(kDsv41Binary + " logits --model " + dir + " --ids 5,6 --top-k 1 -t 2 2>&1");
  ASSERT_EQ(mapped.exit_code, 0) << mapped.out;
  EXPECT_NE(mapped.out.find("engram: mapped tier"), std::string::npos) << mapped.out;
}

TEST(BenchCliTest, BadEngramFlagsExit2) {
  const std::string dir = TinyModel();
  EXPECT_EQ(RunCommand(kDsv41Binary + " bench --model " + dir + " --engram-storage ssd 2>/dev/null")
                .exit_code,
            2);
  EXPECT_EQ(
      RunCommand(kDsv41Binary + " bench --model " + dir + " --engram-prefetch maybe 2>/dev/null")
          .exit_code,
      2);
}

TEST(BenchCliTest, BadUsageExits2) {
  EXPECT_EQ(RunCommand(kDsv41Binary + " bench 2>/dev/null").exit_code, 2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " bench --model /nonexistent --repetitions 0 2>/dev/null")
                .exit_code,
            2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " bench --model /nonexistent --speculative maybe 2>/dev/null")
                .exit_code,
            2);
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// `dsv41 bench --image` (issue 21): one JSON object with the tower's figures, positive, the
// GFLOP/s consistent with the time, and the released tower's cost per image; a model without a
// tower exits 1 saying so.
TEST(BenchCliTest, ImageBenchReportsTheTowerAndTheReleasedCost) {
  const std::string dir = TinyModel();
  const std::string image =
      std::string(DSV41_SHARED_DIR) + "/goldens/vision/images/shapes_300x220.jpg";
  const RunResult run = RunCommand(kDsv41Binary + " bench --model " + dir + " --image " + image +
                                   " --repetitions 1 -t 2 --json 2>/dev/null");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  Result<Json> j = ParseJson(run.out, "bench --image");
  ASSERT_TRUE(j.ok()) << run.out;
  for (const char* key : {"encode_ms_median", "prepare_ms_median", "images_per_s", "gflops_per_s",
                          "roof_gflops_per_s", "roof_fraction", "released_gflop_per_image",
                          "released_seconds_per_image"}) {
    ASSERT_TRUE(j->contains(key)) << key;
    EXPECT_GT((*j)[key].get<double>(), 0) << key;
  }
  EXPECT_EQ((*j)["span_length"].get<int>(), 56);  // goldens/vision c2_shapes: L = 56
  EXPECT_NEAR((*j)["images_per_s"].get<double>() * (*j)["encode_ms_median"].get<double>(), 1e3,
              1.0);
  const RunResult text_only_tiny =
      RunCommand(kDsv41Binary + " tiny --vision-layers 0 --out " + dir + "_text");
  ASSERT_EQ(text_only_tiny.exit_code, 0);
  const RunResult refused = RunCommand(kDsv41Binary + " bench --model " + dir + "_text --image " +
                                       image + " --repetitions 1 -t 2 2>&1");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.out.find("no vision tower"), std::string::npos) << refused.out;
}

}  // namespace
}  // namespace dsv41

// `dsv41 bench` end to end on the tiny preset: one repetition exits 0 and prints every figure's
// field name, the speculative ones too (no timing assertions: the values depend on the machine),
// and bad usage exits 2.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_runner.h"

namespace dsv41 {
namespace {

std::string TinyModel() {
  const std::string dir = testing::TempDir() + "/bench_cli_tiny";
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
        "decode_ms_per_token", "weight_bytes_per_decode_token", "routed experts",
        "decode_weight_read_gb_per_s", "machine_read_gb_per_s", "read_bandwidth_ratio"}) {
    EXPECT_NE(run.out.find(field), std::string::npos) << field << " missing from:\n" << run.out;
  }
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

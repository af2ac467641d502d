// `dsv41 logits`, `dsv41 run` and `dsv41 draft` end to end on a golden checkpoint (tiny-c, whose
// logits the fast Linear path reproduces): chunked prefill logits written as .npy match the golden
// logits, the top-k JSON lines name the golden argmax, generation runs (with speculation to the
// same text), the draft dump matches the goldens' DSpark arrays, and bad usage exits 2.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/json.h"
#include "base/npy.h"
#include "cli_runner.h"

namespace dsv41 {
namespace {

const std::string kModel = std::string(DSV41_SHARED_DIR) + "/goldens/model/checkpoints/tiny-c";
const std::string kCase = std::string(DSV41_SHARED_DIR) + "/goldens/model/cases/tiny-c/chat5";

std::vector<int64_t> PromptIds() {
  Result<NpyArray> ids = ReadNpy(kCase + "/input_ids.npy");
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? ids->ToInt64() : std::vector<int64_t>();
}

std::string IdsFlag(const std::vector<int64_t>& ids) {
  std::string s;
  for (int64_t id : ids) {
    if (!s.empty()) s.push_back(',');
    s.append(std::to_string(id));
  }
  return s;
}

TEST(TextCliTest, ChunkedLogitsMatchTheGolden) {
  const std::string out = testing::TempDir() + "/text_cli_logits.npy";
  std::filesystem::remove(out);
  const RunResult run = RunCommand(kDsv41Binary + " logits --model " + kModel + " --ids " +
                                   IdsFlag(PromptIds()) + " --chunk 2 --out " + out);
  ASSERT_EQ(run.exit_code, 0);
  Result<NpyArray> got = ReadNpy(out);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  Result<NpyArray> want = ReadNpy(kCase + "/logits.npy");
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  ASSERT_EQ(got->shape, want->shape);
  const std::vector<float> g = got->ToFloat();
  const std::vector<float> w = want->ToFloat();
  float max_err = 0;
  for (size_t i = 0; i < g.size(); ++i) max_err = std::max(max_err, std::fabs(g[i] - w[i]));
  EXPECT_LE(max_err, 1e-3f);  // tiny-c is stable at every position (goldens README)
}

TEST(TextCliTest, TopKLinesNameTheGoldenArgmax) {
  const std::vector<int64_t> ids = PromptIds();
  const RunResult run = RunCommand(kDsv41Binary + " logits --model " + kModel + " --ids " +
                                   IdsFlag(ids) + " --top-k 2");
  ASSERT_EQ(run.exit_code, 0);
  Result<NpyArray> want = ReadNpy(kCase + "/logits.npy");
  ASSERT_TRUE(want.ok());
  const std::vector<float> w = want->ToFloat();
  const int64_t vocab = want->shape[1];
  std::istringstream lines(run.out);
  std::string line;
  int64_t pos = 0;
  while (std::getline(lines, line)) {
    Result<Json> json = ParseJson(line, "top-k line");
    ASSERT_TRUE(json.ok()) << json.status().ToString();
    EXPECT_EQ((*json)["pos"].get<int64_t>(), pos);
    EXPECT_EQ((*json)["token"].get<int64_t>(), ids[pos]);
    ASSERT_EQ((*json)["ids"].size(), 2u);
    const float* row = w.data() + pos * vocab;
    const int64_t argmax = std::max_element(row, row + vocab) - row;
    EXPECT_EQ((*json)["ids"][0].get<int64_t>(), argmax) << "position " << pos;
    ++pos;
  }
  EXPECT_EQ(pos, static_cast<int64_t>(ids.size()));
}

TEST(TextCliTest, RunGeneratesAndSamplesWithASeed) {
  const std::string base = kDsv41Binary + " run --model " + kModel + " -p 'Hello there' -n 8";
  const RunResult greedy = RunCommand(base);
  ASSERT_EQ(greedy.exit_code, 0);
  EXPECT_FALSE(greedy.out.empty());
  const std::string sampled = base + " --temperature 0.9 --top-p 0.95 --top-k 40 --seed 5";
  const RunResult a = RunCommand(sampled);
  const RunResult b = RunCommand(sampled);
  ASSERT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.out, b.out) << "one seed, one text";
}

// The fp32-FMA kernels accumulate in an order that does not depend on the vector width: capped at
// AVX2 or at the scalar code they give the uncapped logits bit for bit, and start-up names the
// target; a bad cap is refused naming the flag.
TEST(TextCliTest, SimdCapsGiveTheSameLogits) {
  std::vector<float> want;
  for (const std::string cap : {"best", "avx2", "scalar"}) {
    SCOPED_TRACE(cap);
    const std::string out = testing::TempDir() + "/text_cli_simd_" + cap + ".npy";
    std::filesystem::remove(out);
    const RunResult run =
        RunCommand(kDsv41Binary + " logits --model " + kModel + " --ids " + IdsFlag(PromptIds()) +
                   " --numerics fma --simd " + cap + " --out " + out + " 2>&1");
    ASSERT_EQ(run.exit_code, 0) << run.out;
    if (cap != "best") {
      const std::string target = cap == "avx2" ? "kernels AVX2" : "kernels SCALAR";
      EXPECT_NE(run.out.find(target), std::string::npos) << run.out;
    }
    Result<NpyArray> got = ReadNpy(out);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const std::vector<float> g = got->ToFloat();
    if (want.empty()) {
      want = g;
    } else {
      ASSERT_EQ(g.size(), want.size());
      EXPECT_EQ(std::memcmp(g.data(), want.data(), 4 * g.size()), 0);
    }
  }
  const RunResult bad = RunCommand(kDsv41Binary + " logits --model " + kModel +
                                   " --ids 1,2 --simd avx9 --out /dev/null 2>&1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--simd avx9"), std::string::npos) << bad.out;
}

// Start-up reports the weights made resident (the tiny model fits in memory) — copied into huge
// pages or prefaulted in their mapping, as --weight-memory asks, with the same text — and the
// numerics; with --no-prefault it says the pages are left to fault in.
TEST(TextCliTest, StartUpReportsWeightMemoryAndNumerics) {
  const std::string base = kDsv41Binary + " run --model " + kModel + " -p hi -n 4";
  const RunResult on = RunCommand(base + " 2>&1 >/dev/null");
  ASSERT_EQ(on.exit_code, 0);
  EXPECT_NE(on.out.find("weights: "), std::string::npos) << on.out;
  EXPECT_NE(on.out.find(" resident"), std::string::npos) << on.out;
  EXPECT_NE(on.out.find("numerics: "), std::string::npos) << on.out;
  const RunResult mapped = RunCommand(base + " --weight-memory mapped 2>&1 >/dev/null");
  ASSERT_EQ(mapped.exit_code, 0);
  EXPECT_NE(mapped.out.find("resident (prefaulted"), std::string::npos) << mapped.out;
  const RunResult copy = RunCommand(base + " --weight-memory copy 2>&1 >/dev/null");
  ASSERT_EQ(copy.exit_code, 0);
  EXPECT_NE(copy.out.find("copied into huge pages"), std::string::npos) << copy.out;
  EXPECT_EQ(copy.out.find("a copy failed"), std::string::npos) << copy.out;
  const RunResult copy_text = RunCommand(base + " --weight-memory copy 2>/dev/null");
  const RunResult mapped_text = RunCommand(base + " --weight-memory mapped 2>/dev/null");
  ASSERT_EQ(copy_text.exit_code, 0);
  EXPECT_FALSE(copy_text.out.empty());
  EXPECT_EQ(copy_text.out, mapped_text.out);
  const RunResult off = RunCommand(base + " --no-prefault 2>&1 >/dev/null");
  ASSERT_EQ(off.exit_code, 0);
  EXPECT_NE(off.out.find("not prefaulted (--no-prefault)"), std::string::npos) << off.out;
  const RunResult bogus = RunCommand(base + " --weight-memory bogus 2>&1 >/dev/null");
  EXPECT_EQ(bogus.exit_code, 2);
  EXPECT_NE(bogus.out.find("--weight-memory 'bogus'"), std::string::npos) << bogus.out;
  EXPECT_EQ(RunCommand(base + " --numerics bogus 2>/dev/null").exit_code, 2);
  EXPECT_EQ(RunCommand(base + " --numerics reference >/dev/null 2>&1").exit_code, 0);
}

// Speculative decoding changes the speed, never the text: greedy (dspark and ngram) and seeded
// sampling (dspark) give the same output as without.
TEST(TextCliTest, RunWithSpeculationGivesTheSameText) {
  const std::string dspark =
      " --speculative dspark --num-speculative-tokens 3 --speculative-min-acceptance 0";
  const std::string ngram = " --speculative ngram --speculative-min-acceptance 0";
  for (const auto& [sampling, specs] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"", {dspark, ngram}}, {" --temperature 0.9 --top-k 40 --seed 5", {dspark}}}) {
    const std::string base =
        kDsv41Binary + " run --model " + kModel + " -p 'Hello there, hello there' -n 8" + sampling;
    const RunResult plain = RunCommand(base);
    ASSERT_EQ(plain.exit_code, 0);
    for (const std::string& spec : specs) {
      const RunResult got = RunCommand(base + spec);
      ASSERT_EQ(got.exit_code, 0) << spec;
      EXPECT_EQ(got.out, plain.out) << spec << sampling;
    }
  }
}

// `dsv41 draft` writes the goldens' three arrays with their shapes and dtypes, and its drafts are
// the goldens' (tiny-c chat5 is noise-stable at every step: dspark_golden_test holds the rules).
TEST(TextCliTest, DraftWritesTheGoldensArrays) {
  const std::string dir = testing::TempDir() + "/text_cli_draft";
  std::filesystem::remove_all(dir);
  const RunResult run = RunCommand(kDsv41Binary + " draft --model " + kModel + " --ids " +
                                   IdsFlag(PromptIds()) + " --steps 15 --out-dir " + dir);
  ASSERT_EQ(run.exit_code, 0);
  for (const char* name : {"dspark_ids", "dspark_logits", "dspark_confidence"}) {
    Result<NpyArray> got = ReadNpy(dir + "/" + name + ".npy");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    Result<NpyArray> want = ReadNpy(kCase + "/" + name + ".npy");
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    EXPECT_EQ(got->descr, want->descr) << name;
    EXPECT_EQ(got->shape, want->shape) << name;
    if (std::string(name) == "dspark_ids") {
      EXPECT_EQ(got->ToInt64(), want->ToInt64());
      continue;
    }
    const std::vector<float> g = got->ToFloat(), w = want->ToFloat();
    ASSERT_EQ(g.size(), w.size());
    float max_err = 0;
    for (size_t i = 0; i < g.size(); ++i) max_err = std::max(max_err, std::fabs(g[i] - w[i]));
    EXPECT_LE(max_err, 1e-3f) << name;
  }
  // The Engram tables on the disk tier (no hot cache), rows fetched ahead or read in the layers:
  // the same arrays, bit for bit.
  for (const char* prefetch : {"on", "off"}) {
    const std::string disk_dir = dir + "_disk_" + prefetch;
    const RunResult disk = RunCommand(kDsv41Binary + " draft --model " + kModel + " --ids " +
                                      IdsFlag(PromptIds()) + " --steps 15 --out-dir " + disk_dir +
                                      " --engram-storage disk --engram-cache-gib 0 " +
                                      "--engram-prefetch " + prefetch + " 2>&1");
    ASSERT_EQ(disk.exit_code, 0) << disk.out;
    EXPECT_NE(disk.out.find("engram: disk tier"), std::string::npos) << disk.out;
    for (const char* name : {"dspark_ids", "dspark_logits", "dspark_confidence"}) {
      Result<NpyArray> a = ReadNpy(dir + "/" + name + ".npy");
      Result<NpyArray> b = ReadNpy(disk_dir + "/" + name + ".npy");
      ASSERT_TRUE(a.ok() && b.ok()) << name;
      EXPECT_EQ(a->data, b->data) << name << " with prefetch " << prefetch;
    }
  }
  EXPECT_EQ(RunCommand(kDsv41Binary + " draft --model " + kModel + " --ids 1 --out-dir " + dir +
                       " --engram-storage ssd 2>/dev/null")
                .exit_code,
            2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " draft --model " + kModel + " --ids 1 --out-dir " + dir +
                       " --engram-prefetch maybe 2>/dev/null")
                .exit_code,
            2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " draft --model " + kModel + " --ids 1,x --out-dir " + dir)
                .exit_code,
            2);
  EXPECT_EQ(
      RunCommand(kDsv41Binary + " draft --model " + kModel + " --ids 1 --steps 0 --out-dir " + dir)
          .exit_code,
      2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " draft --model " + kModel +
                       " --ids 1 --numerics bogus --out-dir " + dir + " 2>/dev/null")
                .exit_code,
            2);
}

TEST(TextCliTest, BadUsageExitsTwo) {
  EXPECT_EQ(RunCommand(kDsv41Binary + " logits --model " + kModel + " --top-k 2").exit_code, 2);
  EXPECT_EQ(
      RunCommand(kDsv41Binary + " logits --model " + kModel + " --ids 1,x --top-k 2").exit_code, 2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " run --model " + kModel + " -p hi --top-p 2").exit_code, 2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " run --model /nonexistent -p hi").exit_code, 1);
  EXPECT_EQ(
      RunCommand(kDsv41Binary + " run --model " + kModel + " -p hi --speculative eagle").exit_code,
      2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " run --model " + kModel +
                       " -p hi --speculative dspark --num-speculative-tokens 6")
                .exit_code,
            2);
}

}  // namespace
}  // namespace dsv41

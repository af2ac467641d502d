// `dsv41 tiny` and `dsv41 plan` end to end: the tiny model is written, loads, and its plan prints;
// the released config prints the page sizes of serving.md §3.5.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/json.h"
#include "cli_runner.h"

namespace dsv41 {
namespace {

std::string Dir(const char* name) {
  std::filesystem::path path = testing::TempDir();
  path /= name;
  std::filesystem::remove_all(path);
  return path.string();
}

TEST(PlanCliTest, ReleasedConfigPrintsTheSpecPages) {
  const RunResult run = RunCommand(kDsv41Binary + " plan --released --json");
  ASSERT_EQ(run.exit_code, 0);
  Result<Json> json = ParseJson(run.out, "dsv41 plan --json");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  const Json& cache = (*json)["cache_plan"];
  std::vector<int64_t> pages;
  for (const Json& slot : cache["slots"]) pages.push_back(slot["page_bytes"].get<int64_t>());
  EXPECT_EQ(pages, (std::vector<int64_t>{131072, 131072, 131072, 147712}));
  EXPECT_EQ(cache["bytes_per_block_id"].get<int64_t>(), 540928);
  EXPECT_EQ((*json)["layers"].size(), 40u);
  EXPECT_EQ((*json)["weight_bytes"]["routed experts"].get<int64_t>(), 288777830400);

  const RunResult text = RunCommand(kDsv41Binary + " plan --released");
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("bytes per block id: 540928"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("page 147712 B"), std::string::npos) << text.out;
}

// `--ranks N` (issue 20): the routed experts and Engram rows of the release split between the
// ranks add up to one rank's, everything else is on every rank, and more ranks never fit worse.
TEST(PlanCliTest, RanksSplitTheExpertsAndEngramRowsOfTheRelease) {
  auto plan = [](int ranks) {
    const RunResult run =
        RunCommand(kDsv41Binary + " plan --released --json --ranks " + std::to_string(ranks));
    EXPECT_EQ(run.exit_code, 0);
    Result<Json> json = ParseJson(run.out, "dsv41 plan --json --ranks");
    EXPECT_TRUE(json.ok()) << json.status().ToString();
    return json.ok() ? (*json)["ranks"] : Json();
  };
  const Json one = plan(1);
  ASSERT_EQ(one["per_rank"].size(), 1u);
  const Json& all = one["per_rank"][0];
  const Json weights = [&] {
    const RunResult run = RunCommand(kDsv41Binary + " plan --released --json");
    return ParseJson(run.out, "plan").value()["weight_bytes"];
  }();
  EXPECT_EQ(all["engram_row_bytes"].get<uint64_t>(), weights["engram tables"].get<uint64_t>());
  bool fitted_256 = false;
  for (int ranks : {2, 3, 4}) {
    const Json r = plan(ranks);
    ASSERT_EQ(r["per_rank"].size(), static_cast<size_t>(ranks));
    uint64_t experts = 0, engram = 0;
    for (const Json& rank : r["per_rank"]) {
      experts += rank["routed_expert_bytes"].get<uint64_t>();
      engram += rank["engram_row_bytes"].get<uint64_t>();
      EXPECT_EQ(rank["replicated_bytes"], all["replicated_bytes"]) << ranks << " ranks";
      EXPECT_LT(rank["bytes_engram_in_memory"].get<uint64_t>(),
                all["bytes_engram_in_memory"].get<uint64_t>());
    }
    EXPECT_EQ(experts, all["routed_expert_bytes"].get<uint64_t>()) << ranks << " ranks";
    // The ranges each rank holds: MoE 0's experts and each table's rows, one after another.
    int64_t next_expert = 0;
    std::vector<int64_t> next_row(all["engram_rows"].size(), 0);
    for (const Json& rank : r["per_rank"]) {
      EXPECT_EQ(rank["first_moe_experts"][0].get<int64_t>(), next_expert) << ranks << " ranks";
      next_expert = rank["first_moe_experts"][1].get<int64_t>();
      for (size_t t = 0; t < next_row.size(); ++t) {
        EXPECT_EQ(rank["engram_rows"][t][0].get<int64_t>(), next_row[t]) << "table " << t;
        next_row[t] = rank["engram_rows"][t][1].get<int64_t>();
      }
    }
    EXPECT_EQ(next_expert, all["first_moe_experts"][1].get<int64_t>()) << ranks << " ranks";
    for (size_t t = 0; t < next_row.size(); ++t) {
      EXPECT_EQ(next_row[t], all["engram_rows"][t][1].get<int64_t>()) << "table " << t;
    }
    EXPECT_EQ(engram, all["engram_row_bytes"].get<uint64_t>()) << ranks << " ranks";
    const bool fits_256 = r["fits"]["256GB"]["engram_in_memory"].get<bool>();
    EXPECT_TRUE(fits_256 || !fitted_256) << "fewer ranks fitted, " << ranks << " do not";
    fitted_256 = fits_256;
  }
  EXPECT_NE(RunCommand(kDsv41Binary + " plan --released --ranks 2").out.find("512 GB machine"),
            std::string::npos);
}

// Trap list K3 / L6: one request of the release's whole context (2^20 positions) is sized in 64
// bits: 8192 KV blocks of 128 tokens plus its ring and window ids, 8213 ids × 540928 B past 4 GiB;
// a budget that holds it says so, and a length past max_position_embeddings is refused.
TEST(PlanCliTest, ReleasedConfigSizesAMillionTokenRequestWithoutOverflow) {
  const RunResult run =
      RunCommand(kDsv41Binary + " plan --released --max-model-len 1048576 --kv-cache-gib 8 --json");
  ASSERT_EQ(run.exit_code, 0);
  Result<Json> json = ParseJson(run.out, "dsv41 plan --json");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  const Json& request = (*json)["request"];
  EXPECT_EQ(request["context_tokens"].get<int64_t>(), 1048576);
  EXPECT_EQ(request["kv_ids"].get<int64_t>(), 1048576 / 128);
  const int64_t ids =
      request["kv_ids"].get<int64_t>() + request["ring_ids"].get<int64_t>() +
      request["window_ids_per_group"].get<int64_t>() * request["num_window_groups"].get<int64_t>();
  EXPECT_EQ(request["block_ids"].get<int64_t>(), ids);
  EXPECT_EQ(request["bytes"].get<uint64_t>(), static_cast<uint64_t>(ids) * 540928u);
  EXPECT_GT(request["bytes"].get<uint64_t>(), uint64_t{1} << 32);
  EXPECT_TRUE(request["fits_pool"].get<bool>()) << "8 GiB hold 15879 ids";

  const RunResult text = RunCommand(kDsv41Binary + " plan --released --max-model-len 1048576");
  ASSERT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("request of 1048576 tokens"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("does not fit the pool"), std::string::npos) << "4 GiB: 7939 ids";

  const RunResult too_long =
      RunCommand(kDsv41Binary + " plan --released --max-model-len 1048577 2>&1");
  EXPECT_EQ(too_long.exit_code, 2);
  EXPECT_NE(too_long.out.find("exceeds max_position_embeddings 1048576"), std::string::npos)
      << too_long.out;
}

TEST(PlanCliTest, TinyModelIsWrittenLoadedAndPlanned) {
  const std::string dir = Dir("plan_cli_tiny");
  const RunResult tiny = RunCommand(kDsv41Binary + " tiny --out " + dir);
  ASSERT_EQ(tiny.exit_code, 0) << tiny.out;
  const RunResult plan = RunCommand(kDsv41Binary + " plan --model " + dir + " --kv-cache-gib 1");
  ASSERT_EQ(plan.exit_code, 0);
  EXPECT_NE(plan.out.find("every expected tensor present"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("reindex"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("pool for 1.00 GiB"), std::string::npos) << plan.out;
}

TEST(PlanCliTest, MissingTensorFailsWithItsName) {
  const std::string dir = Dir("plan_cli_broken");
  ASSERT_EQ(RunCommand(kDsv41Binary + " tiny --shards 1 --out " + dir).exit_code, 0);
  // Keep config.json, replace the weights by a checkpoint of another preset's tensors.
  const std::string other = Dir("plan_cli_other");
  ASSERT_EQ(RunCommand(kDsv41Binary +
                       " tiny --shards 1 --layers 6 --ratios 0,0,2,2,1,1 "
                       "--kv-sources 2,4 --index-sources 2,4 --candidate-source 4 "
                       "--engram-layers 1,2 --dspark-targets 3,4,5 --out " +
                       other)
                .exit_code,
            0);
  std::filesystem::copy_file(other + "/model.safetensors", dir + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  const RunResult plan = RunCommand(kDsv41Binary + " plan --model " + dir + " 2>&1");
  EXPECT_EQ(plan.exit_code, 1);
  // Layer 4 is a ratio-2 kv source here but ratio 1 there: its compressor gate is missing.
  EXPECT_NE(plan.out.find("'layers.4.attn.compressor.wgate.weight': missing"), std::string::npos)
      << plan.out;
  EXPECT_NE(plan.out.find(dir), std::string::npos) << plan.out;
}

TEST(PlanCliTest, BadUsageExitsTwo) {
  EXPECT_EQ(RunCommand(kDsv41Binary + " plan 2>/dev/null").exit_code, 2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " plan --released --kv-profile huge 2>/dev/null").exit_code,
            2);
  EXPECT_EQ(RunCommand(kDsv41Binary + " tiny --preset nope --out /tmp/x 2>/dev/null").exit_code, 2);
}

}  // namespace
}  // namespace dsv41

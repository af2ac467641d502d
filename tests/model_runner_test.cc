#include "engine/model_runner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/poison.h"
#include "base/thread_pool.h"
#include "engram/row_ids.h"
#include "engram/token_map.h"
#include "kv/kv_layout.h"
#include "tiny/tiny_checkpoint.h"
#include "tiny/tiny_presets.h"

namespace dsv41 {
namespace {

class ModelRunnerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One directory per process: ctest runs each test of the suite in its own, concurrently.
    const std::string dir =
        testing::TempDir() + "/model_runner_tiny_" + std::to_string(static_cast<long>(getpid()));
    std::filesystem::remove_all(dir);
    Result<TinySpec> spec = TinyPreset("tiny");
    ASSERT_TRUE(spec.ok());
    ASSERT_TRUE(WriteTinyCheckpoint(*spec, dir).ok());
    Result<LoadedTextModel> m = LoadedTextModel::Load(dir, {}, /*with_dspark=*/false);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = new LoadedTextModel(std::move(m).value());
    dir_ = new std::string(dir);
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }

  // A request whose history is `num_tokens` tokens (with their Engram classes), `num_computed`
  // of them in the cache, and one block table per group of distinct made-up block ids.
  static std::unique_ptr<Request> MakeRequest(int32_t num_tokens, int64_t num_computed,
                                              uint32_t first_block, const CachePlan& plan) {
    auto r = std::make_unique<Request>();
    std::vector<int32_t> ids;
    for (int32_t t = 0; t < num_tokens; ++t) ids.push_back(5 + (t * 31 + first_block) % 300);
    std::vector<int32_t> classes(ids.size());
    EXPECT_TRUE(MapTokensToEngramClasses(model_->token_map, ids, classes).ok());
    EXPECT_TRUE(r->history.Append(ids, classes).ok());
    r->num_prompt_tokens = num_tokens;
    r->num_computed = num_computed;
    for (size_t g = 0; g < plan.groups.size(); ++g) {
      r->blocks.tables.push_back({first_block + static_cast<uint32_t>(g) * 8,
                                  first_block + static_cast<uint32_t>(g) * 8 + 1});
    }
    return r;
  }

  static LoadedTextModel* model_;
  static std::string* dir_;
};

LoadedTextModel* ModelRunnerTest::model_ = nullptr;
std::string* ModelRunnerTest::dir_ = nullptr;

// Three requests as the scheduler hands them over: a prefill chunk that does not reach the end
// of its prompt, a decode verifying two drafts, a whole short prompt that asked for its prompt
// logits. The batch holds their tokens back to back, each request's own block tables, the Engram
// row ids of its positions, logits for exactly the rows that are sampled, verified or asked for,
// and main_hidden for every row; the run fills one logits row per logit row.
TEST_F(ModelRunnerTest, BuildsTheBatchOfASchedulerStep) {
  const ModelConfig& config = model_->config();
  ASSERT_GT(model_->engram.num_layers(), 0) << "the tiny preset has Engram layers";
  CachePlanOptions plan_options;
  plan_options.block_tokens = 16;
  Result<CachePlan> plan = PlanCache(config, model_->model->plan(), plan_options);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ThreadPool pool(2);
  ModelRunnerOptions options;
  options.max_num_batched_tokens = 64;
  options.record_main_hidden = true;
  // The verify request reads cache rows this test never wrote: they start as zeros, not as the
  // poison of the sanitizer job (a NaN there would stop a debug build's quantiser checks).
  const bool poison = PoisonFreshMemory();
  SetPoisonFreshMemory(false);
  ModelRunner runner(*model_, *plan, 64, options, pool);
  SetPoisonFreshMemory(poison);

  std::unique_ptr<Request> prefill = MakeRequest(20, 0, 1, *plan);
  std::unique_ptr<Request> verify = MakeRequest(15, 12, 3, *plan);  // 13 committed + 2 drafts
  std::unique_ptr<Request> whole = MakeRequest(5, 0, 5, *plan);
  whole->prompt_logits = true;
  SchedulerOutput scheduled;
  scheduled.scheduled = {{prefill.get(), 8}, {verify.get(), 3}, {whole.get(), 5}};
  scheduled.num_tokens = 16;
  const std::vector<int64_t> committed = {20, 13, 5};
  runner.BuildBatch(scheduled, committed);

  const Batch& batch = runner.batch();
  ASSERT_EQ(batch.requests.size(), 3u);
  const std::vector<const Request*> requests = {prefill.get(), verify.get(), whole.get()};
  const std::vector<int32_t> first_rows = {0, 8, 11};
  std::vector<int32_t> expected_tokens;
  std::vector<int64_t> expected_engram;
  for (size_t i = 0; i < 3; ++i) {
    const Request& r = *requests[i];
    const BatchRequest& br = batch.requests[i];
    EXPECT_EQ(br.first_row, first_rows[i]) << i;
    EXPECT_EQ(br.num_tokens, scheduled.scheduled[i].num_new_tokens) << i;
    EXPECT_EQ(br.start_pos, r.num_computed) << i;
    EXPECT_EQ(br.block_tables.data(), r.blocks.tables.data()) << "request " << i << "'s tables";
    const auto ids = r.history.token_ids().subspan(br.start_pos, br.num_tokens);
    expected_tokens.insert(expected_tokens.end(), ids.begin(), ids.end());
    std::vector<int64_t> rows(static_cast<size_t>(br.num_tokens) * model_->engram.num_layers() *
                              model_->engram.num_cols());
    ComputeEngramRows(model_->engram, r.history.class_ids(), {}, br.start_pos, br.num_tokens, rows);
    expected_engram.insert(expected_engram.end(), rows.begin(), rows.end());
  }
  EXPECT_EQ(batch.token_ids, expected_tokens);
  EXPECT_EQ(batch.engram_rows, expected_engram);
  // None of the unfinished prefill; the verify's three rows (positions 12, 13, 14); all of the
  // whole prompt (asked for, and its last row samples).
  EXPECT_EQ(batch.logit_rows, (std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  std::vector<int32_t> every_row(16);
  for (int32_t t = 0; t < 16; ++t) every_row[t] = t;
  EXPECT_EQ(batch.main_hidden_rows, every_row);

  ASSERT_TRUE(runner.Run(scheduled).ok());
  ASSERT_EQ(runner.logits().size(), 8u * static_cast<size_t>(config.vocab_size));
  ASSERT_EQ(runner.main_hidden().size(), 16u * static_cast<size_t>(runner.main_hidden_width()));
  // The whole prompt's rows (the verify's read cache rows this test never wrote).
  for (const float v : runner.logits().subspan(3 * static_cast<size_t>(config.vocab_size))) {
    ASSERT_TRUE(std::isfinite(v));
  }

  // The next step's batch replaces this one (the decode alone, no prompt logits).
  verify->num_computed = 13;
  ASSERT_TRUE(verify->history.Truncate(14).ok());
  scheduled.scheduled = {{verify.get(), 1}};
  scheduled.num_tokens = 1;
  runner.BuildBatch(scheduled, std::vector<int64_t>{14});
  EXPECT_EQ(runner.batch().requests.size(), 1u);
  EXPECT_EQ(runner.batch().token_ids, (std::vector<int32_t>{verify->history.token_ids()[13]}));
  EXPECT_EQ(runner.batch().logit_rows, (std::vector<int32_t>{0}));
}

// A request whose step does not reach its history's end gets no logits unless it asked for its
// prompt's; one that did gets exactly the prompt rows it ran.
TEST_F(ModelRunnerTest, PromptLogitsCoverOnlyThePromptRowsRun) {
  CachePlanOptions plan_options;
  plan_options.block_tokens = 16;
  Result<CachePlan> plan = PlanCache(model_->config(), model_->model->plan(), plan_options);
  ASSERT_TRUE(plan.ok());
  ThreadPool pool(1);
  ModelRunner runner(*model_, *plan, 64, ModelRunnerOptions{}, pool);
  std::unique_ptr<Request> r = MakeRequest(12, 4, 1, *plan);
  r->prompt_logits = true;
  SchedulerOutput scheduled;
  scheduled.scheduled = {{r.get(), 5}};  // positions 4 .. 8 of a 12-token prompt
  scheduled.num_tokens = 5;
  runner.BuildBatch(scheduled, std::vector<int64_t>{12});
  EXPECT_EQ(runner.batch().logit_rows, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(runner.batch().main_hidden_rows.empty()) << "main_hidden only when recorded";
  r->prompt_logits = false;
  runner.BuildBatch(scheduled, std::vector<int64_t>{12});
  EXPECT_TRUE(runner.batch().logit_rows.empty());
}

}  // namespace
}  // namespace dsv41

// Selection coverage on long prompts (real-weight-traps.md K1, K2, K8): prompts 10–100× the
// sliding window of the `tiny` preset (window 8, index_topk 4, 3 candidate blocks of 2, ratios
// {0,0,2,2,2,2,1,1,1,1}), where every index source truncates to its top-k and the candidate
// source drops blocks. The per-layer selected entry sets and the candidate sets (ForwardObserver::
// OnSelection) and the logits are compared between one-shot prefill, chunked prefill (odd chunks,
// chunks ending mid-group) and token-by-token decode, and every top-k and candidate mask is
// rechecked against a naive reference over the scores it was taken from (the tie rule byte for
// byte). Then the official index-key slot switch (model/index_key_slot.h) both ways.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engram/hash_constants.h"
#include "engram/token_map.h"
#include "kv/kv_layout.h"
#include "model/forward.h"
#include "model/weights.h"
#include "text/tokenizer.h"
#include "tiny/tiny_checkpoint.h"
#include "tiny/tiny_presets.h"

namespace dsv41 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The naive top-k of model.md §7.5 step 6: the min(k, V) best of row[0, V) by (score descending,
// entry ascending), in ascending entry order, −1 padded to k.
std::vector<int32_t> NaiveTopK(std::span<const float> row, int32_t visible, int32_t k) {
  std::vector<int32_t> order(static_cast<size_t>(visible));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  order.resize(static_cast<size_t>(std::min(k, visible)));
  std::sort(order.begin(), order.end());
  order.resize(static_cast<size_t>(k), -1);
  return order;
}

// The naive candidate mask of model.md §7.5 step 5 over row[0, N).
std::vector<uint8_t> NaiveCandidateMask(std::span<const float> row, int32_t visible,
                                        int32_t num_blocks, int32_t block_size) {
  const int32_t n = static_cast<int32_t>(row.size());
  const int32_t n_blocks = (n + block_size - 1) / block_size;
  std::vector<float> block(static_cast<size_t>(n_blocks), -kInf);
  for (int32_t e = 0; e < n; ++e) block[e / block_size] = std::max(block[e / block_size], row[e]);
  if (visible > 0) block[(visible - 1) / block_size] = kInf;
  std::vector<int32_t> order(static_cast<size_t>(n_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return block[a] > block[b]; });
  std::vector<uint8_t> mask(static_cast<size_t>(n), 0);
  for (int32_t i = 0; i < std::min(num_blocks, n_blocks); ++i) {
    const int32_t b = order[i];
    if (!(block[b] > -kInf)) continue;
    for (int32_t e = b * block_size; e < std::min(n, (b + 1) * block_size); ++e) mask[e] = 1;
  }
  return mask;
}

// What one run selected, per layer, in position order (one request, forwards in order).
struct RunSelections {
  // Layer → [positions, index_topk] entries.
  std::map<int32_t, std::vector<int32_t>> entries;
  // Candidate source → the mask over each position's visible entries, concatenated.
  std::map<int32_t, std::vector<uint8_t>> candidates;
  bool operator==(const RunSelections&) const = default;
};

// How often the selection machinery actually had something to decide (so the comparisons cannot
// pass vacuously).
struct Coverage {
  std::map<int32_t, int64_t> truncated;  // layer → positions with V > index_topk
  int64_t candidates_dropped = 0;        // candidate-source positions keeping < V entries
  int64_t candidate_blocks_over = 0;     // ... whose ceil(V / block) > candidate_topk_blocks
  int64_t boundary_ties = 0;             // index-source positions with a tie at the top-k boundary
  int64_t rechecked = 0;                 // top-k rows compared with NaiveTopK
};

// Records the selections of every forward, and rechecks each index source's top-k (and the
// candidate source's mask) against the naive reference over the scores the indexer reported.
class SelectionRecorder final : public ForwardObserver {
 public:
  // `with_scores`: also take every index source's scores and recheck the top-k and candidates
  // against them (the indexer then scores each request in one pass).
  SelectionRecorder(const ModelConfig& config, const LayerPlan& plan, bool with_scores = true)
      : config_(config), plan_(plan), with_scores_(with_scores) {}

  RunSelections selections;
  Coverage coverage;

  bool WantsSelections() const override { return true; }
  bool WantsIndexerScores() const override { return with_scores_; }
  void OnIndexerScores(int32_t layer, size_t /*request_idx*/, std::span<const float> s,
                       std::span<const uint8_t> /*tie*/) override {
    scores_[layer].assign(s.begin(), s.end());
  }
  void OnSelection(int32_t layer, size_t /*request_idx*/, const Selection& s) override {
    const LayerRole& role = plan_.layers[static_cast<size_t>(layer)];
    ASSERT_EQ(s.per_token, config_.index_topk);
    ASSERT_EQ(s.entries.size(), static_cast<size_t>(s.num_tokens) * s.per_token);
    std::vector<int32_t>& out = selections.entries[layer];
    out.insert(out.end(), s.entries.begin(), s.entries.end());
    const int32_t n = s.num_entries;
    for (int32_t t = 0; t < s.num_tokens; ++t) {
      const int32_t visible = (s.start_pos + t + 1) / s.ratio;
      const auto picks = s.entries.subspan(static_cast<size_t>(t) * s.per_token, s.per_token);
      if (visible > config_.index_topk) {
        ++coverage.truncated[layer];
        EXPECT_TRUE(std::none_of(picks.begin(), picks.end(), [](int32_t e) { return e < 0; }));
      }
      if (role.is_candidate_source) RecordCandidates(layer, s, t, visible);
      if (!role.is_index_source || !with_scores_) continue;
      const std::vector<float>& all = scores_.at(layer);
      ASSERT_EQ(all.size(), static_cast<size_t>(s.num_tokens) * n);
      const std::span<const float> row = std::span<const float>(all).subspan(t * n, n);
      const std::vector<int32_t> want = NaiveTopK(row, visible, config_.index_topk);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), picks.begin()))
          << "layer " << layer << " position " << s.start_pos + t;
      ++coverage.rechecked;
      if (visible > config_.index_topk) {
        std::vector<float> sorted(row.begin(), row.begin() + visible);
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        coverage.boundary_ties += sorted[config_.index_topk - 1] == sorted[config_.index_topk];
      }
      if (role.uses_candidate_filter) {  // every pick lies in the candidate pool
        const std::vector<uint8_t>& mask = masks_.at(config_.candidate_source_layer_id);
        for (int32_t e : picks) {
          if (e >= 0) {
            EXPECT_EQ(mask[t * n + e], 1) << "layer " << layer << " entry " << e;
          }
        }
      }
    }
  }

 private:
  void RecordCandidates(int32_t layer, const Selection& s, int32_t t, int32_t visible) {
    const int32_t n = s.num_entries;
    ASSERT_EQ(s.candidates.size(), static_cast<size_t>(s.num_tokens) * n);
    if (t == 0) masks_[layer].assign(s.candidates.begin(), s.candidates.end());
    const auto mask = s.candidates.subspan(static_cast<size_t>(t) * n, n);
    if (with_scores_) {
      const std::vector<float>& all = scores_.at(layer);
      const std::vector<uint8_t> want =
          NaiveCandidateMask(std::span<const float>(all).subspan(t * n, n), visible,
                             config_.candidate_topk_blocks, config_.candidate_block_size);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), mask.begin()))
          << "candidates of layer " << layer << " position " << s.start_pos + t;
    }
    std::vector<uint8_t>& out = selections.candidates[layer];
    out.insert(out.end(), mask.begin(), mask.begin() + visible);
    const int64_t kept = std::count(mask.begin(), mask.begin() + visible, uint8_t{1});
    coverage.candidates_dropped += kept < visible;
    const int32_t blocks =
        (visible + config_.candidate_block_size - 1) / config_.candidate_block_size;
    coverage.candidate_blocks_over += blocks > config_.candidate_topk_blocks;
  }

  const ModelConfig& config_;
  const LayerPlan& plan_;
  const bool with_scores_;
  std::map<int32_t, std::vector<float>> scores_;   // this forward's, by index layer
  std::map<int32_t, std::vector<uint8_t>> masks_;  // this forward's, by candidate source
};

struct RunResult {
  std::vector<float> logits;  // [positions, vocab]
  RunSelections selections;
  Coverage coverage;
};

class SelectionTest : public ::testing::Test {
 protected:
  // Loads the model once per process (see forward_test.cc: a failure then fails the first test).
  void SetUp() override {
    if (model_ == nullptr) LoadOnce();
    ASSERT_NE(constants_, nullptr) << "the tiny model failed to load in an earlier test";
  }
  static void LoadOnce() {
    dir_ = new std::string(::testing::TempDir() + "/selection_test_" +
                           std::to_string(static_cast<long>(getpid())));
    std::filesystem::remove_all(*dir_);
    Result<TinySpec> spec = TinyPreset("tiny");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    spec->num_shards = 1;
    Result<TinyCheckpointSummary> written = WriteTinyCheckpoint(*spec, *dir_);
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    Result<ModelWeights> weights = ModelWeights::Load(*dir_, LoadOptions{.include_dspark = false});
    ASSERT_TRUE(weights.ok()) << weights.status().ToString();
    weights_ = new ModelWeights(std::move(weights).value());
    Result<std::unique_ptr<TextModel>> model = TextModel::Load(*weights_);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = model->release();
    Result<Tokenizer> tokenizer = Tokenizer::Load(*dir_ + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    Result<EngramTokenMap> map = BuildEngramTokenMap(*tokenizer);
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    token_map_ = new EngramTokenMap(std::move(map).value());
    Result<EngramHashConstants> constants =
        ComputeEngramHashConstants(weights_->config(), *token_map_);
    ASSERT_TRUE(constants.ok()) << constants.status().ToString();
    constants_ = new EngramHashConstants(std::move(constants).value());
  }
  // Each suite (this one and the parameterised one) loads its own copy.
  static void TearDownTestSuite() {
    delete constants_;
    delete token_map_;
    delete model_;
    delete weights_;
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    constants_ = nullptr;
    token_map_ = nullptr;
    model_ = nullptr;
    weights_ = nullptr;
    dir_ = nullptr;
  }

  static const ModelConfig& config() { return model_->config(); }

  static std::vector<int32_t> Prompt(uint32_t seed, int32_t n) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(3, model_->vocab_size() - 1);
    std::vector<int32_t> ids(n);
    for (int32_t& t : ids) t = id(rng);
    return ids;
  }

  // Runs `ids` through one request as forwards of the given sizes (summing to its length), with
  // the official index-key slot on or off; returns every position's logits and the selections.
  // `score_budget_bytes` > 0: the indexer's score budget (ExecContext), selections recorded
  // without the scores (which would make the indexer score in one pass).
  static RunResult Run(const std::vector<int32_t>& ids, const std::vector<int32_t>& chunks,
                       bool official_slot = false, bool observe = true,
                       size_t score_budget_bytes = 0) {
    RunResult result;
    Result<ContiguousKvCache> cache = ContiguousKvCache::Create(
        config(), model_->plan(), static_cast<int64_t>(ids.size()), KvProfile::kSeed, 0, 1);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    if (!cache.ok()) return result;
    static OwnedExecContext* exec = new OwnedExecContext(1);
    ExecContext& ctx = exec->ctx;
    ctx.official_index_key_slot = official_slot;
    const size_t default_budget = ctx.indexer_score_budget_bytes;
    if (score_budget_bytes > 0) ctx.indexer_score_budget_bytes = score_budget_bytes;
    SelectionRecorder recorder(config(), model_->plan(), score_budget_bytes == 0);
    std::optional<ScopedForwardObserver> watch;
    if (observe) watch.emplace(ctx, recorder);
    std::vector<int32_t> classes(ids.size());
    EXPECT_TRUE(MapTokensToEngramClasses(*token_map_, ids, classes).ok());
    const int32_t vocab = model_->vocab_size();
    int32_t start = 0;
    for (int32_t n : chunks) {
      Batch batch;
      AppendToBatch(*constants_,
                    BatchSlice{.token_ids = ids,
                               .class_ids = classes,
                               .dead = {},
                               .start = start,
                               .num_tokens = n,
                               .block_tables = cache->block_tables(),
                               .logits_from = start},
                    batch);
      std::vector<float> logits(static_cast<size_t>(n) * vocab);
      SyncEngramStepRows engram = model_->MappedEngramRows();
      engram.StartStep(batch.engram_rows, batch.num_tokens());
      const Status s =
          model_->Forward(batch, cache->view(), engram, ForwardOutputs{.logits = logits}, ctx);
      EXPECT_TRUE(s.ok()) << s.ToString();
      result.logits.insert(result.logits.end(), logits.begin(), logits.end());
      start += n;
    }
    ctx.official_index_key_slot = false;
    ctx.indexer_score_budget_bytes = default_budget;
    EXPECT_EQ(start, static_cast<int32_t>(ids.size()));
    result.selections = std::move(recorder.selections);
    result.coverage = recorder.coverage;
    return result;
  }

  // Chunks of `size` (the last one shorter).
  static std::vector<int32_t> Chunks(int32_t total, int32_t size) {
    std::vector<int32_t> out;
    for (int32_t s = 0; s < total; s += size) out.push_back(std::min(size, total - s));
    return out;
  }
  // A prefill of `prefill` tokens, then one-token decode steps to `total`.
  static std::vector<int32_t> PrefillThenDecode(int32_t total, int32_t prefill) {
    std::vector<int32_t> out = {prefill};
    out.resize(static_cast<size_t>(1 + total - prefill), 1);
    return out;
  }

  static bool SameBits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
  }

  static std::string* dir_;
  static ModelWeights* weights_;
  static TextModel* model_;
  static EngramTokenMap* token_map_;
  static EngramHashConstants* constants_;
};

std::string* SelectionTest::dir_ = nullptr;
ModelWeights* SelectionTest::weights_ = nullptr;
TextModel* SelectionTest::model_ = nullptr;
EngramTokenMap* SelectionTest::token_map_ = nullptr;
EngramHashConstants* SelectionTest::constants_ = nullptr;

// The one-shot run truncates everywhere it should: every ratio > 0 layer at most positions, the
// candidate source drops blocks, the filter's picks stay in the pool (checked by the recorder),
// and ties at the top-k boundary occur, so the naive recheck pins the tie rule.
void ExpectCoverage(const Coverage& c, const ModelConfig& config, const LayerPlan& plan,
                    int32_t length) {
  for (const LayerRole& role : plan.layers) {
    if (role.ratio == 0) continue;
    const int64_t want = length - (config.index_topk + 1) * role.ratio + 1;
    EXPECT_EQ(c.truncated.count(role.layer) ? c.truncated.at(role.layer) : 0, want)
        << "layer " << role.layer << ": positions with more visible entries than index_topk";
  }
  EXPECT_GT(c.candidate_blocks_over, length / 2);
  EXPECT_GT(c.candidates_dropped, length / 2);
  EXPECT_GT(c.boundary_ties, 0) << "no top-k boundary tie: the tie rule is untested";
  EXPECT_GT(c.rechecked, 0);
}

class SelectionLongPromptTest : public SelectionTest,
                                public ::testing::WithParamInterface<int32_t> {};

TEST_P(SelectionLongPromptTest, ChunkedAndDecodeSelectLikeOneShotPrefill) {
  const int32_t length = GetParam();
  ASSERT_GE(length, 10 * config().sliding_window);
  ASSERT_NE(length % 2, 0) << "the length must not be a multiple of the ratios";
  const std::vector<int32_t> ids = Prompt(static_cast<uint32_t>(length), length);
  const RunResult one_shot = Run(ids, {length});
  ExpectCoverage(one_shot.coverage, config(), model_->plan(), length);
  std::vector<std::vector<int32_t>> schedules = {
      Chunks(length, 5),   // odd: chunks end mid-group (at even positions)
      Chunks(length, 64),  // even
      PrefillThenDecode(length, length - 23),
      PrefillThenDecode(length, length - 24),  // an even prefill, then decode from an even pos
  };
  // Irregular sizes: single tokens, pairs, odd and even, starting mid-group.
  std::vector<int32_t> irregular;
  for (int32_t left = length, i = 0; left > 0; ++i) {
    const int32_t n = std::min(left, std::vector<int32_t>{1, 2, 37, 1, 8, 13, 3}[i % 7]);
    irregular.push_back(n);
    left -= n;
  }
  schedules.push_back(irregular);
  if (length < 400) schedules.push_back(Chunks(length, 1));  // token by token from position 0
  for (const std::vector<int32_t>& schedule : schedules) {
    const RunResult run = Run(ids, schedule);
    const std::string what = "schedule of " + std::to_string(schedule.size()) +
                             " forwards, first " + std::to_string(schedule[0]);
    EXPECT_TRUE(run.selections.entries == one_shot.selections.entries) << what;
    EXPECT_TRUE(run.selections.candidates == one_shot.selections.candidates) << what;
    EXPECT_TRUE(SameBits(run.logits, one_shot.logits)) << what;
  }
  // The indexer's score matrix within a small budget (trap K3): the new tokens scored in passes
  // of 16 and of 64, one-shot and in chunks of 64, select, filter and compute alike.
  for (const size_t budget : {size_t{1}, size_t{64} * length * 4}) {
    for (const std::vector<int32_t>& schedule :
         {std::vector<int32_t>{length}, Chunks(length, 64)}) {
      const RunResult run = Run(ids, schedule, false, true, budget);
      const std::string what = "budget " + std::to_string(budget) + " B, " +
                               std::to_string(schedule.size()) + " forwards";
      EXPECT_TRUE(run.selections.entries == one_shot.selections.entries) << what;
      EXPECT_TRUE(run.selections.candidates == one_shot.selections.candidates) << what;
      EXPECT_TRUE(SameBits(run.logits, one_shot.logits)) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Lengths, SelectionLongPromptTest, ::testing::Values(83, 331, 797));

// K8: an odd prompt, then single-token decode steps.
constexpr int32_t kOddPrompt = 83;
constexpr int32_t kDecodeSteps = 8;

// The default (the clean rule): decode equals one-shot prefill bit for bit, and the switch leaves
// a one-shot prefill and a chunked prefill whose chunks all close groups unchanged.
TEST_F(SelectionTest, DefaultIndexKeysDecodeEqualsPrefillAndTheSwitchSparesPrefill) {
  const int32_t total = kOddPrompt + kDecodeSteps;
  const std::vector<int32_t> ids = Prompt(41, total);
  const RunResult one_shot = Run(ids, {total});
  // Observing the selections and scores changes no bit.
  EXPECT_TRUE(SameBits(Run(ids, {total}, false, /*observe=*/false).logits, one_shot.logits));
  EXPECT_TRUE(SameBits(Run(ids, PrefillThenDecode(total, kOddPrompt)).logits, one_shot.logits));
  EXPECT_TRUE(SameBits(Run(ids, {total}, /*official_slot=*/true).logits, one_shot.logits));
  // Chunks of 7 (ending mid-group at even positions): each closes groups of every source.
  ASSERT_EQ(total % 7, 0);
  const RunResult chunked = Run(ids, Chunks(total, 7), /*official_slot=*/true);
  EXPECT_TRUE(SameBits(chunked.logits, one_shot.logits));
  EXPECT_TRUE(chunked.selections == one_shot.selections);
}

// The switch on: a decode step from a clean cache at an odd position completes every group and
// equals prefill; at an even position the ratio-2 indexers borrow layer 6's keys, change their
// picks and the logits. Chained decode steps then carry the change (the reference's "downstream
// effects persist"): only the first step, at an odd position, still equals prefill.
TEST_F(SelectionTest, OfficialIndexKeySlotChangesEvenDecodeStepsOnly) {
  const int32_t total = kOddPrompt + kDecodeSteps;
  const std::vector<int32_t> ids = Prompt(41, total);
  const RunResult one_shot = Run(ids, {total});
  const int32_t vocab = model_->vocab_size();
  auto row = [&](const std::vector<float>& logits, int32_t p) {
    return std::span<const float>(logits).subspan(static_cast<size_t>(p) * vocab, vocab);
  };
  const int32_t topk = config().index_topk;
  auto picks = [&](const RunResult& r, int32_t layer, int32_t p) {
    return std::vector<int32_t>(r.selections.entries.at(layer).begin() + p * topk,
                                r.selections.entries.at(layer).begin() + (p + 1) * topk);
  };
  // Each step alone: a clean prefill of [0, p), then one official decode step at p.
  for (int32_t p = kOddPrompt; p < total; ++p) {
    std::vector<int32_t> schedule = {p, 1};
    const std::vector<int32_t> prefix(ids.begin(), ids.begin() + p + 1);
    RunResult step = Run(prefix, schedule, /*official_slot=*/true);
    const bool even = p % 2 == 0;
    EXPECT_EQ(SameBits(row(step.logits, p), row(one_shot.logits, p)), !even) << "position " << p;
    // At an odd position every layer picks as in prefill; at an even one the ratio-2 layers'
    // picks change (and, downstream, through the token's hidden state, possibly later layers').
    bool ratio2_changed = false;
    for (const LayerRole& role : model_->plan().layers) {
      if (role.ratio == 0) continue;
      const bool same = picks(step, role.layer, p) == picks(one_shot, role.layer, p);
      if (!even) {
        EXPECT_TRUE(same) << "layer " << role.layer << " position " << p;
      }
      if (role.ratio == 2) ratio2_changed = ratio2_changed || !same;
    }
    EXPECT_EQ(ratio2_changed, even) << "position " << p;
  }
  // Chained decode steps after an odd prefill.
  const RunResult decode = Run(ids, PrefillThenDecode(total, kOddPrompt), /*official_slot=*/true);
  EXPECT_TRUE(SameBits(std::span<const float>(decode.logits).first(kOddPrompt * vocab + vocab),
                       std::span<const float>(one_shot.logits).first(kOddPrompt * vocab + vocab)))
      << "the prompt and the first (odd) decode step are unchanged";
  for (int32_t p = kOddPrompt + 1; p < total; p += 2) {
    EXPECT_FALSE(SameBits(row(decode.logits, p), row(one_shot.logits, p))) << "position " << p;
  }
}

}  // namespace
}  // namespace dsv41

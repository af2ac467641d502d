// Speculative decoding through the engine (model.md §11.5, serving.md §7), on the tiny presets and
// the golden checkpoints (1, 2 and 3 DSpark stages, windows 8 to 16):
// - greedy with speculation (dspark and ngram, K = 1..5) = greedy without, token and logprob;
// - a test drafter forcing every draft right, every draft wrong, or a mix: the same tokens, and
//   the acceptance counters say what was forced;
// - after verify steps with rejections, the token history and every live cache row (SWA, draft
//   windows, compressed entries, index keys, ring partners) equal a plain run's at that length;
// - seeded sampling with speculation = without, seed by seed; and a chi-square test that the
//   distribution of the tokens a verify step emits is the plain one (and that the same test
//   rejects a deliberately wrong acceptance rule);
// - a mixed batch with chunked prefill, prefix hits and preemption, some requests drafting and
//   some not, = each request alone without speculation;
// - the acceptance guard pauses a drafter that never hits.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "engine_runner.h"
#include "tiny/tiny_checkpoint.h"
#include "tiny/tiny_presets.h"

namespace dsv41 {
namespace {

// A model every test of the process shares: a tiny preset written to a temporary directory, or a
// golden checkpoint as shipped; loaded once with its DSpark stages.
const LoadedTextModel& Model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<LoadedTextModel>>* models =
      new std::map<std::string, std::unique_ptr<LoadedTextModel>>();
  auto it = models->find(name);
  if (it != models->end()) return *it->second;
  std::string dir;
  if (name.starts_with("golden-")) {
    dir = std::string(DSV41_SHARED_DIR) + "/goldens/model/checkpoints/" + name.substr(7);
  } else {
    dir = ::testing::TempDir() + "/speculative_engine_test_" + name + "_" +
          std::to_string(static_cast<long>(getpid()));
    std::filesystem::remove_all(dir);
    Result<TinySpec> spec = TinyPreset(name);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    spec->num_shards = 1;
    Result<TinyCheckpointSummary> written = WriteTinyCheckpoint(*spec, dir);
    EXPECT_TRUE(written.ok()) << written.status().ToString();
  }
  Result<LoadedTextModel> m = LoadedTextModel::Load(dir, {}, /*with_dspark=*/true);
  EXPECT_TRUE(m.ok()) << name << ": " << m.status().ToString();
  if (!m.ok()) std::abort();                                           // every later test needs it
  if (!name.starts_with("golden-")) std::filesystem::remove_all(dir);  // mapped: still readable
  return *models->emplace(name, std::make_unique<LoadedTextModel>(std::move(m).value()))
              .first->second;
}

ThreadPool& Pool() {
  static ThreadPool* pool = new ThreadPool(2);
  return *pool;
}

std::vector<int32_t> RandomPrompt(const LoadedTextModel& m, uint32_t seed, int32_t n) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, m.config().vocab_size - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = id(rng);
  return ids;
}

// A prompt that repeats a short phrase, which the n-gram drafter can look up.
std::vector<int32_t> RepetitivePrompt(const LoadedTextModel& m, uint32_t seed, int32_t n) {
  const std::vector<int32_t> phrase = RandomPrompt(m, seed, 5);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n; ++i) ids.push_back(phrase[i % phrase.size()]);
  return ids;
}

SamplingParams Greedy(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.logprobs = 3;
  return p;
}

SamplingParams Sampled(int32_t max_tokens, uint64_t seed) {
  SamplingParams p = Greedy(max_tokens);
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.top_k = 40;
  p.min_p = 0.01f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.2f;
  p.repetition_penalty = 1.1f;
  p.seed = seed;
  return p;
}

EngineOptions Options(SpeculativeMethod method = SpeculativeMethod::kOff, int32_t k = 5,
                      int32_t block_tokens = 4) {
  EngineOptions o;
  o.block_tokens = block_tokens;
  o.num_blocks = 4096;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 512;
  o.speculative.method = method;
  o.speculative.num_speculative_tokens = k;
  o.speculative.min_acceptance = 0.0;  // draft on every step unless a test turns the guard on
  // Shorter guard pauses than the default 128 keep the guard tests' requests short.
  o.speculative.guard_initial_pause_steps = 32;
  o.speculative.guard_min_pause_steps = 64;
  return o;
}

// RunRequests on the shared pool; with `states`, request 0's state after every step, keyed by
// its token count.
std::vector<Generated> RunEngine(const LoadedTextModel& m, const EngineOptions& options,
                                 const std::vector<std::vector<int32_t>>& prompts,
                                 const std::vector<SamplingParams>& params,
                                 std::vector<int32_t> arrival_step = {},
                                 EngineStats* stats = nullptr,
                                 std::map<int64_t, RequestState>* states = nullptr) {
  std::function<void(const Engine&, uint64_t)> record;
  if (states != nullptr) {
    record = [states](const Engine& engine, uint64_t id) {
      Result<RequestState> state = engine.InspectRequest(id);
      if (state.ok()) (*states)[static_cast<int64_t>(state->token_ids.size())] = *state;
    };
  }
  return RunRequests(m, Pool(), options, prompts, params, std::move(arrival_step), false, stats,
                     record);
}

Generated RunAlone(const LoadedTextModel& m, const std::vector<int32_t>& prompt,
                   const SamplingParams& params) {
  return RunEngine(m, Options(), {prompt}, {params}).at(0);
}

// ContinuationDrafter over the plain runs' continuations, each draft replaced by a wrong one
// where `right(history length, draft index)` says so.
DraftFn KnowingDrafter(std::vector<std::vector<int32_t>> prompts,
                       std::vector<std::vector<int32_t>> continuations, int32_t vocab,
                       std::function<bool(int64_t, int32_t)> right) {
  DraftFn oracle = ContinuationDrafter(std::move(prompts), std::move(continuations));
  return [=](std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& drafts) {
    oracle(history, max_tokens, drafts);
    for (size_t k = 0; k < drafts.size(); ++k) {
      if (!right(static_cast<int64_t>(history.size()), static_cast<int32_t>(k))) {
        drafts[k] = (drafts[k] + 1) % vocab;
      }
    }
  };
}

// Builds with assertions (the sanitizer runs, ~20x slower) check one small model and the ends of
// each range: their point is memory and UB errors on every code path, the release build checks
// the whole matrix.
#ifdef NDEBUG
constexpr bool kFullMatrix = true;
#define DSV41_MODELS(...) ::testing::Values(__VA_ARGS__)
#else
constexpr bool kFullMatrix = false;
#define DSV41_MODELS(...) ::testing::Values("golden-tiny-b")
#endif

// Output tokens of a request: `n` in the full matrix, half of it (at least 6) otherwise.
int32_t Len(int32_t n) { return kFullMatrix ? n : std::max(6, n / 2); }

// What the full matrix runs, else the first of `some`.
template <typename T>
std::vector<T> Pick(std::vector<T> all, std::vector<T> some) {
  return kFullMatrix ? all : std::vector<T>(some.begin(), some.begin() + 1);
}

// The models of the parameterised tests: the tiny presets and the golden checkpoints (their
// stage counts and windows); each test takes the models it needs.
class SpeculativeEngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  const LoadedTextModel& M() const { return Model(GetParam()); }
  bool IsTinyPreset() const { return !std::string(GetParam()).starts_with("golden-"); }
  // Every K on the tiny presets, `golden` on the golden checkpoints, the largest without the
  // full matrix.
  std::vector<int32_t> Ks(std::vector<int32_t> golden) const {
    if (!kFullMatrix) return {5};
    if (IsTinyPreset()) return {1, 2, 3, 4, 5};
    return golden;
  }
};
class SpeculativeGreedyTest : public SpeculativeEngineTest {};
class SpeculativeForcedTest : public SpeculativeEngineTest {};
class SpeculativeStateTest : public SpeculativeEngineTest {};
class SpeculativeSamplingTest : public SpeculativeEngineTest {};
class SpeculativeMixedTest : public SpeculativeEngineTest {};

std::string ModelName(const ::testing::TestParamInfo<const char*>& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

const std::vector<SpeculativeMethod> kBothMethods = {SpeculativeMethod::kDspark,
                                                     SpeculativeMethod::kNgram};

// Greedy with speculation is greedy without, token and logprob, for both drafters, every K on the
// tiny presets, with and without confidence-scheduled verification.
TEST_P(SpeculativeGreedyTest, GreedyWithSpeculationEqualsGreedyWithout) {
  const LoadedTextModel& m = M();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (uint32_t i = 0; i < 2; ++i) {
    prompts.push_back(RandomPrompt(m, 10 + i, 3 + 17 * i));
    prompts.push_back(RepetitivePrompt(m, 20 + i, 12 + 9 * i));
  }
  for (size_t i = 0; i < prompts.size(); ++i) params.push_back(Greedy(Len(10 + 3 * i)));
  const std::vector<Generated> plain = RunEngine(m, Options(), prompts, params);
  for (SpeculativeMethod method : Pick(kBothMethods, kBothMethods)) {
    for (int32_t k : Ks({2, 5})) {
      SCOPED_TRACE(std::string(SpeculativeMethodName(method)) + ", K " + std::to_string(k));
      EngineStats stats;
      const std::vector<Generated> spec =
          RunEngine(m, Options(method, k), prompts, params, {0, 0, 1, 2}, &stats);
      ASSERT_EQ(spec.size(), plain.size());
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i;
        EXPECT_TRUE(SameLogprobs(spec[i].logprobs, plain[i].logprobs)) << "request " << i;
      }
      if (method == SpeculativeMethod::kDspark) {
        EXPECT_GT(stats.num_draft_tokens, 0u);
        EXPECT_GT(stats.num_draft_forwards, 0u);
      }
      EXPECT_LE(stats.num_accepted_tokens, stats.num_draft_tokens);
      if (method != SpeculativeMethod::kDspark || k != 5 || !kFullMatrix) continue;
      // Confidence-scheduled verification checks a prefix of the drafts only: the same tokens,
      // the same draft forwards, fewer drafts verified (none at a threshold no sigmoid reaches).
      for (const double threshold : {0.5, 1.0}) {
        SCOPED_TRACE("confidence threshold " + std::to_string(threshold));
        EngineOptions options = Options(method, k);
        options.speculative.confidence_threshold = threshold;
        EngineStats scheduled;
        const std::vector<Generated> got =
            RunEngine(m, options, prompts, params, {0, 0, 1, 2}, &scheduled);
        for (size_t i = 0; i < prompts.size(); ++i) {
          EXPECT_EQ(got[i].tokens, plain[i].tokens) << "request " << i;
        }
        EXPECT_LE(scheduled.num_draft_tokens, stats.num_draft_tokens);
        EXPECT_GT(scheduled.num_draft_forwards, 0u);
        if (threshold == 1.0) {
          EXPECT_EQ(scheduled.num_draft_tokens, 0u);
        }
      }
    }
  }
}

// Every draft right (each verify emits K + 1 tokens), every draft wrong (each emits one), and a
// mix that changes with the position: the tokens are the plain run's, and the counters say how
// many drafts were accepted. DSpark's cache plan (the windows are seeded on every step; the test
// drafter proposes).
TEST_P(SpeculativeForcedTest, ForcedAcceptancesAndRejectionsGiveThePlainTokens) {
  const LoadedTextModel& m = M();
  const std::vector<std::vector<int32_t>> prompts = {RandomPrompt(m, 30, 11),
                                                     RandomPrompt(m, 31, 4)};
  const std::vector<SamplingParams> params = {Greedy(Len(16)), Greedy(Len(11))};
  const std::vector<Generated> plain = RunEngine(m, Options(), prompts, params);
  const std::vector<std::vector<int32_t>> continuations = {plain[0].tokens, plain[1].tokens};
  const int32_t vocab = m.config().vocab_size;
  struct Pattern {
    const char* name;
    std::function<bool(int64_t, int32_t)> right;
  };
  const std::vector<Pattern> patterns = {
      {"all right", [](int64_t, int32_t) { return true; }},
      {"all wrong", [](int64_t, int32_t) { return false; }},
      {"mixed", [](int64_t len, int32_t k) { return k < len % 4; }}};
  const SpeculativeMethod method = SpeculativeMethod::kDspark;
  for (int32_t k : Ks({3})) {
    for (const Pattern& pattern : patterns) {
      SCOPED_TRACE(std::string(SpeculativeMethodName(method)) + ", K " + std::to_string(k) + ", " +
                   pattern.name);
      EngineOptions options = Options(method, k);
      options.speculative.custom_drafter =
          KnowingDrafter(prompts, continuations, vocab, pattern.right);
      EngineStats stats;
      const std::vector<Generated> spec = RunEngine(m, options, prompts, params, {}, &stats);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i;
        EXPECT_TRUE(SameLogprobs(spec[i].logprobs, plain[i].logprobs)) << "request " << i;
      }
      EXPECT_GT(stats.num_draft_tokens, 0u);
      if (std::string(pattern.name) == "all right") {
        EXPECT_EQ(stats.num_accepted_tokens, stats.num_draft_tokens);
        EXPECT_EQ(stats.acceptance_rate(), 1.0);
      } else if (std::string(pattern.name) == "all wrong") {
        EXPECT_EQ(stats.num_accepted_tokens, 0u);
        EXPECT_EQ(stats.mean_accepted_length(), 1.0);
      } else if (k > 1) {
        EXPECT_GT(stats.num_accepted_tokens, 0u);
        EXPECT_LT(stats.num_accepted_tokens, stats.num_draft_tokens);
      }
      ASSERT_EQ(stats.drafts_at_position.size(), static_cast<size_t>(k));
      uint64_t drafts = 0, accepted = 0;
      for (int32_t j = 0; j < k; ++j) {
        drafts += stats.drafts_at_position[j];
        accepted += stats.accepted_at_position[j];
        if (j > 0) {
          EXPECT_LE(stats.accepted_at_position[j], stats.accepted_at_position[j - 1]);
        }
      }
      EXPECT_EQ(drafts, stats.num_draft_tokens);
      EXPECT_EQ(accepted, stats.num_accepted_tokens);
    }
  }
}

// The ends a real draft block meets (real-weight-traps.md S1), with every draft right (K = 5, a
// verify emits up to 6 tokens): a stop token at a position inside a verify block, and a length
// cap that falls inside one, end the request where the plain run ends it — the same tokens,
// logprobs and finish reason, nothing after the stop; and the history sent again as a new prompt
// to the same engine hits the prefix cache that the cut request left, with the bits of a fresh
// engine.
TEST_P(SpeculativeForcedTest, StopAndLengthInsideAnAcceptedBlockEndLikeThePlainRun) {
  const LoadedTextModel& m = M();
  const std::vector<int32_t> prompt = RandomPrompt(m, 40, 13);
  const std::vector<Generated> plain = RunEngine(m, Options(), {prompt}, {Greedy(16)});
  const std::vector<int32_t>& continuation = plain[0].tokens;
  ASSERT_EQ(continuation.size(), 16u);
  // The first token comes from the prefill, the verify steps then cover [1, 7), [7, 13), ...: a
  // stop at index 3..5 or 9..11 lies inside a block. Take the first such index whose token did not
  // occur before it.
  int32_t stop_at = -1;
  for (int32_t j : {3, 4, 5, 9, 10, 11}) {
    if (std::find(continuation.begin(), continuation.begin() + j, continuation[j]) ==
        continuation.begin() + j) {
      stop_at = j;
      break;
    }
  }
  ASSERT_GE(stop_at, 0) << "no fresh token inside a block";
  EngineOptions spec_options = Options(SpeculativeMethod::kDspark, 5);
  spec_options.speculative.custom_drafter = KnowingDrafter(
      {prompt}, {continuation}, m.config().vocab_size, [](int64_t, int32_t) { return true; });

  SamplingParams stop = Greedy(16);
  stop.ignore_eos = false;
  stop.stop_token_ids = {continuation[stop_at]};
  SamplingParams cap = Greedy(stop_at + 1);
  for (const SamplingParams& params : {stop, cap}) {
    SCOPED_TRACE(params.stop_token_ids.empty() ? "length cap" : "stop token");
    const Generated want = RunEngine(m, Options(), {prompt}, {params}).at(0);
    ASSERT_EQ(want.tokens.size(), static_cast<size_t>(stop_at + 1));
    EngineStats stats;
    const Generated got = RunEngine(m, spec_options, {prompt}, {params}, {}, &stats).at(0);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_TRUE(SameLogprobs(got.logprobs, want.logprobs));
    EXPECT_EQ(got.finish, want.finish);
    EXPECT_GT(stats.num_accepted_tokens, 0u);
    // The history again, after the cut request ended, in the same engine: a prefix hit with a
    // fresh engine's bits.
    std::vector<int32_t> again = prompt;
    again.insert(again.end(), got.tokens.begin(), got.tokens.end());
    const std::vector<Generated> both =
        RunEngine(m, spec_options, {prompt, again}, {params, Greedy(4)}, {0, 40});
    const Generated fresh = RunEngine(m, Options(), {again}, {Greedy(4)}).at(0);
    EXPECT_GT(both[1].cached_tokens, 0);
    EXPECT_EQ(both[1].tokens, fresh.tokens);
    EXPECT_TRUE(SameLogprobs(both[1].logprobs, fresh.logprobs));
  }
}

// After verify steps that rejected drafts, the request's history and every row the next step or
// the next draft reads are those of a run that never speculated, at every length both reached —
// for the row profiles and block sizes (the smallest: a verify spans several blocks and its
// rollback releases some; 128: everything in one block) and with the draft windows (dspark).
TEST_P(SpeculativeStateTest, StateAfterRejectionsEqualsAPlainRun) {
  const LoadedTextModel& m = M();
  const std::vector<int32_t> prompt = RandomPrompt(m, 40, 13);
  const std::vector<SamplingParams> params = {Greedy(30)};
  const std::vector<Generated> plain = RunEngine(m, Options(), {prompt}, params);
  const int32_t vocab = m.config().vocab_size;
  const int32_t smallest = SmallestBlockTokens(m.config());
  for (const auto& [block, profile] :
       Pick<std::pair<int32_t, KvProfile>>({{smallest, KvProfile::kSeed},
                                            {smallest, KvProfile::kPacked},
                                            {128, KvProfile::kCompact}},
                                           {{smallest, KvProfile::kPacked}})) {
    SCOPED_TRACE("block " + std::to_string(block) + ", profile " +
                 std::string(KvProfileName(profile)));
    // The reference keeps the same cache plan (draft windows seeded, nothing drafted).
    EngineOptions reference = Options(SpeculativeMethod::kDspark, 5, block);
    reference.profile = profile;
    reference.speculative.custom_drafter = [](std::span<const int32_t>, int32_t,
                                              std::vector<int32_t>&) {};
    std::map<int64_t, RequestState> want;
    RunEngine(m, reference, {prompt}, params, {}, nullptr, &want);
    EngineOptions plain_options = Options(SpeculativeMethod::kOff, 5, block);
    plain_options.profile = profile;
    std::map<int64_t, RequestState> want_plain;
    RunEngine(m, plain_options, {prompt}, params, {}, nullptr, &want_plain);

    EngineOptions options = reference;
    options.speculative.custom_drafter =
        KnowingDrafter({prompt}, {plain[0].tokens}, vocab,
                       [](int64_t len, int32_t k) { return k < (len * 7) % 5; });
    std::map<int64_t, RequestState> got;
    EngineStats stats;
    const std::vector<Generated> spec = RunEngine(m, options, {prompt}, params, {}, &stats, &got);
    EXPECT_EQ(spec[0].tokens, plain[0].tokens);
    EXPECT_GT(stats.num_accepted_tokens, 0u);
    EXPECT_LT(stats.num_accepted_tokens, stats.num_draft_tokens);
    int32_t compared = 0;
    for (const auto& [length, state] : got) {
      SCOPED_TRACE("length " + std::to_string(length));
      ASSERT_TRUE(want.count(length)) << "the plain run passes every length";
      const RequestState& w = want.at(length);
      EXPECT_EQ(state.token_ids, w.token_ids);
      EXPECT_EQ(state.num_computed, w.num_computed);
      ASSERT_EQ(state.rows.size(), w.rows.size());
      for (size_t r = 0; r < state.rows.size(); ++r) {
        ASSERT_EQ(state.rows[r].first, w.rows[r].first);
        EXPECT_EQ(state.rows[r].second, w.rows[r].second) << state.rows[r].first;
      }
      // Against the run without any DSpark: the same rows but the draft windows.
      const RequestState& p = want_plain.at(length);
      size_t matched = 0;
      for (const auto& [what, bytes] : state.rows) {
        if (what.starts_with("draft")) continue;
        ASSERT_LT(matched, p.rows.size());
        EXPECT_EQ(what, p.rows[matched].first);
        EXPECT_EQ(bytes, p.rows[matched].second) << what;
        ++matched;
      }
      EXPECT_EQ(matched, p.rows.size());
      ++compared;
    }
    EXPECT_GT(compared, 5);
  }
}

// Seeded sampling with every knob on: with speculation the emitted tokens and logprobs are those
// of the plain run with the same seed (the verify row samples with the plain step's draw).
TEST_P(SpeculativeSamplingTest, SeededSamplingWithSpeculationEqualsWithout) {
  const LoadedTextModel& m = M();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (uint32_t i = 0; i < 4; ++i) {
    prompts.push_back(i % 2 ? RepetitivePrompt(m, 50 + i, 15) : RandomPrompt(m, 50 + i, 9));
    params.push_back(Sampled(Len(16), 1000 + i));
  }
  const std::vector<Generated> plain = RunEngine(m, Options(), prompts, params);
  std::vector<std::vector<int32_t>> continuations;
  for (const Generated& g : plain) continuations.push_back(g.tokens);
  for (SpeculativeMethod method : Pick(kBothMethods, kBothMethods)) {
    SCOPED_TRACE(std::string(SpeculativeMethodName(method)));
    EngineOptions options = Options(method, 4);
    const std::vector<Generated> real = RunEngine(m, options, prompts, params);
    options.speculative.custom_drafter =
        KnowingDrafter(prompts, continuations, m.config().vocab_size,
                       [](int64_t len, int32_t k) { return k < len % 3; });
    EngineStats stats;
    const std::vector<Generated> forced = RunEngine(m, options, prompts, params, {}, &stats);
    EXPECT_GT(stats.num_accepted_tokens, 0u);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(real[i].tokens, plain[i].tokens) << "request " << i;
      EXPECT_TRUE(SameLogprobs(real[i].logprobs, plain[i].logprobs)) << "request " << i;
      EXPECT_EQ(forced[i].tokens, plain[i].tokens) << "request " << i;
      EXPECT_TRUE(SameLogprobs(forced[i].logprobs, plain[i].logprobs)) << "request " << i;
    }
  }
}

// Chunked prefill (a small token budget that also cuts verify steps short), prompts sharing
// prefixes (hits on the token and draft blocks), a pool small enough to preempt, requests
// arriving while others decode, greedy and sampled ones, some drafting and some not (the drafter
// knows only some prompts): each request's tokens are those it gets alone without speculation.
TEST_P(SpeculativeMixedTest, MixedBatchEqualsEachRequestAloneWithoutSpeculation) {
  // Room for the longest request of every model alone, too little for all at once.
  const uint32_t kSqueezedBlocks = 60;
  const LoadedTextModel& m = M();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  const std::vector<int32_t> shared = RandomPrompt(m, 60, 24);
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> p = RandomPrompt(m, 70 + i, 4 + 5 * i);
    if (i % 3 == 0) p.insert(p.begin(), shared.begin(), shared.end());  // prefix hits
    prompts.push_back(p);
    params.push_back(i % 4 == 3 ? Sampled(8 + i, 500 + i) : Greedy(8 + i));
  }
  // Requests 3 and 6 share request 0's first 24 tokens and come once its prefill is cached.
  const std::vector<int32_t> arrivals = {0, 0, 2, 16, 4, 6, 22, 8};
  std::vector<Generated> alone;
  std::vector<std::vector<int32_t>> drafting_prompts, continuations;
  for (int i = 0; i < 8; ++i) {
    alone.push_back(RunAlone(m, prompts[i], params[i]));
    if (i % 4 != 1) {  // requests 1 and 5 never get drafts
      drafting_prompts.push_back(prompts[i]);
      continuations.push_back(alone.back().tokens);
    }
  }
  for (SpeculativeMethod method : Pick(kBothMethods, kBothMethods)) {
    for (bool squeeze : Pick<bool>({false, true}, {true})) {
      SCOPED_TRACE(std::string(SpeculativeMethodName(method)) +
                   (squeeze ? ", small pool" : ", roomy pool"));
      EngineOptions options = Options(method, 3);
      options.max_num_batched_tokens = 9;
      if (squeeze) options.num_blocks = kSqueezedBlocks;
      options.speculative.custom_drafter =
          KnowingDrafter(drafting_prompts, continuations, m.config().vocab_size,
                         [](int64_t len, int32_t k) { return k < len % 4; });
      EngineStats stats;
      const std::vector<Generated> got = RunEngine(m, options, prompts, params, arrivals, &stats);
      for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(got[i].tokens, alone[i].tokens) << "request " << i;
        EXPECT_TRUE(SameLogprobs(got[i].logprobs, alone[i].logprobs)) << "request " << i;
        if (i % 3 == 0 && i > 0 && !squeeze) {  // a small pool may evict the prefix
          EXPECT_GT(got[i].cached_tokens, 0)
              << "request " << i << " of " << prompts[i].size() << " tokens";
        }
      }
      EXPECT_GT(stats.num_accepted_tokens, 0u);
      if (squeeze) {
        EXPECT_GT(stats.num_preemptions, 0u);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, SpeculativeGreedyTest,
                         DSV41_MODELS("tiny", "tiny-bf16", "golden-tiny-a", "golden-tiny-b",
                                      "golden-tiny-c"),
                         ModelName);
INSTANTIATE_TEST_SUITE_P(Models, SpeculativeForcedTest,
                         DSV41_MODELS("tiny", "tiny-bf16", "golden-tiny-a", "golden-tiny-b",
                                      "golden-tiny-c"),
                         ModelName);
INSTANTIATE_TEST_SUITE_P(Models, SpeculativeStateTest,
                         DSV41_MODELS("tiny", "golden-tiny-a", "golden-tiny-b"), ModelName);
INSTANTIATE_TEST_SUITE_P(Models, SpeculativeSamplingTest,
                         DSV41_MODELS("tiny", "tiny-bf16", "golden-tiny-b"), ModelName);
INSTANTIATE_TEST_SUITE_P(Models, SpeculativeMixedTest, DSV41_MODELS("tiny", "golden-tiny-a"),
                         ModelName);

// The guard (serving.md §7.3) stops a drafter that is always wrong from drafting on most steps:
// an initial pause, a one-draft probe, then pauses that double; a drafter that is always right
// drafts on every step after the initial pause and its probe.
TEST(SpeculativeGuardTest, PausesADrafterThatNeverHits) {
  const LoadedTextModel& m = Model("golden-tiny-b");
  const std::vector<int32_t> prompt = RandomPrompt(m, 80, 6);
  // 104 decode steps reach the second probe; without the full matrix 39 reach the first.
  const std::vector<SamplingParams> params = {Greedy(kFullMatrix ? 105 : 40)};
  const std::vector<Generated> plain = RunEngine(m, Options(), {prompt}, params);
  for (bool right : {false, true}) {
    EngineOptions options = Options(SpeculativeMethod::kNgram, 4);
    options.speculative.min_acceptance = 0.5;
    options.speculative.custom_drafter =
        KnowingDrafter({prompt}, {plain[0].tokens}, m.config().vocab_size,
                       [right](int64_t, int32_t) { return right; });
    EngineStats stats;
    const std::vector<Generated> got = RunEngine(m, options, {prompt}, params, {}, &stats);
    EXPECT_EQ(got[0].tokens, plain[0].tokens);
    if (right) {
      EXPECT_EQ(stats.num_guard_pauses, 0u);
      // The probe checks one draft, every later verify four.
      ASSERT_EQ(stats.drafts_at_position.size(), 4u);
      EXPECT_EQ(stats.drafts_at_position[1], stats.num_verifies - 1);
      EXPECT_GT(stats.num_verifies, kFullMatrix ? 5u : 1u);
      EXPECT_EQ(stats.num_accepted_tokens, stats.num_draft_tokens);
    } else {
      // Of 104 decode steps: 32 before the first probe, which fails at step 33; pauses of 64
      // and 128 steps put the next probes at steps 98 and 227 (past the end).
      EXPECT_EQ(stats.num_guard_pauses, kFullMatrix ? 2u : 1u);
      EXPECT_EQ(stats.num_verifies, kFullMatrix ? 2u : 1u);
      EXPECT_EQ(stats.num_draft_tokens, stats.num_verifies) << "probes of one draft";
    }
  }
}

// The position of a "draft S<stage> p<pos>" row, −1 for any other row.
int64_t DraftRowPosition(const std::string& what) {
  if (!what.starts_with("draft")) return -1;
  return std::stoll(what.substr(what.rfind('p') + 1));
}

// While the guard pauses DSpark, the window rows are seeded in batches (a block at a time here)
// instead of every step; the windows a draft reads and every full block are those of seeding each
// position in its own step, and so are the tokens, the drafts and the acceptance counts.
TEST(SpeculativeGuardTest, DeferredSeedingGivesTheWindowsOfEagerSeeding) {
  const LoadedTextModel& m = Model("golden-tiny-b");
  const std::vector<int32_t> prompt = RandomPrompt(m, 81, 6);
  const std::vector<SamplingParams> params = {Greedy(kFullMatrix ? 70 : 40)};
  EngineOptions deferred = Options(SpeculativeMethod::kDspark, 5);
  deferred.speculative.min_acceptance = 1.0;  // any rejection pauses drafting
  EngineOptions eager = deferred;
  eager.speculative.defer_paused_seeding = false;
  std::map<int64_t, RequestState> want, got;
  EngineStats want_stats, got_stats;
  const std::vector<Generated> reference =
      RunEngine(m, eager, {prompt}, params, {}, &want_stats, &want);
  const std::vector<Generated> run = RunEngine(m, deferred, {prompt}, params, {}, &got_stats, &got);
  EXPECT_TRUE(SameLogprobs(run[0].logprobs, reference[0].logprobs));
  EXPECT_EQ(got_stats.num_verifies, want_stats.num_verifies);
  EXPECT_GT(got_stats.num_verifies, 0u) << "the guard probes";
  EXPECT_EQ(got_stats.num_draft_tokens, want_stats.num_draft_tokens);
  EXPECT_EQ(got_stats.num_accepted_tokens, want_stats.num_accepted_tokens);
  // Eager: one seeding per step; deferred: about one per block of 4 positions.
  EXPECT_GE(want_stats.num_seed_calls, want_stats.num_steps);
  EXPECT_LT(got_stats.num_seed_calls * 2, want_stats.num_seed_calls);
  EXPECT_LE(got_stats.num_seeded_rows, want_stats.num_seeded_rows);

  const int64_t block = deferred.block_tokens;
  int32_t drafting = 0;
  for (const auto& [length, state] : got) {
    SCOPED_TRACE("length " + std::to_string(length));
    ASSERT_TRUE(want.count(length));
    const RequestState& w = want.at(length);
    EXPECT_EQ(state.token_ids, w.token_ids);
    EXPECT_EQ(state.draft_tokens, w.draft_tokens);
    ASSERT_EQ(state.rows.size(), w.rows.size());
    // Rows still held back: the draft rows of the incomplete block, unless a draft is due.
    const int64_t held_from =
        state.draft_tokens.empty() ? state.num_computed / block * block : state.num_computed;
    drafting += state.draft_tokens.empty() ? 0 : 1;
    for (size_t r = 0; r < state.rows.size(); ++r) {
      ASSERT_EQ(state.rows[r].first, w.rows[r].first);
      if (DraftRowPosition(state.rows[r].first) >= held_from) continue;
      EXPECT_EQ(state.rows[r].second, w.rows[r].second) << state.rows[r].first;
    }
  }
  EXPECT_GT(drafting, 0) << "a probe's windows were compared";
}

// A full block is seeded before it is offered to the prefix cache: a request that re-sends the
// history of one that decoded with drafting paused hits its blocks and reads the windows a run
// without prefix caching computes.
TEST(SpeculativeGuardTest, DeferredSeedsReachThePrefixCache) {
  const LoadedTextModel& m = Model("golden-tiny-b");
  EngineOptions options = Options(SpeculativeMethod::kDspark, 5);
  options.speculative.min_acceptance = 1.0;  // paused from the start (the initial pause)
  const auto step = [](Engine& engine, uint64_t id, std::vector<int32_t>& history) {
    Result<std::vector<RequestOutput>> outputs = engine.Step();
    ASSERT_TRUE(outputs.ok()) << outputs.status().ToString();
    for (const RequestOutput& o : *outputs) {
      if (o.request_id == id)
        history.insert(history.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  };
  // Runs `prompt` to its first output on a fresh engine (after `warm` ran to its end there) and
  // returns its state and prefix hit.
  const auto prefill = [&](const EngineOptions& o, const std::vector<int32_t>& warm,
                           const std::vector<int32_t>& prompt, std::vector<int32_t>* warm_history,
                           int64_t* hit) {
    Result<std::unique_ptr<Engine>> engine = Engine::Create(m, o, Pool());
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!warm.empty()) {
      Result<uint64_t> a = (*engine)->AddRequest(warm, Greedy(21));
      EXPECT_TRUE(a.ok());
      *warm_history = warm;
      while ((*engine)->HasUnfinished()) step(**engine, *a, *warm_history);
    }
    RequestState state;
    if (prompt.empty()) return state;
    const uint64_t hits = (*engine)->stats().prefix_hit_tokens;
    Result<uint64_t> b = (*engine)->AddRequest(prompt, Greedy(4));
    EXPECT_TRUE(b.ok());
    std::vector<int32_t> unused;
    step(**engine, *b, unused);
    *hit = static_cast<int64_t>((*engine)->stats().prefix_hit_tokens - hits);
    Result<RequestState> s = (*engine)->InspectRequest(*b);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) state = *s;
    return state;
  };
  std::vector<int32_t> history;
  int64_t hit = 0;
  prefill(options, RandomPrompt(m, 82, 7), {}, &history, &hit);
  ASSERT_EQ(history.size(), 28u);
  std::vector<int32_t> again;
  const RequestState got = prefill(options, RandomPrompt(m, 82, 7), history, &again, &hit);
  EXPECT_EQ(again, history);
  EXPECT_EQ(hit, 24) << "the blocks decoded while paused hit";
  EngineOptions uncached = options;
  uncached.enable_prefix_caching = false;
  std::vector<int32_t> unused;
  int64_t no_hit = 0;
  const RequestState want = prefill(uncached, {}, history, &unused, &no_hit);
  EXPECT_EQ(no_hit, 0);
  ASSERT_EQ(got.rows.size(), want.rows.size());
  int32_t compared = 0;
  for (size_t r = 0; r < got.rows.size(); ++r) {
    ASSERT_EQ(got.rows[r].first, want.rows[r].first);
    const int64_t pos = DraftRowPosition(got.rows[r].first);
    if (pos < 0 || pos >= hit) continue;
    EXPECT_EQ(got.rows[r].second, want.rows[r].second) << got.rows[r].first;
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

TEST(SpeculativeGuardTest, EngineRefusesBadSpeculativeOptions) {
  const LoadedTextModel& m = Model("golden-tiny-b");
  EngineOptions options = Options(SpeculativeMethod::kDspark, 6);  // block size 5
  Result<std::unique_ptr<Engine>> e = Engine::Create(m, options, Pool());
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--num-speculative-tokens 6"), std::string::npos);
  options = Options(SpeculativeMethod::kOff);
  options.speculative.custom_drafter = [](std::span<const int32_t>, int32_t,
                                          std::vector<int32_t>&) {};
  EXPECT_FALSE(Engine::Create(m, options, Pool()).ok());
}

}  // namespace
}  // namespace dsv41

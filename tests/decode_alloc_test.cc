// A steady-state decode forward allocates nothing (issue 9): every global operator new is counted
// while TextModel::Forward runs decode steps after a warm-up (the step arena has grown to its
// high-water mark), on the tiny preset — every layer mode, the indexer and Engram included. The
// same holds for a DSpark decode step (issue 10): the forward recording main_hidden, the seeding
// of the draft windows and the draft of the next block; and for a whole engine step of a batch of
// decoding requests (scheduling, the batch, the forward, sampling with penalties, stop strings,
// the detokenizer, the outputs), with DSpark off and on; and for the server's path of those
// steps: the engine loop thread stepping, dispatching outputs to the request streams and
// recording metrics, and the readers taking them.

#include <execinfo.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "base/exec_context.h"
#include "base/thread_pool.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engram/row_ids.h"
#include "engram/token_map.h"
#include "kv/cache_plan.h"
#include "kv/kv_layout.h"
#include "model/batch.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/request_stream.h"
#include "tiny/tiny_checkpoint.h"
#include "tiny/tiny_presets.h"

// The replacements pair malloc with free throughout; GCC cannot see that across the operators.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
// The call stacks of the first counted allocations, printed when a test fails.
constexpr int kMaxStacks = 8;
constexpr int kStackDepth = 24;
void* g_stacks[kMaxStacks][kStackDepth];
int g_stack_depth[kMaxStacks];

void Count() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  const int64_t n = g_allocations.fetch_add(1);
  if (n < kMaxStacks) {
    g_counting = false;  // backtrace may allocate on its first call
    g_stack_depth[n] = backtrace(g_stacks[n], kStackDepth);
    g_counting = true;
  }
}

void PrintStacks() {
  for (int i = 0; i < std::min<int64_t>(kMaxStacks, g_allocations.load()); ++i) {
    std::fprintf(stderr, "allocation %d:\n", i);
    backtrace_symbols_fd(g_stacks[i], g_stack_depth[i], 2);
  }
}
}  // namespace

void* operator new(std::size_t size) {
  Count();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, std::align_val_t align) {
  Count();
  const std::size_t a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t align) { return operator new(size, align); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace dsv41 {
namespace {

TEST(DecodeAllocationTest, SteadyStateDecodeForwardsAllocateNothing) {
  const std::string dir = testing::TempDir() + "/decode_alloc_tiny";
  std::filesystem::remove_all(dir);
  Result<TinySpec> spec = TinyPreset("tiny");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(WriteTinyCheckpoint(*spec, dir).ok());
  Result<LoadedTextModel> m = LoadedTextModel::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const TextModel& model = *m->model;
  Result<ContiguousKvCache> cache =
      ContiguousKvCache::Create(model.config(), model.plan(), 128, KvProfile::kSeed, 0, 1);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  OwnedExecContext exec(2);
  SyncEngramStepRows engram = model.MappedEngramRows();

  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(5 + (i * 37) % 400);
  std::vector<int32_t> classes;
  Batch batch;
  std::vector<float> logits;
  int64_t allocations = 0;
  // Position `start` onwards: the prompt in one forward, then one token per forward.
  const auto run = [&](int32_t start, int32_t n, bool count) {
    classes.resize(ids.size());
    ASSERT_TRUE(MapTokensToEngramClasses(m->token_map, ids, classes).ok());
    ClearBatch(batch);
    AppendToBatch(m->engram,
                  BatchSlice{.token_ids = ids,
                             .class_ids = classes,
                             .dead = {},
                             .start = start,
                             .num_tokens = n,
                             .block_tables = cache->block_tables(),
                             .logits_from = start + n - 1},
                  batch);
    logits.resize(static_cast<size_t>(model.vocab_size()));
    g_allocations = 0;
    g_counting = count;
    engram.StartStep(batch.engram_rows, batch.num_tokens());
    const Status s =
        model.Forward(batch, cache->view(), engram, ForwardOutputs{.logits = logits}, exec.ctx);
    g_counting = false;
    ASSERT_TRUE(s.ok()) << s.ToString();
    exec.arena.Reset();
    allocations += count ? g_allocations.load() : 0;
    int32_t best = 0;
    for (int32_t v = 1; v < model.vocab_size(); ++v) best = logits[v] > logits[best] ? v : best;
    ids.push_back(best);
  };
  run(0, static_cast<int32_t>(ids.size()), false);
  for (int step = 0; step < 8; ++step) run(static_cast<int32_t>(ids.size()) - 1, 1, false);
  for (int step = 0; step < 16; ++step) run(static_cast<int32_t>(ids.size()) - 1, 1, true);
  EXPECT_EQ(allocations, 0) << "heap allocations in 16 decode forwards";
}

TEST(DecodeAllocationTest, SteadyStateDsparkDecodeStepsAllocateNothing) {
  const std::string dir = testing::TempDir() + "/decode_alloc_tiny_dspark";
  std::filesystem::remove_all(dir);
  Result<TinySpec> spec = TinyPreset("tiny");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(WriteTinyCheckpoint(*spec, dir).ok());
  Result<LoadedTextModel> m = LoadedTextModel::Load(dir, {}, /*with_dspark=*/true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const TextModel& model = *m->model;
  const DsparkModel& dspark = *m->dspark;
  CachePlanOptions plan_options;
  plan_options.block_tokens = 128;
  plan_options.dspark = true;
  plan_options.num_speculative_tokens = dspark.block_size();
  Result<CachePlan> plan = PlanCache(model.config(), model.plan(), plan_options);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const std::vector<std::vector<uint32_t>> tables = ContiguousBlockTables(*plan, 1);
  KvCacheStorage storage(*plan, model.config(), static_cast<uint32_t>(plan->groups.size()));
  OwnedExecContext exec(2);
  SyncEngramStepRows engram = model.MappedEngramRows();

  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(5 + (i * 37) % 400);
  std::vector<int32_t> classes;
  Batch batch;
  std::vector<float> logits(static_cast<size_t>(model.vocab_size()));
  std::vector<float> main_hidden;
  DraftResult draft;
  int64_t allocations = 0;
  // Positions `start` onwards in one forward with their main_hidden, the windows seeded, a draft.
  const auto run = [&](int32_t start, int32_t n, bool count) {
    classes.resize(ids.size());
    ASSERT_TRUE(MapTokensToEngramClasses(m->token_map, ids, classes).ok());
    ClearBatch(batch);
    AppendToBatch(m->engram,
                  BatchSlice{.token_ids = ids,
                             .class_ids = classes,
                             .dead = {},
                             .start = start,
                             .num_tokens = n,
                             .block_tables = tables,
                             .logits_from = start + n - 1,
                             .main_hidden = true},
                  batch);
    main_hidden.resize(static_cast<size_t>(n) * model.MainHiddenWidth());
    g_allocations = 0;
    g_counting = count;
    engram.StartStep(batch.engram_rows, batch.num_tokens());
    Status s =
        model.Forward(batch, storage.view(), engram,
                      ForwardOutputs{.logits = logits, .main_hidden = main_hidden}, exec.ctx);
    if (s.ok()) s = dspark.SeedWindows(main_hidden, batch.requests, storage.view(), exec.ctx);
    int32_t best = 0;
    for (int32_t v = 1; v < model.vocab_size(); ++v) best = logits[v] > logits[best] ? v : best;
    const DraftRequest request{
        .token = best, .last_pos = start + n - 1, .block_tables = batch.requests[0].block_tables};
    if (s.ok()) {
      s = dspark.Draft(std::span(&request, 1), storage.view(), /*want_logits=*/false, draft,
                       exec.ctx);
    }
    g_counting = false;
    ASSERT_TRUE(s.ok()) << s.ToString();
    exec.arena.Reset();
    allocations += count ? g_allocations.load() : 0;
    ids.push_back(best);
  };
  run(0, static_cast<int32_t>(ids.size()), false);
  for (int step = 0; step < 8; ++step) run(static_cast<int32_t>(ids.size()) - 1, 1, false);
  for (int step = 0; step < 16; ++step) run(static_cast<int32_t>(ids.size()) - 1, 1, true);
  EXPECT_EQ(allocations, 0) << "heap allocations in 16 DSpark decode steps";
}

// Engine steps of four decoding requests (greedy; sampled with every penalty and top-k/p/min-p;
// with stop strings and stop ids that never match), after warm-up steps: Step(outputs) with the
// same vector allocates nothing — with DSpark off and on (on: the guard pauses it after a probe,
// so both deferred seeding and drafting steps are counted).
TEST(DecodeAllocationTest, SteadyStateEngineStepsAllocateNothing) {
  const std::string dir = testing::TempDir() + "/decode_alloc_tiny_engine";
  std::filesystem::remove_all(dir);
  Result<TinySpec> spec = TinyPreset("tiny");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(WriteTinyCheckpoint(*spec, dir).ok());
  Result<LoadedTextModel> m = LoadedTextModel::Load(dir, {}, /*with_dspark=*/true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ThreadPool pool(2);
  for (const SpeculativeMethod method : {SpeculativeMethod::kOff, SpeculativeMethod::kDspark}) {
    SCOPED_TRACE(method == SpeculativeMethod::kOff ? "speculative off" : "speculative dspark");
    EngineOptions options;
    options.block_tokens = 16;
    options.num_blocks = 256;
    options.speculative.method = method;
    options.speculative.num_speculative_tokens = 3;
    options.speculative.guard_initial_pause_steps = 32;  // probes at decode steps 33 and 98
    options.speculative.guard_min_pause_steps = 64;
    Result<std::unique_ptr<Engine>> engine = Engine::Create(*m, options, pool);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    for (int32_t i = 0; i < 4; ++i) {
      std::vector<int32_t> prompt;
      for (int32_t t = 0; t < 20 + 3 * i; ++t) prompt.push_back(5 + (t * 37 + i * 11) % 400);
      SamplingParams params;
      params.max_tokens = 200;
      params.ignore_eos = true;
      if (i % 2 == 1) {
        params.temperature = 0.8f;
        params.top_p = 0.9f;
        params.top_k = 20;
        params.min_p = 0.02f;
        params.presence_penalty = 0.3f;
        params.frequency_penalty = 0.2f;
        params.repetition_penalty = 1.1f;
        params.seed = 7 + i;
      } else {
        params.temperature = 0.0f;
      }
      if (i == 2) {
        params.stop = {"\x01never\x02", "\x03"};
        params.stop_token_ids = {1};
      }
      ASSERT_TRUE((*engine)->AddRequest(prompt, params).ok());
    }
    std::vector<RequestOutput> outputs;
    // Prefill, then past the guard's initial pause and its first probe.
    for (int step = 0; step < 40; ++step) ASSERT_TRUE((*engine)->Step(outputs).ok());
    const EngineStats before = (*engine)->stats();
    g_allocations = 0;
    g_counting = true;
    Status stepped;
    // Steps 40 .. 103: deferred seeding, and the second probe at decode step 98.
    for (int step = 0; step < 64 && stepped.ok(); ++step) stepped = (*engine)->Step(outputs);
    g_counting = false;
    ASSERT_TRUE(stepped.ok()) << stepped.ToString();
    if (method == SpeculativeMethod::kDspark) {
      const EngineStats after = (*engine)->stats();
      EXPECT_GT(after.num_verifies, before.num_verifies) << "probes were counted";
      EXPECT_GT(after.num_seed_calls, before.num_seed_calls) << "seedings were counted";
    }
    EXPECT_EQ(outputs.size(), 4u) << "every request decodes in every step";
    EXPECT_EQ(g_allocations.load(), 0) << "heap allocations in 64 engine steps";
    if (g_allocations.load() != 0) PrintStacks();
  }
}

// The engine backend, counting its steps (read by the test thread while the loop runs).
class CountingBackend final : public GenerationBackend {
 public:
  explicit CountingBackend(Engine& engine) : inner_(engine) {}
  Result<uint64_t> AddRequest(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                              const AddRequestOptions& options) override {
    return inner_.AddRequest(std::move(prompt_ids), params, options);
  }
  Status Abort(uint64_t request_id) override { return inner_.Abort(request_id); }
  Status Step(std::vector<RequestOutput>& outputs) override {
    const Status s = inner_.Step(outputs);
    steps_.fetch_add(1);
    return s;
  }
  bool HasUnfinished() const override { return inner_.HasUnfinished(); }
  void ReadStats(EngineStats& out) const override { inner_.ReadStats(out); }
  int64_t steps() const { return steps_.load(); }

 private:
  EngineBackend inner_;
  std::atomic<int64_t> steps_{0};
};

// The server's engine loop with four decoding requests: once the streams' two buffers have grown
// (the readers lag on purpose twice during warm-up), 48 loop iterations — step, outputs to their
// streams, latency metrics, engine stats published — and the readers' Waits allocate nothing.
TEST(DecodeAllocationTest, SteadyStateServerLoopAllocatesNothing) {
  const std::string dir = testing::TempDir() + "/decode_alloc_tiny_server";
  std::filesystem::remove_all(dir);
  Result<TinySpec> spec = TinyPreset("tiny");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(WriteTinyCheckpoint(*spec, dir).ok());
  Result<LoadedTextModel> m = LoadedTextModel::Load(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ThreadPool pool(2);
  EngineOptions options;
  options.block_tokens = 16;
  options.num_blocks = 512;
  Result<std::unique_ptr<Engine>> engine = Engine::Create(*m, options, pool);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  CountingBackend backend(**engine);
  ServerMetrics metrics;
  EngineLoop loop(backend, metrics, EngineLoopOptions{});
  loop.Start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < 4; ++i) {
    Submission submission;
    for (int32_t t = 0; t < 20 + 3 * i; ++t) {
      submission.prompt_ids.push_back(5 + (t * 37 + i * 11) % 400);
    }
    submission.params.max_tokens = 100000;
    submission.params.ignore_eos = true;
    submission.params.temperature = i % 2 == 0 ? 0.0f : 0.8f;
    submission.params.seed = 3 + i;
    SubmitRefusal refusal;
    streams.push_back(loop.Submit(std::move(submission), &refusal));
    ASSERT_NE(streams.back(), nullptr);
    ASSERT_TRUE(streams.back()->WaitAdmitted().ok());
  }
  std::vector<RequestOutput> taken(streams.size());
  int64_t tokens_taken = 0;
  bool finished_early = false;
  // Takes what every stream has (no waiting).
  const auto take_all = [&] {
    for (size_t i = 0; i < streams.size(); ++i) {
      if (!streams[i]->Wait(taken[i], std::chrono::milliseconds(0))) continue;
      tokens_taken += static_cast<int64_t>(taken[i].new_token_ids.size());
      finished_early |= taken[i].finish != FinishReason::kNone;
    }
  };
  const auto wait_steps = [&](int64_t n, bool read) {
    const int64_t until = backend.steps() + n;
    while (backend.steps() < until && !finished_early) {
      if (read) take_all();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };
  // Warm-up: steps read promptly, then two lags of 64 steps (each buffer of a stream grows to
  // hold 64 steps' output), then prompt reads again.
  wait_steps(16, true);
  for (int lag = 0; lag < 2; ++lag) {
    wait_steps(64, false);
    take_all();
  }
  wait_steps(16, true);
  const int64_t tokens_before = tokens_taken;
  g_allocations = 0;
  g_counting = true;
  wait_steps(48, true);
  g_counting = false;
  take_all();
  const int64_t allocations = g_allocations.load();
  loop.Shutdown(std::chrono::milliseconds(0));
  ASSERT_FALSE(finished_early) << "a request ended during the test";
  EXPECT_GE(tokens_taken - tokens_before, 4 * 48) << "every request decoded in every step";
  EXPECT_EQ(allocations, 0) << "heap allocations in 48 engine-loop iterations";
  if (allocations != 0) PrintStacks();
}

}  // namespace
}  // namespace dsv41

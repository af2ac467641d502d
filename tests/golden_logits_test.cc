// The whole text forward against the model goldens (goldens/model/README.md "How to compare"):
// every prompt position's logits after a one-shot prefill within 1e-3 at stable positions
// (stability_gemm32 <= 1e-4), and the greedy continuation, decoded token by token, equal over
// the noise-stable prefix (diagnostics.json greedy_stable_prefix_gemm32) — for the reference
// numerics (exact accumulation, as the goldens) and every fast kernel this CPU runs (exact
// products, fp32 accumulation: the fp32-FMA kernel and the bf16 dot product). Engram row ids
// come from engram/ (the golden token map and the config's hash constants), as a driver computes
// them.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/json.h"
#include "base/npy.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint_rewrite.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engram/hash_constants.h"
#include "engram/row_ids.h"
#include "engram/token_map.h"
#include "golden_cases.h"
#include "kernels/linear.h"
#include "kv/kv_layout.h"
#include "model/forward.h"
#include "model/weights.h"

namespace dsv41 {
namespace {

// One request fed through the model, with its Engram history (class ids by absolute position).
class Session {
 public:
  Session(const TextModel& model, const EngramTokenMap& map, const EngramHashConstants& constants)
      : model_(model), map_(map), constants_(constants), cache_(NewCache(model)) {}

  static ContiguousKvCache NewCache(const TextModel& model) {
    Result<ContiguousKvCache> cache = ContiguousKvCache::Create(model.config(), model.plan(), 512);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    if (!cache.ok()) std::abort();
    return std::move(cache).value();
  }

  // Feeds `ids` as one chunk; returns the logits of every fed position [n, vocab].
  std::vector<float> Feed(const std::vector<int32_t>& ids, ExecContext& ctx) {
    const int32_t n = static_cast<int32_t>(ids.size());
    const int32_t start = num_positions_;
    num_positions_ += n;
    token_ids_.insert(token_ids_.end(), ids.begin(), ids.end());
    if (constants_.num_layers() > 0) {
      std::vector<int32_t> classes(ids.size());
      EXPECT_TRUE(MapTokensToEngramClasses(map_, ids, classes).ok());
      class_ids_.insert(class_ids_.end(), classes.begin(), classes.end());
    }
    Batch batch;
    AppendToBatch(constants_,
                  BatchSlice{.token_ids = token_ids_,
                             .class_ids = class_ids_,
                             .dead = {},
                             .start = start,
                             .num_tokens = n,
                             .block_tables = cache_.block_tables(),
                             .logits_from = start},
                  batch);
    rows_.insert(rows_.end(), batch.engram_rows.begin(), batch.engram_rows.end());
    std::vector<float> logits(static_cast<size_t>(n) * model_.vocab_size());
    SyncEngramStepRows engram = model_.MappedEngramRows();
    engram.StartStep(batch.engram_rows, batch.num_tokens());
    const Status s =
        model_.Forward(batch, cache_.view(), engram, ForwardOutputs{.logits = logits}, ctx);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  }

  // Every Engram row id fed so far [positions, layers, cols].
  const std::vector<int64_t>& rows() const { return rows_; }

 private:
  const TextModel& model_;
  const EngramTokenMap& map_;
  const EngramHashConstants& constants_;
  ContiguousKvCache cache_;
  int32_t num_positions_ = 0;
  std::vector<int32_t> token_ids_;  // every position fed so far
  std::vector<int32_t> class_ids_;
  std::vector<int64_t> rows_;
};

int32_t Argmax(const float* row, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;  // the lowest id wins ties
  }
  return best;
}

class GoldenLogitsTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenLogitsTest, PrefillLogitsAndGreedyContinuationMatch) {
  const std::string model_dir = kGoldens + "/checkpoints/" + GetParam().model;
  const std::string config_dir = kGoldens + "/cases/" + GetParam().model;
  const std::string case_dir = config_dir + "/" + GetParam().prompt;

  Result<ModelWeights> weights =
      ModelWeights::Load(model_dir, LoadOptions{.include_dspark = false});
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  Result<std::unique_ptr<TextModel>> model = TextModel::Load(*weights);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const int32_t vocab = (*model)->vocab_size();

  EngramTokenMap map;
  for (int64_t c : ReadInts(config_dir + "/engram_token_map.npy")) {
    map.class_of_token.push_back(static_cast<int32_t>(c));
    map.num_classes = std::max(map.num_classes, static_cast<int32_t>(c) + 1);
  }
  Result<EngramHashConstants> constants = ComputeEngramHashConstants(weights->config(), map);
  ASSERT_TRUE(constants.ok()) << constants.status().ToString();

  std::vector<int32_t> prompt;
  for (int64_t id : ReadInts(case_dir + "/input_ids.npy"))
    prompt.push_back(static_cast<int32_t>(id));
  const std::vector<float> want = ReadFloats(case_dir + "/logits.npy");
  const std::vector<float> stability = ReadFloats(case_dir + "/stability_gemm32.npy");
  const int32_t num_prompt = static_cast<int32_t>(prompt.size());
  ASSERT_EQ(want.size(), static_cast<size_t>(num_prompt) * vocab);
  ASSERT_EQ(stability.size(), prompt.size());

  Result<Json> diagnostics = ReadJsonFile(case_dir + "/diagnostics.json");
  ASSERT_TRUE(diagnostics.ok()) << diagnostics.status().ToString();
  const int32_t stable_prefix = (*diagnostics)["greedy_stable_prefix_gemm32"].get<int32_t>();
  const std::vector<int64_t> want_greedy = ReadInts(case_dir + "/greedy_ids.npy");
  ASSERT_GE(want_greedy.size(), static_cast<size_t>(stable_prefix));
  const std::vector<int64_t> want_rows = ReadInts(case_dir + "/engram_hash.npy");

  // One numerics mode: prefill logits, then the greedy continuation (argmax, lowest id on ties; EOS
  // does not stop), token by token.
  auto check_path = [&](const TextModel& m, Numerics numerics, const char* path) {
    SCOPED_TRACE(path);
    OwnedExecContext exec(2, numerics);
    Session session(m, map, *constants);
    ForwardTrace trace;
    const std::vector<float> got = [&] {
      ScopedForwardObserver watch(exec.ctx, trace);
      return session.Feed(prompt, exec.ctx);
    }();
    // The first layer whose intermediate differs at a stable position names the module to look
    // at (README); printed only.
    for (const char* name : {"attn_in", "attn_out", "ffn_in", "ffn_out"}) {
      const std::vector<float>& mine = name == std::string("attn_in")    ? trace.attn_in
                                       : name == std::string("attn_out") ? trace.attn_out
                                       : name == std::string("ffn_in")   ? trace.ffn_in
                                                                         : trace.ffn_out;
      const std::vector<float> golden = ReadFloats(case_dir + "/" + name + ".npy");
      ASSERT_EQ(mine.size(), golden.size()) << name;
      const size_t per_layer = golden.size() / m.plan().layers.size();
      for (size_t l = 0; l * per_layer < golden.size(); ++l) {
        double err = 0;
        for (size_t i = l * per_layer; i < (l + 1) * per_layer; ++i) {
          const size_t pos = (i - l * per_layer) / (per_layer / prompt.size());
          if (stability[pos] > 1e-4f) continue;
          err = std::max(err, static_cast<double>(std::fabs(mine[i] - golden[i])));
        }
        if (err > 1e-3) {
          std::printf("  %s: %s layer %zu differs by %.3g\n", path, name, l, err);
          break;
        }
      }
    }
    ASSERT_EQ(got.size(), want.size());
    ASSERT_GE(want_rows.size(), session.rows().size());
    EXPECT_TRUE(std::equal(session.rows().begin(), session.rows().end(), want_rows.begin()))
        << "Engram row ids of the prompt";
    double max_err = 0;
    int32_t num_stable = 0;
    for (int32_t p = 0; p < num_prompt; ++p) {
      if (stability[p] > 1e-4f) continue;
      ++num_stable;
      for (int32_t v = 0; v < vocab; ++v) {
        const size_t i = static_cast<size_t>(p) * vocab + v;
        max_err = std::max(max_err, static_cast<double>(std::fabs(got[i] - want[i])));
      }
    }
    std::printf("[ %s/%s ] %s: max |logit - golden| = %.3g over %d of %d stable positions\n",
                GetParam().model, GetParam().prompt, path, max_err, num_stable, num_prompt);
    EXPECT_LE(max_err, 1e-3);

    std::vector<int32_t> greedy;
    std::vector<float> last(got.end() - vocab, got.end());
    for (int32_t k = 0; k < stable_prefix; ++k) {
      greedy.push_back(Argmax(last.data(), vocab));
      if (k + 1 < stable_prefix) last = session.Feed({greedy.back()}, exec.ctx);
    }
    std::vector<int64_t> want_prefix(want_greedy.begin(), want_greedy.begin() + stable_prefix);
    EXPECT_EQ(std::vector<int64_t>(greedy.begin(), greedy.end()), want_prefix)
        << "over the stable prefix of " << stable_prefix << " tokens";
  };
  check_path(**model, Numerics::kReference, "reference numerics");
  // The fast kernels: the same exact products summed in fp32 in a fixed blocked order — held to
  // the same bounds.
  check_path(**model, Numerics::kFastFma, "fp32-fma kernel");
  if (CpuHasBf16Dot()) check_path(**model, Numerics::kFastBf16Dot, "bf16-dot kernel");
}

// Paged = contiguous on every golden case: the engine (its own loading, tokenizer-built Engram
// map, block pool, scheduler) gives the same prompt logits, bit for bit, as one request over a
// contiguous cache on the fast path, for the smallest legal block and 128-token blocks and every
// row profile; a 7-token prefill chunk and a second request interleaving its blocks included.
TEST_P(GoldenLogitsTest, EnginePagedLogitsEqualContiguous) {
  const std::string model_dir = kGoldens + "/checkpoints/" + GetParam().model;
  const std::string case_dir = kGoldens + "/cases/" + GetParam().model + "/" + GetParam().prompt;
  Result<LoadedTextModel> m = LoadedTextModel::Load(model_dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<int32_t> prompt;
  for (int64_t id : ReadInts(case_dir + "/input_ids.npy")) {
    prompt.push_back(static_cast<int32_t>(id));
  }
  OwnedExecContext exec(2);
  ThreadPool& pool = exec.pool;
  Session session(*m->model, m->token_map, m->engram);
  const std::vector<float> want = session.Feed(prompt, exec.ctx);
  std::vector<int32_t> other = prompt;
  std::reverse(other.begin(), other.end());

  for (int32_t block : {SmallestBlockTokens(m->config()), 128}) {
    for (KvProfile profile : {KvProfile::kSeed, KvProfile::kCompact, KvProfile::kPacked}) {
      SCOPED_TRACE("block " + std::to_string(block) + ", profile " +
                   std::string(KvProfileName(profile)));
      EngineOptions options;
      options.block_tokens = block;
      options.profile = profile;
      options.num_blocks = 2048;
      options.max_num_batched_tokens = 7;
      Result<std::unique_ptr<Engine>> engine = Engine::Create(*m, options, pool);
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      SamplingParams params;
      params.temperature = 0.0f;
      params.max_tokens = 1;
      Result<uint64_t> id =
          (*engine)->AddRequest(prompt, params, AddRequestOptions{.prompt_logits = true});
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ASSERT_TRUE((*engine)->AddRequest(other, params).ok());
      std::vector<float> got;
      while ((*engine)->HasUnfinished()) {
        Result<std::vector<RequestOutput>> outputs = (*engine)->Step();
        ASSERT_TRUE(outputs.ok()) << outputs.status().ToString();
        for (const RequestOutput& out : *outputs) {
          if (out.request_id != *id) continue;
          got.insert(got.end(), out.prompt_logits.begin(), out.prompt_logits.end());
        }
      }
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    }
  }
}

// The goldens through the engine with the Engram tables on the disk tier (a hot-row cache of a
// few rows, so most rows come from the file), prefetch on and off: the prompt logits are the
// contiguous session's bits and within the golden bound at every stable position.
TEST_P(GoldenLogitsTest, EngineOnTheDiskTierMatchesTheGoldens) {
  const std::string model_dir = kGoldens + "/checkpoints/" + GetParam().model;
  const std::string case_dir = kGoldens + "/cases/" + GetParam().model + "/" + GetParam().prompt;
  Result<LoadedTextModel> m = LoadedTextModel::Load(model_dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<int32_t> prompt;
  for (int64_t id : ReadInts(case_dir + "/input_ids.npy")) {
    prompt.push_back(static_cast<int32_t>(id));
  }
  const std::vector<float> golden = ReadFloats(case_dir + "/logits.npy");
  const std::vector<float> stability = ReadFloats(case_dir + "/stability_gemm32.npy");
  OwnedExecContext exec(2);
  ThreadPool& pool = exec.pool;
  Session session(*m->model, m->token_map, m->engram);
  const std::vector<float> want = session.Feed(prompt, exec.ctx);
  const Status opened = m->OpenEngramStorage(
      EngramStoreOptions{.tier = EngramTier::kDisk, .cache_bytes = 4096, .io_threads = 4}, pool);
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch ? "prefetch on" : "prefetch off");
    EngineOptions options;
    options.num_blocks = 2048;
    options.max_num_batched_tokens = 7;
    options.engram_prefetch = prefetch;
    Result<std::unique_ptr<Engine>> engine = Engine::Create(*m, options, pool);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = 1;
    ASSERT_TRUE(
        (*engine)->AddRequest(prompt, params, AddRequestOptions{.prompt_logits = true}).ok());
    std::vector<float> got;
    while ((*engine)->HasUnfinished()) {
      Result<std::vector<RequestOutput>> outputs = (*engine)->Step();
      ASSERT_TRUE(outputs.ok()) << outputs.status().ToString();
      for (const RequestOutput& out : *outputs) {
        ASSERT_NE(out.finish, FinishReason::kError) << out.error;
        got.insert(got.end(), out.prompt_logits.begin(), out.prompt_logits.end());
      }
    }
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    ASSERT_EQ(got.size(), golden.size());
    const size_t vocab = got.size() / prompt.size();
    double max_err = 0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      if (stability[p] > 1e-4f) continue;
      for (size_t v = 0; v < vocab; ++v) {
        max_err = std::max(
            max_err, static_cast<double>(std::fabs(got[p * vocab + v] - golden[p * vocab + v])));
      }
    }
    EXPECT_LE(max_err, 1e-3);
    EXPECT_GT((*engine)->stats().engram_store.rows_read, 0u) << "rows came from the file";
  }
}

// The golden checkpoint stored again in the release's stricter layout (trap list L2, L5): every
// `.scale` tensor as U8 instead of F8_E8M0 (the same exponent bytes), 48 shards, the routed
// experts after every other tensor so that no layer's experts share a shard with its attention.
// The prompt logits are the original layout's bits and within the golden bound at every stable
// position, in both numerics.
TEST_P(GoldenLogitsTest, RestoredWithU8ScalesIn48ShardsMatchesTheGoldens) {
  const std::string model_dir = kGoldens + "/checkpoints/" + GetParam().model;
  const std::string case_dir = kGoldens + "/cases/" + GetParam().model + "/" + GetParam().prompt;
  const std::string restored = ::testing::TempDir() + "/golden_restored_" + GetParam().model +
                               "_" + GetParam().prompt + "_" + std::to_string(getpid());
  std::filesystem::remove_all(restored);
  RewriteOptions layout;
  layout.num_shards = 48;
  layout.scale_dtype = DType::kU8;
  layout.place_last = [](std::string_view name) {
    return name.find(".ffn.experts.") != std::string_view::npos;
  };
  const Status rewritten = RewriteCheckpoint(model_dir, restored, layout);
  ASSERT_TRUE(rewritten.ok()) << rewritten.ToString();
  Result<LoadedTextModel> original = LoadedTextModel::Load(model_dir);
  Result<LoadedTextModel> m = LoadedTextModel::Load(restored);
  ASSERT_TRUE(original.ok()) << original.status().ToString();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->weights->checkpoint().shards().size(), 48u);
  std::vector<int32_t> prompt;
  for (int64_t id : ReadInts(case_dir + "/input_ids.npy")) {
    prompt.push_back(static_cast<int32_t>(id));
  }
  const std::vector<float> golden = ReadFloats(case_dir + "/logits.npy");
  const std::vector<float> stability = ReadFloats(case_dir + "/stability_gemm32.npy");
  for (Numerics numerics : {Numerics::kReference, Numerics::kFast}) {
    SCOPED_TRACE(numerics == Numerics::kFast ? "fast" : "reference");
    OwnedExecContext exec(2, numerics);
    Session want_session(*original->model, original->token_map, original->engram);
    const std::vector<float> want = want_session.Feed(prompt, exec.ctx);
    Session session(*m->model, m->token_map, m->engram);
    const std::vector<float> got = session.Feed(prompt, exec.ctx);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    ASSERT_EQ(got.size(), golden.size());
    const size_t vocab = got.size() / prompt.size();
    double max_err = 0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      if (stability[p] > 1e-4f) continue;
      for (size_t v = 0; v < vocab; ++v) {
        max_err = std::max(
            max_err, static_cast<double>(std::fabs(got[p * vocab + v] - golden[p * vocab + v])));
      }
    }
    EXPECT_LE(max_err, 1e-3);
  }
  std::filesystem::remove_all(restored);
}

INSTANTIATE_TEST_SUITE_P(AllCases, GoldenLogitsTest, ::testing::ValuesIn(AllGoldenCases()),
                         GoldenCaseName);

}  // namespace
}  // namespace dsv41

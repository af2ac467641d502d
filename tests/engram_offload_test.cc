// Engram host offload (serving.md §8) on a synthetic checkpoint: every tier returns the bytes the
// resident tier returns (random rows, the rows of a real prompt, the table ends, repeats, rows
// sharing a 4 KiB page, several read batches, O_DIRECT where the file system allows it); whole
// engine runs give bit-identical logits on every tier, with prefetch on and off, with a store
// that delays its reads and with a hot-row cache too small for a step, one-shot, chunked and
// batched; a truncated table file is refused at load naming file and tensor, and a read error at
// run time fails the requests of that step while the engine keeps serving. The weights copied
// into huge pages (LoadedTextModel::ResideWeights) leave the Engram tables mapped and the bits as
// they were on every tier.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "config/weight_summary.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "engram/engram_store.h"
#include "engram/row_ids.h"
#include "tiny/tiny_checkpoint.h"
#include "tiny/tiny_presets.h"

namespace dsv41 {
namespace {

// Delays every fetch (a slow disk): results must not change, only their timing.
class SlowRowSource final : public EngramRowSource {
 public:
  SlowRowSource(const EngramRowSource& base, std::chrono::microseconds delay)
      : base_(base), delay_(delay) {}
  int64_t num_rows() const override { return base_.num_rows(); }
  int32_t row_dim() const override { return base_.row_dim(); }
  Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                  std::span<std::byte> scales) const override {
    std::this_thread::sleep_for(delay_);
    return base_.FillRows(row_ids, values, scales);
  }

 private:
  const EngramRowSource& base_;
  std::chrono::microseconds delay_;
};

// Fails fetch number `fail_at` (0-based, counted over the tables that share `calls`) with a short
// read, after scribbling over the outputs (they must never reach the model).
class FaultyRowSource final : public EngramRowSource {
 public:
  FaultyRowSource(const EngramRowSource& base, std::atomic<int>& calls, int fail_at)
      : base_(base), calls_(calls), fail_at_(fail_at) {}
  int64_t num_rows() const override { return base_.num_rows(); }
  int32_t row_dim() const override { return base_.row_dim(); }
  Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                  std::span<std::byte> scales) const override {
    if (calls_.fetch_add(1) == fail_at_) {
      std::memset(values.data(), 0x7f, values.size());
      return DataLossError(
          "/models/x/model-00002.safetensors: short read of "
          "'layers.1.engram.embed.weight': 0 of 4096 bytes at offset 8192");
    }
    return base_.FillRows(row_ids, values, scales);
  }

 private:
  const EngramRowSource& base_;
  std::atomic<int>& calls_;
  int fail_at_;
};

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<SampledToken> logprobs;
  std::vector<float> prompt_logits;
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool SameLogprobs(const std::vector<SampledToken>& a, const std::vector<SampledToken>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].token_id != b[i].token_id ||
        std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

class EngramOffloadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/engram_offload_" +
                           std::to_string(static_cast<long>(getpid())));
    std::filesystem::remove_all(*dir_);
    Result<TinySpec> spec = TinyPreset("tiny");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    Result<TinyCheckpointSummary> written = WriteTinyCheckpoint(*spec, *dir_);
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    Result<LoadedTextModel> model = LoadedTextModel::Load(*dir_);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = new LoadedTextModel(std::move(model).value());
    pool_ = new ThreadPool(2);
  }
  static void TearDownTestSuite() {
    delete pool_;
    delete model_;
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override { ASSERT_NE(model_, nullptr); }
  void TearDown() override {  // back to the default tier
    ASSERT_TRUE(model_->OpenEngramStorage(EngramStoreOptions{}, *pool_).ok());
  }

  static std::unique_ptr<EngramStorage> Open(const EngramStoreOptions& options) {
    Result<std::unique_ptr<EngramStorage>> s = EngramStorage::Open(
        model_->weights->checkpoint(), model_->weights->plan(), options, *pool_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static std::vector<int32_t> Prompt(uint32_t seed, int32_t n) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> id(3, model_->config().vocab_size - 1);
    std::vector<int32_t> ids(n);
    for (int32_t& t : ids) t = id(rng);
    return ids;
  }

  static SamplingParams Greedy(int32_t max_tokens) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.logprobs = 3;
    return p;
  }

  static EngineOptions Options(int32_t max_batched, bool prefetch) {
    EngineOptions o;
    o.block_tokens = 4;
    o.num_blocks = 2048;
    o.max_num_seqs = 8;
    o.max_num_batched_tokens = max_batched;
    o.engram_prefetch = prefetch;
    return o;
  }

  // Runs the prompts through one engine (request i added before step arrival[i]).
  static std::vector<Generated> Run(const EngineOptions& options,
                                    const std::vector<std::vector<int32_t>>& prompts,
                                    std::vector<int32_t> arrival = {},
                                    EngineStats* stats = nullptr) {
    Result<std::unique_ptr<Engine>> engine = Engine::Create(*model_, options, *pool_);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok()) return {};
    arrival.resize(prompts.size(), 0);
    std::vector<Generated> out(prompts.size());
    std::map<uint64_t, size_t> index_of;
    size_t added = 0;
    for (int step = 0; added < prompts.size() || (*engine)->HasUnfinished(); ++step) {
      for (size_t i = 0; i < prompts.size(); ++i) {
        if (arrival[i] != step) continue;
        Result<uint64_t> id =
            (*engine)->AddRequest(prompts[i], Greedy(5), AddRequestOptions{.prompt_logits = true});
        EXPECT_TRUE(id.ok()) << id.status().ToString();
        index_of[*id] = i;
        ++added;
      }
      Result<std::vector<RequestOutput>> outputs = (*engine)->Step();
      EXPECT_TRUE(outputs.ok()) << outputs.status().ToString();
      if (!outputs.ok()) return out;
      for (const RequestOutput& o : *outputs) {
        Generated& g = out[index_of.at(o.request_id)];
        g.tokens.insert(g.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        g.logprobs.insert(g.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
        g.prompt_logits.insert(g.prompt_logits.end(), o.prompt_logits.begin(),
                               o.prompt_logits.end());
        if (o.finish != FinishReason::kNone) g.finish = o.finish;
        if (!o.error.empty()) g.error = o.error;
      }
      EXPECT_LT(step, 10000);
    }
    EXPECT_TRUE((*engine)->CheckConsistency().ok());
    const EngineStats s = (*engine)->stats();
    EXPECT_EQ(s.free_blocks, s.total_blocks) << "every block comes back";
    if (stats != nullptr) *stats = s;
    return out;
  }

  // Rows that stress a store: both table ends, repeats, neighbours sharing a 4 KiB page, rows
  // a page apart, random rows.
  static std::vector<int64_t> StressRows(int64_t num_rows, int32_t row_dim, uint32_t seed) {
    const int64_t per_page = 4096 / row_dim;
    std::vector<int64_t> rows = {0, num_rows - 1, 0, 1, num_rows - 2, num_rows - 1, 5, 5, 5, 6};
    for (int64_t r : {per_page - 1, per_page, per_page + 1, 2 * per_page}) {
      if (r < num_rows) rows.push_back(r);
    }
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int64_t> any(0, num_rows - 1);
    for (int i = 0; i < 300; ++i) rows.push_back(any(rng));
    return rows;
  }

  static void Fill(const EngramRowSource& table, std::span<const int64_t> rows,
                   std::vector<std::byte>& values, std::vector<std::byte>& scales) {
    values.assign(rows.size() * table.row_dim(), std::byte{0});
    scales.assign(rows.size() * table.row_dim() / 32, std::byte{0});
    const Status s = table.FillRows(rows, values, scales);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  static std::string* dir_;
  static LoadedTextModel* model_;
  static ThreadPool* pool_;
};

std::string* EngramOffloadTest::dir_ = nullptr;
LoadedTextModel* EngramOffloadTest::model_ = nullptr;
ThreadPool* EngramOffloadTest::pool_ = nullptr;

TEST_F(EngramOffloadTest, EveryTierReturnsTheResidentBytes) {
  std::unique_ptr<EngramStorage> resident = Open({.tier = EngramTier::kResident});
  ASSERT_NE(resident, nullptr);
  EXPECT_EQ(resident->resident_bytes(), resident->table_bytes());
  // The rows of a real prompt, per Engram layer.
  const std::vector<int32_t> prompt = Prompt(7, 60);
  std::vector<int32_t> classes(prompt.size());
  ASSERT_TRUE(MapTokensToEngramClasses(model_->token_map, prompt, classes).ok());
  const size_t num_tables = static_cast<size_t>(model_->engram.num_layers());
  const size_t cols = static_cast<size_t>(model_->engram.num_cols());
  std::vector<int64_t> prompt_rows(prompt.size() * num_tables * cols);
  ComputeEngramRows(model_->engram, classes, {}, 0, static_cast<int64_t>(prompt.size()),
                    prompt_rows);

  std::vector<std::pair<std::string, EngramStoreOptions>> tiers = {
      {"mapped", {.tier = EngramTier::kMapped}},
      {"disk, no cache", {.tier = EngramTier::kDisk, .cache_bytes = 0, .io_threads = 1}},
      {"disk, big cache", {.tier = EngramTier::kDisk, .cache_bytes = 1 << 20, .io_threads = 4}},
      {"disk, 3-row cache", {.tier = EngramTier::kDisk, .cache_bytes = 6 * 33, .io_threads = 7}},
      {"disk, one row per read batch",
       {.tier = EngramTier::kDisk,
        .cache_bytes = 1 << 20,
        .io_threads = 2,
        .max_pages_per_batch = 1}},
      {"disk, O_DIRECT",
       {.tier = EngramTier::kDisk, .cache_bytes = 64 * 33, .io_threads = 3, .direct_io = true}},
  };
  for (const auto& [name, options] : tiers) {
    SCOPED_TRACE(name);
    Result<std::unique_ptr<EngramStorage>> store = EngramStorage::Open(
        model_->weights->checkpoint(), model_->weights->plan(), options, *pool_);
    if (!store.ok() && options.direct_io) {
      GTEST_LOG_(INFO) << "O_DIRECT not supported here: " << store.status().ToString();
      continue;
    }
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_EQ((*store)->num_tables(), resident->num_tables());
    for (int32_t slot = 0; slot < resident->num_tables(); ++slot) {
      const EngramRowSource& want_table = resident->table(slot);
      const EngramRowSource& table = (*store)->table(slot);
      ASSERT_EQ(table.num_rows(), want_table.num_rows());
      std::vector<int64_t> rows = StressRows(table.num_rows(), table.row_dim(), 11 + slot);
      for (size_t t = 0; t < prompt.size(); ++t) {
        for (size_t c = 0; c < cols; ++c)
          rows.push_back(prompt_rows[(t * num_tables + slot) * cols + c]);
      }
      std::vector<std::byte> want_values, want_scales, values, scales;
      Fill(want_table, rows, want_values, want_scales);
      for (int pass = 0; pass < 2; ++pass) {  // the second pass hits what the cache kept
        Fill(table, rows, values, scales);
        EXPECT_EQ(values, want_values) << "pass " << pass << ", slot " << slot;
        EXPECT_EQ(scales, want_scales) << "pass " << pass << ", slot " << slot;
      }
    }
    // The resident copy equals the stored tensor bytes.
    Result<TensorView> stored = model_->weights->Get("layers.1.engram.embed.weight");
    ASSERT_TRUE(stored.ok());
    std::vector<int64_t> all(static_cast<size_t>(resident->table(0).num_rows()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    std::vector<std::byte> v, s;
    Fill((*store)->table(0), all, v, s);
    ASSERT_EQ(v.size(), stored->bytes.size());
    EXPECT_EQ(std::memcmp(v.data(), stored->bytes.data(), v.size()), 0);
  }
}

TEST_F(EngramOffloadTest, DiskTierDeduplicatesPagesCachesRepeatsAndWarmsAhead) {
  std::unique_ptr<EngramStorage> disk =
      Open({.tier = EngramTier::kDisk, .cache_bytes = 1 << 20, .io_threads = 2});
  ASSERT_NE(disk, nullptr);
  const EngramRowSource& table = disk->table(0);
  std::vector<std::byte> values, scales;
  const std::vector<int64_t> neighbours = {5, 6, 7};  // one page of values, one of scales
  Fill(table, neighbours, values, scales);
  EngramStoreCounters c = table.counters();
  EXPECT_EQ(c.rows_fetched, 3u);
  EXPECT_EQ(c.cache_hits, 0u);
  EXPECT_EQ(c.rows_read, 3u);
  EXPECT_LE(c.pages_read, 4u) << "the three rows share their pages";
  Fill(table, std::vector<int64_t>{6}, values, scales);
  EXPECT_EQ(table.counters().cache_hits, 1u);
  ASSERT_TRUE(table.WarmRows(std::vector<int64_t>{100}).ok());
  Fill(table, std::vector<int64_t>{100}, values, scales);
  EXPECT_EQ(table.counters().cache_hits, 2u);
  ASSERT_TRUE(disk->DropCaches().ok());
  Fill(table, std::vector<int64_t>{6}, values, scales);
  EXPECT_EQ(table.counters().cache_hits, 2u) << "the cache was emptied";
  const Status bad = table.FillRows(std::vector<int64_t>{table.num_rows()},
                                    std::span<std::byte>(values.data(), 32),
                                    std::span<std::byte>(scales.data(), 1));
  EXPECT_EQ(bad.code(), StatusCode::kOutOfRange);
  EXPECT_NE(bad.message().find("layers.1.engram.embed"), std::string::npos) << bad.message();
}

// The same logits and tokens on every tier and prefetch mode, one-shot, chunked and batched.
TEST_F(EngramOffloadTest, EngineLogitsAreBitIdenticalOnEveryTier) {
  const std::vector<std::vector<int32_t>> prompts = {Prompt(1, 37), Prompt(2, 21), Prompt(3, 9),
                                                     Prompt(4, 30)};
  const std::vector<int32_t> arrival = {0, 0, 2, 3};
  ASSERT_TRUE(model_->OpenEngramStorage({.tier = EngramTier::kResident}, *pool_).ok());
  struct Case {
    std::string name;
    int32_t max_batched;
    bool batched;
  };
  const std::vector<Case> cases = {
      {"one-shot", 512, false}, {"chunked by 7", 7, false}, {"batched, chunked by 16", 16, true}};
  std::vector<std::vector<Generated>> want;
  for (const Case& c : cases) {
    want.push_back(c.batched ? Run(Options(c.max_batched, true), prompts, arrival)
                             : Run(Options(c.max_batched, true), {prompts[0]}));
  }
  const std::vector<std::pair<std::string, EngramStoreOptions>> tiers = {
      {"resident", {.tier = EngramTier::kResident}},
      {"mapped", {.tier = EngramTier::kMapped}},
      {"disk", {.tier = EngramTier::kDisk, .cache_bytes = 1 << 20, .io_threads = 4}},
      {"disk, cache of 2 rows per table (too small for a step)",
       {.tier = EngramTier::kDisk, .cache_bytes = 4 * 33, .io_threads = 2}},
  };
  for (const auto& [tier_name, tier] : tiers) {
    ASSERT_TRUE(model_->OpenEngramStorage(tier, *pool_).ok());
    for (bool prefetch : {true, false}) {
      for (size_t k = 0; k < cases.size(); ++k) {
        const Case& c = cases[k];
        SCOPED_TRACE(tier_name + ", prefetch " + (prefetch ? "on" : "off") + ", " + c.name);
        const std::vector<Generated> got =
            c.batched ? Run(Options(c.max_batched, prefetch), prompts, arrival)
                      : Run(Options(c.max_batched, prefetch), {prompts[0]});
        ASSERT_EQ(got.size(), want[k].size());
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_TRUE(SameBits(got[i].prompt_logits, want[k][i].prompt_logits)) << "request " << i;
          EXPECT_EQ(got[i].tokens, want[k][i].tokens) << "request " << i;
          EXPECT_TRUE(SameLogprobs(got[i].logprobs, want[k][i].logprobs)) << "request " << i;
        }
      }
    }
  }
}

// FNV-1a over a tensor's bytes.
uint64_t Fingerprint(std::span<const std::byte> bytes) {
  uint64_t h = 1469598103934665603ull;
  for (std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 1099511628211ull;
  return h;
}

TEST_F(EngramOffloadTest, WeightsCopiedIntoHugePagesKeepEveryBitAndLeaveTheEngramTablesMapped) {
  const std::vector<std::vector<int32_t>> prompts = {Prompt(5, 33), Prompt(6, 17)};
  const std::vector<int32_t> arrival = {0, 1};
  const std::vector<Generated> want = Run(Options(16, true), prompts, arrival);
  std::map<std::string, uint64_t> before;
  std::vector<std::span<const std::byte>> tables;
  for (const TensorSpec& t : model_->weights->expected()) {
    Result<TensorView> view = model_->weights->Get(t.name);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    before[t.name] = Fingerprint(view->bytes);
    if (ClassifyTensor(t.name) == WeightKind::kEngramTables) tables.push_back(view->bytes);
  }
  ASSERT_FALSE(tables.empty());

  const LoadedTextModel::Residence r =
      model_->ResideWeights(*pool_, LoadedTextModel::WeightMemory::kCopy);
  ASSERT_TRUE(r.done) << r.weight_bytes << " of " << r.available_bytes << " bytes available";
  EXPECT_TRUE(r.copy_error.empty()) << r.copy_error;
  EXPECT_GT(r.copied_bytes, r.weight_bytes / 2);
  EXPECT_LE(r.copied_bytes, r.weight_bytes);
  // The disk tier releases the tables' pages (MADV_DONTNEED), which would clear a copied page.
  ASSERT_TRUE(model_
                  ->OpenEngramStorage(
                      {.tier = EngramTier::kDisk, .cache_bytes = 1 << 20, .io_threads = 2}, *pool_)
                  .ok());
  for (const TensorSpec& t : model_->weights->expected()) {
    EXPECT_EQ(Fingerprint(model_->weights->Get(t.name)->bytes), before[t.name]) << t.name;
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (std::span<const std::byte> table : tables) {
    if (table.size() < 3 * page) continue;  // no whole page of its own to look at
    Result<std::string> flags = MappingVmFlags(table.data() + table.size() / 2);
    if (!flags.ok()) GTEST_SKIP() << flags.status().ToString();
    EXPECT_NE(flags->find(" ms"), std::string::npos) << "an Engram table was copied: " << *flags;
  }
  for (const auto& [tier_name, tier] : std::vector<std::pair<std::string, EngramStoreOptions>>{
           {"disk", {.tier = EngramTier::kDisk, .cache_bytes = 1 << 20, .io_threads = 2}},
           {"mapped", {.tier = EngramTier::kMapped}}}) {
    SCOPED_TRACE(tier_name);
    ASSERT_TRUE(model_->OpenEngramStorage(tier, *pool_).ok());
    const std::vector<Generated> got = Run(Options(16, true), prompts, arrival);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(SameBits(got[i].prompt_logits, want[i].prompt_logits)) << "request " << i;
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    }
  }
}

TEST_F(EngramOffloadTest, SlowStoreGivesTheSameBitsWithPrefetchOnAndOff) {
  const std::vector<std::vector<int32_t>> prompts = {Prompt(5, 25), Prompt(6, 12)};
  const std::vector<Generated> want = Run(Options(8, true), prompts, {0, 1});
  std::unique_ptr<EngramStorage> base = Open({.tier = EngramTier::kResident});
  ASSERT_NE(base, nullptr);
  std::vector<std::unique_ptr<EngramRowSource>> slow;
  for (int32_t slot = 0; slot < base->num_tables(); ++slot) {
    slow.push_back(
        std::make_unique<SlowRowSource>(base->table(slot), std::chrono::microseconds(3000)));
  }
  model_->engram_storage = std::make_unique<EngramStorage>(EngramStoreOptions{}, std::move(slow));
  for (bool prefetch : {true, false}) {
    SCOPED_TRACE(prefetch ? "prefetch on" : "prefetch off");
    EngineStats stats;
    const std::vector<Generated> got = Run(Options(8, prefetch), prompts, {0, 1}, &stats);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(SameBits(got[i].prompt_logits, want[i].prompt_logits)) << "request " << i;
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    }
    ASSERT_EQ(stats.engram_fetch.wait_ms_per_layer.size(), 2u);
    EXPECT_GT(stats.engram_fetch.wait_ms_per_layer[0], 0.0) << "layer 1 waited for its rows";
    EXPECT_GT(stats.engram_fetch.rows_requested, 0u);
    EXPECT_GT(stats.engram_fetch.fetch_latency_count, 0u);
  }
  model_->engram_storage.reset();  // before `base`, which it points into
}

// Aborts while a slow store's rows are being fetched ahead (real-weight-traps.md E5): a long
// prompt prefilled in chunks is aborted after each of its first steps, another after its first
// decode step; the request that stays gets the bits it gets alone, the prefetcher never reads a
// freed request's state (its step's row ids are its own copy; the sanitizer job runs this), and
// every block comes back.
TEST_F(EngramOffloadTest, AbortsDuringPrefetchLeaveTheOthersAndTheBlocksIntact) {
  const std::vector<int32_t> survivor_prompt = Prompt(21, 18);
  const std::vector<int32_t> victim_prompt = Prompt(22, 40);
  const std::vector<Generated> want = Run(Options(8, true), {survivor_prompt});
  std::unique_ptr<EngramStorage> base = Open({.tier = EngramTier::kResident});
  ASSERT_NE(base, nullptr);
  std::vector<std::unique_ptr<EngramRowSource>> slow;
  for (int32_t slot = 0; slot < base->num_tables(); ++slot) {
    slow.push_back(
        std::make_unique<SlowRowSource>(base->table(slot), std::chrono::microseconds(2000)));
  }
  model_->engram_storage = std::make_unique<EngramStorage>(EngramStoreOptions{}, std::move(slow));
  for (int abort_after : {1, 2, 5}) {  // steps of the victim's chunked prefill, or its decode
    SCOPED_TRACE("abort after step " + std::to_string(abort_after));
    Result<std::unique_ptr<Engine>> engine = Engine::Create(*model_, Options(8, true), *pool_);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    Result<uint64_t> victim = (*engine)->AddRequest(victim_prompt, Greedy(5));
    Result<uint64_t> survivor = (*engine)->AddRequest(survivor_prompt, Greedy(5));
    Result<uint64_t> short_victim = (*engine)->AddRequest(Prompt(23, 3), Greedy(9));
    ASSERT_TRUE(victim.ok() && survivor.ok() && short_victim.ok());
    std::vector<int32_t> tokens;
    for (int step = 0; (*engine)->HasUnfinished(); ++step) {
      if (step == abort_after) {
        ASSERT_TRUE((*engine)->Abort(*victim).ok());
        ASSERT_TRUE((*engine)->Abort(*short_victim).ok());
      }
      Result<std::vector<RequestOutput>> outputs = (*engine)->Step();
      ASSERT_TRUE(outputs.ok()) << outputs.status().ToString();
      for (const RequestOutput& o : *outputs) {
        if (o.request_id == *survivor) {
          tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        }
      }
      ASSERT_LT(step, 1000);
    }
    EXPECT_EQ(tokens, want[0].tokens);
    EXPECT_TRUE((*engine)->CheckConsistency().ok());
    const EngineStats stats = (*engine)->stats();
    EXPECT_EQ(stats.free_blocks, stats.total_blocks);
  }
  model_->engram_storage.reset();  // before `base`, which it points into
}

TEST_F(EngramOffloadTest, ReadErrorFailsThatStepsRequestsAndTheEngineServesOn) {
  const std::vector<int32_t> prompt = Prompt(8, 20);
  const std::vector<Generated> want = Run(Options(64, true), {prompt});
  std::unique_ptr<EngramStorage> base = Open({.tier = EngramTier::kMapped});
  ASSERT_NE(base, nullptr);
  for (bool prefetch : {true, false}) {
    for (int fail_at : {0, 1, 5}) {  // layer 1 of step 1, layer 4 of step 1, a later decode step
      SCOPED_TRACE(std::string(prefetch ? "prefetch on" : "prefetch off") + ", fetch " +
                   std::to_string(fail_at));
      std::atomic<int> calls{0};
      std::vector<std::unique_ptr<EngramRowSource>> faulty;
      for (int32_t slot = 0; slot < base->num_tables(); ++slot) {
        faulty.push_back(std::make_unique<FaultyRowSource>(base->table(slot), calls, fail_at));
      }
      model_->engram_storage =
          std::make_unique<EngramStorage>(EngramStoreOptions{}, std::move(faulty));
      Result<std::unique_ptr<Engine>> engine =
          Engine::Create(*model_, Options(64, prefetch), *pool_);
      ASSERT_TRUE(engine.ok());
      Result<uint64_t> first = (*engine)->AddRequest(prompt, Greedy(5));
      Result<uint64_t> second = (*engine)->AddRequest(Prompt(9, 6), Greedy(5));
      ASSERT_TRUE(first.ok() && second.ok());
      std::map<uint64_t, Generated> got;
      uint64_t third = 0;
      for (int step = 0; (*engine)->HasUnfinished() || third == 0; ++step) {
        if (third == 0 && step > 0 && got[*first].finish != FinishReason::kNone) {
          Result<uint64_t> id = (*engine)->AddRequest(prompt, Greedy(5));  // after the fault
          ASSERT_TRUE(id.ok());
          third = *id;
        }
        Result<std::vector<RequestOutput>> outputs = (*engine)->Step();
        ASSERT_TRUE(outputs.ok()) << "a storage fault is no engine error: "
                                  << outputs.status().ToString();
        for (const RequestOutput& o : *outputs) {
          Generated& g = got[o.request_id];
          g.tokens.insert(g.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
          if (o.finish != FinishReason::kNone) g.finish = o.finish;
          if (!o.error.empty()) g.error = o.error;
        }
        ASSERT_LT(step, 1000);
      }
      for (uint64_t id : {*first, *second}) {
        EXPECT_EQ(got[id].finish, FinishReason::kError) << "request " << id;
        EXPECT_NE(got[id].error.find("short read of 'layers.1.engram.embed.weight'"),
                  std::string::npos)
            << got[id].error;
        EXPECT_NE(got[id].error.find("model-00002.safetensors"), std::string::npos);
      }
      EXPECT_EQ(got[third].finish, FinishReason::kLength);
      EXPECT_EQ(got[third].tokens, want[0].tokens) << "no stale or partial rows were kept";
      EXPECT_TRUE((*engine)->CheckConsistency().ok());
      const EngineStats stats = (*engine)->stats();
      EXPECT_EQ(stats.free_blocks, stats.total_blocks);
      EXPECT_EQ(stats.failed_steps, 1u);
      EXPECT_EQ(stats.engram_fetch.fetch_errors, 1u);
      engine->reset();
      model_->engram_storage.reset();
    }
  }
}

// A copy of the checkpoint whose Engram table file can be damaged.
class EngramFaultFileTest : public EngramOffloadTest {
 protected:
  void SetUp() override {
    EngramOffloadTest::SetUp();
    copy_ = ::testing::TempDir() + "/engram_fault_" + std::to_string(static_cast<long>(getpid()));
    std::filesystem::remove_all(copy_);
    std::filesystem::copy(*dir_, copy_, std::filesystem::copy_options::recursive);
    Result<TensorFileRange> range =
        model_->weights->checkpoint().Locate("layers.1.engram.embed.weight");
    ASSERT_TRUE(range.ok());
    table_file_ = copy_ + "/" + std::filesystem::path(range->path).filename().string();
    table_end_ = range->offset + range->size;
    table_offset_ = range->offset;
  }
  void TearDown() override {
    EngramOffloadTest::TearDown();
    std::filesystem::remove_all(copy_);
  }
  std::string copy_;
  std::string table_file_;
  uint64_t table_offset_ = 0;
  uint64_t table_end_ = 0;
};

TEST_F(EngramFaultFileTest, TruncatedTableFileIsRefusedAtLoadNamingFileAndTensor) {
  std::filesystem::resize_file(table_file_, table_end_ - 1000);
  Result<LoadedTextModel> m = LoadedTextModel::Load(copy_);
  ASSERT_FALSE(m.ok());
  const std::string message = m.status().ToString();
  EXPECT_NE(message.find(std::filesystem::path(table_file_).filename().string()), std::string::npos)
      << message;
  EXPECT_NE(message.find("engram.embed"), std::string::npos) << message;
}

TEST_F(EngramFaultFileTest, UnreadableTableFileIsRefusedAtLoadNamingTheFile) {
  if (::geteuid() == 0) {
    // root reads any file: make it a directory instead.
    std::filesystem::remove(table_file_);
    std::filesystem::create_directory(table_file_);
  } else {
    std::filesystem::permissions(table_file_, std::filesystem::perms::none);
  }
  Result<LoadedTextModel> m = LoadedTextModel::Load(copy_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().ToString().find(std::filesystem::path(table_file_).filename().string()),
            std::string::npos)
      << m.status().ToString();
}

TEST_F(EngramFaultFileTest, FileTruncatedAfterLoadFailsTheDiskFetchNamingFileAndTensor) {
  Result<LoadedTextModel> m = LoadedTextModel::Load(copy_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_TRUE(m->OpenEngramStorage({.tier = EngramTier::kDisk, .cache_bytes = 0}, *pool_).ok());
  const EngramRowSource& table = m->engram_storage->table(0);
  std::filesystem::resize_file(table_file_, table_offset_ + 100);
  std::vector<std::byte> values(32), scales(1);
  const Status s = table.FillRows(std::vector<int64_t>{table.num_rows() - 1}, values, scales);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(table_file_), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("layers.1.engram.embed.weight"), std::string::npos) << s.message();
  EXPECT_EQ(table.counters().read_errors, 1u);
}

}  // namespace
}  // namespace dsv41

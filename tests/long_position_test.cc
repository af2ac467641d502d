// A forward at the end of the released context (real-weight-traps.md K5): the `tiny` preset with
// max_position_embeddings 1048576 (the released rope thetas, YaRN factor 16 over 65536 on the
// compressed layers), a request whose first 1048512 positions are a restored cache — compressed
// entries and index keys copied from a real prefill into every 61st entry of each kv source, the
// rest zeros — and 64 new tokens at positions 1048512..1048575. The RoPE tables, the compressor's
// grouping, the SWA ring and the indexer's top-k over a million entries run where only real
// long contexts take them: chunked and token-by-token = one-shot bit for bit, logits finite, and
// the fast numerics within 1e-3 of the reference at every noise-stable position.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/exec_context.h"
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

constexpr int64_t kContext = int64_t{1} << 20;
constexpr int32_t kNewTokens = 64;
constexpr int32_t kStart = static_cast<int32_t>(kContext - kNewTokens);

class LongPositionTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/long_position_test_" +
                           std::to_string(static_cast<long>(getpid())));
    std::filesystem::remove_all(*dir_);
    Result<TinySpec> spec = TinyPreset("tiny");
    ASSERT_TRUE(spec.ok());
    spec->num_shards = 1;
    spec->config.max_position_embeddings = kContext;
    spec->config.compress_yarn.original_max_position_embeddings =
        static_cast<int64_t>(static_cast<double>(kContext) / spec->config.compress_yarn.factor);
    ASSERT_TRUE(WriteTinyCheckpoint(*spec, *dir_).ok());
    Result<ModelWeights> weights = ModelWeights::Load(*dir_, LoadOptions{.include_dspark = false});
    ASSERT_TRUE(weights.ok()) << weights.status().ToString();
    weights_ = new ModelWeights(std::move(weights).value());
    Result<std::unique_ptr<TextModel>> model = TextModel::Load(*weights_);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    model_ = model->release();
    Result<Tokenizer> tokenizer = Tokenizer::Load(*dir_ + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok());
    Result<EngramTokenMap> map = BuildEngramTokenMap(*tokenizer);
    ASSERT_TRUE(map.ok());
    token_map_ = new EngramTokenMap(std::move(map).value());
    Result<EngramHashConstants> constants =
        ComputeEngramHashConstants(weights_->config(), *token_map_);
    ASSERT_TRUE(constants.ok());
    constants_ = new EngramHashConstants(std::move(constants).value());
    // The whole request's tokens: random, the last kNewTokens are the ones run.
    std::mt19937 rng(5);
    std::uniform_int_distribution<int32_t> id(3, model_->vocab_size() - 1);
    ids_ = new std::vector<int32_t>(static_cast<size_t>(kContext));
    for (int32_t& t : *ids_) t = id(rng);
    classes_ = new std::vector<int32_t>(ids_->size());
    ASSERT_TRUE(MapTokensToEngramClasses(*token_map_, *ids_, *classes_).ok());
  }
  static void TearDownTestSuite() {
    delete classes_;
    delete ids_;
    delete constants_;
    delete token_map_;
    delete model_;
    delete weights_;
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static Status Forward(int32_t start, int32_t n, ContiguousKvCache& cache, std::span<float> logits,
                        ExecContext& ctx) {
    Batch batch;
    AppendToBatch(*constants_,
                  BatchSlice{.token_ids = *ids_,
                             .class_ids = *classes_,
                             .dead = {},
                             .start = start,
                             .num_tokens = n,
                             .block_tables = cache.block_tables(),
                             .logits_from = start},
                  batch);
    SyncEngramStepRows engram = model_->MappedEngramRows();
    engram.StartStep(batch.engram_rows, batch.num_tokens());
    return model_->Forward(batch, cache.view(), engram, ForwardOutputs{.logits = logits}, ctx);
  }

  // A cache for the whole context whose positions before kStart hold the restored entries (or
  // only zeros).
  static ContiguousKvCache RestoredCache(bool restore) {
    const ModelConfig& config = model_->config();
    // The entries of a real 64-token prefill (values exact in their storage formats).
    Result<ContiguousKvCache> scratch = ContiguousKvCache::Create(config, model_->plan(), 64);
    EXPECT_TRUE(scratch.ok());
    std::vector<float> logits(static_cast<size_t>(64) * model_->vocab_size());
    OwnedExecContext exec(2);
    EXPECT_TRUE(Forward(0, 64, *scratch, logits, exec.ctx).ok());
    Result<ContiguousKvCache> cache =
        ContiguousKvCache::Create(config, model_->plan(), kContext, KvProfile::kSeed, 128);
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    if (!cache.ok()) std::abort();
    const KvCacheView& view = cache->view();
    for (size_t slot = 0; slot < view.base.size(); ++slot) {
      std::memset(view.base[slot], 0, view.page_bytes[slot] * view.num_blocks);
    }
    for (const int32_t layer : config.kv_source_layer_ids) {
      if (!restore) break;
      const int32_t ratio = config.compress_ratios[static_cast<size_t>(layer)];
      const int32_t have = 64 / ratio;
      for (int32_t e = 0; e < kStart / ratio; e += 61) {
        cache->SetEntry(layer, e, scratch->KvEntry(layer, e % have),
                        scratch->IndexKey(layer, e % have));
      }
    }
    return std::move(cache).value();
  }

  // The new tokens' logits, run in chunks of `chunk` on a fresh restored cache.
  static std::vector<float> Run(int32_t chunk, ExecContext& ctx, bool restore = true) {
    ContiguousKvCache cache = RestoredCache(restore);
    const size_t vocab = static_cast<size_t>(model_->vocab_size());
    std::vector<float> all;
    for (int32_t done = 0; done < kNewTokens; done += chunk) {
      const int32_t n = std::min(chunk, kNewTokens - done);
      std::vector<float> logits(static_cast<size_t>(n) * vocab);
      const Status s = Forward(kStart + done, n, cache, logits, ctx);
      EXPECT_TRUE(s.ok()) << s.ToString();
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  }

  static std::string* dir_;
  static ModelWeights* weights_;
  static TextModel* model_;
  static EngramTokenMap* token_map_;
  static EngramHashConstants* constants_;
  static std::vector<int32_t>* ids_;
  static std::vector<int32_t>* classes_;
};

std::string* LongPositionTest::dir_ = nullptr;
ModelWeights* LongPositionTest::weights_ = nullptr;
TextModel* LongPositionTest::model_ = nullptr;
EngramTokenMap* LongPositionTest::token_map_ = nullptr;
EngramHashConstants* LongPositionTest::constants_ = nullptr;
std::vector<int32_t>* LongPositionTest::ids_ = nullptr;
std::vector<int32_t>* LongPositionTest::classes_ = nullptr;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), 4 * a.size()) == 0;
}

// max |got − want| over position p's logits relative to max(1, max |want|).
double RelativeError(const std::vector<float>& got, const std::vector<float>& want, size_t vocab,
                     size_t p) {
  double err = 0, scale = 0;
  for (size_t v = p * vocab; v < (p + 1) * vocab; ++v) {
    err = std::max(err, std::fabs(static_cast<double>(got[v]) - want[v]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[v])));
  }
  return err / std::max(1.0, scale);
}

TEST_F(LongPositionTest, ChunkedDecodeAndNumericsAgreeAtTheEndOfTheContext) {
  OwnedExecContext fast(2);
  const std::vector<float> one_shot = Run(kNewTokens, fast.ctx);
  for (float v : one_shot) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(SameBits(Run(7, fast.ctx), one_shot)) << "chunks of 7";
  EXPECT_TRUE(SameBits(Run(1, fast.ctx), one_shot)) << "token by token";
  // The restored entries are read: the same tokens over zeros give other logits.
  EXPECT_FALSE(SameBits(Run(kNewTokens, fast.ctx, false), one_shot));
  OwnedExecContext reference(2, Numerics::kReference);
  OwnedExecContext probe(2, Numerics::kPlainFp32);
  const std::vector<float> want = Run(kNewTokens, reference.ctx);
  const std::vector<float> noise = Run(kNewTokens, probe.ctx);
  const size_t vocab = static_cast<size_t>(model_->vocab_size());
  int num_stable = 0, num_far = 0;
  for (size_t p = 0; p < static_cast<size_t>(kNewTokens); ++p) {
    if (RelativeError(noise, want, vocab, p) > 1e-4) continue;
    ++num_stable;
    num_far += RelativeError(one_shot, want, vocab, p) > 1e-3;
  }
  std::printf("positions %d..%lld: %d of %d noise-stable, %d past 1e-3\n", kStart,
              static_cast<long long>(kContext - 1), num_stable, kNewTokens, num_far);
  EXPECT_GE(num_stable, kNewTokens * 4 / 5);
  EXPECT_EQ(num_far, 0);
}

}  // namespace
}  // namespace dsv41

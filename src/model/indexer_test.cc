#include "model/indexer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/npy.h"
#include "base/thread_pool.h"
#include "kv/kv_layout.h"
#include "model/attention.h"
#include "model/compressor.h"
#include "model/weights.h"
#include "numerics/arith.h"

namespace dsv41 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model";

// ---- TopKAscending (model.md §7.5 step 6) ----------------------------------------------------

TEST(TopKAscendingTest, TiesGoToTheLowerIndex) {
  // 2.0 at 1, 3 and 4; k = 3 takes 5.0 (index 0) and the two lowest of the tied 2.0s.
  const std::vector<float> s = {5.0f, 2.0f, 1.0f, 2.0f, 2.0f};
  EXPECT_EQ(TopKAscending(s, 3), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(TopKAscending(s, 1), (std::vector<int32_t>{0}));
}

TEST(TopKAscendingTest, ReturnsAscendingIndicesNotScoreOrder) {
  const std::vector<float> s = {0.5f, 9.0f, -1.0f, 7.0f};
  EXPECT_EQ(TopKAscending(s, 2), (std::vector<int32_t>{1, 3}));
}

TEST(TopKAscendingTest, KAboveSizeTakesEverythingAndMinusInfTiesLow) {
  const std::vector<float> s = {-kInf, 1.0f, -kInf, -kInf};
  EXPECT_EQ(TopKAscending(s, 10), (std::vector<int32_t>{0, 1, 2, 3}));
  // One finite score, then the lowest −inf (what the reference's topk does with filtered-out
  // entries when the pool is too small, §7.5 step 6).
  EXPECT_EQ(TopKAscending(s, 2), (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(TopKAscending(s, 0).empty());
}

// ---- CandidateMask (model.md §7.5 step 5) ----------------------------------------------------

std::vector<uint8_t> Mask(const std::vector<float>& scores, int32_t visible, int32_t blocks,
                          int32_t block_size) {
  std::vector<uint8_t> mask(scores.size());
  CandidateMask(scores, visible, blocks, block_size, mask);
  return mask;
}

TEST(CandidateMaskTest, PinsTheNewestBlockAndTakesTheBestOthers) {
  // N = 7, V = 7, blocks of 2: block scores {1, 9, 4, 0.5 (entry 6 padded)}. One block to keep:
  // the pinned block 3 (entry 6, the newest visible) wins over block 1's 9.
  const std::vector<float> s = {1.0f, 0.0f, 9.0f, 2.0f, 4.0f, 3.0f, 0.5f};
  EXPECT_EQ(Mask(s, 7, 1, 2), (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1}));
  // Two blocks: pinned 3, then block 1.
  EXPECT_EQ(Mask(s, 7, 2, 2), (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1}));
  // Three blocks: then block 2 (4 > 1).
  EXPECT_EQ(Mask(s, 7, 3, 2), (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 1}));
}

TEST(CandidateMaskTest, BlockTiesGoToTheLowerBlock) {
  // Block scores {3, 3, 3}; block 2 holds the newest entry (pinned), then blocks 0 and 1 tie: 0.
  EXPECT_EQ(Mask({3.0f, 0.0f, 0.0f, 3.0f, 3.0f, 1.0f}, 6, 2, 2),
            (std::vector<uint8_t>{1, 1, 0, 0, 1, 1}));
  // V = 4 pins block 1; then block 0 (score 3) before the invisible (−inf) blocks.
  EXPECT_EQ(Mask({3.0f, 0.0f, 0.0f, 1.0f, -kInf, -kInf, -kInf}, 4, 2, 2),
            (std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(Mask({1.0f, 0.0f, 3.0f, 0.0f, 3.0f, 0.0f, 3.0f}, 7, 2, 2),
            (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1}));
}

TEST(CandidateMaskTest, InvisibleBlocksAreNeverKept) {
  // V = 3 of N = 6: entries 3..5 are −inf. Block 1 (entries 2, 3) is pinned and keeps its
  // invisible entry 3 in the mask; blocks 2 is −inf and dropped even with room for it.
  const std::vector<float> s = {1.0f, 2.0f, 0.5f, -kInf, -kInf, -kInf};
  EXPECT_EQ(Mask(s, 3, 3, 2), (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
}

TEST(CandidateMaskTest, NothingVisibleKeepsNothing) {
  // V = 0: (0 − 1) // 2 = −1 pins no block; every block is −inf.
  const std::vector<float> s = {-kInf, -kInf, -kInf};
  EXPECT_EQ(Mask(s, 0, 3, 2), (std::vector<uint8_t>{0, 0, 0}));
}

TEST(CandidateMaskTest, ASmallContextKeepsEveryVisibleEntry) {
  // V = 5 ≤ 3 blocks · 2: every visible entry survives.
  const std::vector<float> s = {-3.0f, 7.0f, 0.0f, 0.0f, -1.0f, -kInf};
  EXPECT_EQ(Mask(s, 5, 3, 2), (std::vector<uint8_t>{1, 1, 1, 1, 1, 1}));
}

TEST(IndexWeightScaleTest, ReleasedAndTinyConstants) {
  ModelConfig c;
  c.index_head_dim = 128;
  c.index_n_heads = 32;
  EXPECT_EQ(IndexWeightScale(c), 1.0f / 64.0f);  // §7.5: 128^-0.5 · 32^-0.5 = 1/64
  c.index_head_dim = 32;
  c.index_n_heads = 4;
  // tiny-a/c: 32^-0.5 · 4^-0.5 = 128^-0.5 = 0.08838834764831845, rounded to fp32.
  EXPECT_EQ(IndexWeightScale(c), static_cast<float>(0.08838834764831845));
}

TEST(IndexWeightScaleTest, EqualsTheRoundedDoubleProductOfThePowers) {
  // The reference's formula (§7.5 step 2), computed here in double with the C library.
  for (int32_t dim : {16, 32, 48, 64, 96, 128, 192, 256}) {
    for (int32_t heads : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64}) {
      ModelConfig c;
      c.index_head_dim = dim;
      c.index_n_heads = heads;
      const float want = static_cast<float>(std::pow(static_cast<double>(dim), -0.5) *
                                            std::pow(static_cast<double>(heads), -0.5));
      EXPECT_EQ(IndexWeightScale(c), want) << dim << " dims, " << heads << " heads";
    }
  }
}

// ---- Goldens ---------------------------------------------------------------------------------

const ModelWeights& LoadGolden(const std::string& config) {
  static std::map<std::string, std::unique_ptr<ModelWeights>> cache;
  auto it = cache.find(config);
  if (it == cache.end()) {
    Result<ModelWeights> w = ModelWeights::Load(kGoldens + "/checkpoints/" + config);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    if (!w.ok()) std::abort();
    it = cache.emplace(config, std::make_unique<ModelWeights>(std::move(w).value())).first;
  }
  return *it->second;
}

NpyArray ReadGolden(const std::string& path) {
  Result<NpyArray> a = ReadNpy(path);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  if (!a.ok()) std::abort();
  return std::move(a).value();
}

struct GoldenCase {
  const char* config;
  const char* prompt;
};

std::string CaseName(const testing::TestParamInfo<GoldenCase>& info) {
  std::string name = std::string(info.param.config) + "_" + info.param.prompt;
  for (char& c : name) {
    if (c == '-') c = '_';
  }
  return name;
}

// One case's inputs.
struct CaseData {
  const ModelWeights* weights = nullptr;
  std::string dir;
  int64_t t_count = 0;
  std::vector<float> attn_in;  // [L, T, hidden]
  std::vector<bool> stable;    // [T]
  int num_stable = 0;

  std::span<const float> LayerInput(int32_t l) const {
    const int64_t hidden = weights->config().hidden_size;
    return std::span<const float>(attn_in).subspan(l * t_count * hidden, t_count * hidden);
  }
};

CaseData LoadCase(const GoldenCase& gc) {
  CaseData d;
  d.weights = &LoadGolden(gc.config);
  d.dir = kGoldens + "/cases/" + gc.config + "/" + gc.prompt;
  NpyArray attn_in = ReadGolden(d.dir + "/attn_in.npy");
  d.t_count = attn_in.shape[1];
  d.attn_in = attn_in.ToFloat();
  for (float s : ReadGolden(d.dir + "/stability_gemm32.npy").ToFloat()) {
    d.stable.push_back(s <= 1e-4f);
    d.num_stable += s <= 1e-4f;
  }
  return d;
}

// A cache for the case's prompt.
ContiguousKvCache NewCache(const CaseData& d) {
  Result<ContiguousKvCache> cache =
      ContiguousKvCache::Create(d.weights->config(), d.weights->plan(), d.t_count);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  if (!cache.ok()) std::abort();
  return std::move(cache).value();
}

// Stores the golden compressed KV and index keys of kv source s after the prompt.
void StoreGoldenEntries(const CaseData& d, int32_t s, ContiguousKvCache& cache) {
  const ModelConfig& c = d.weights->config();
  const std::vector<float> kv =
      ReadGolden(d.dir + "/compressed_kv_L" + std::to_string(s) + ".npy").ToFloat();
  const std::vector<float> k =
      ReadGolden(d.dir + "/index_k_L" + std::to_string(s) + ".npy").ToFloat();
  const int64_t n = static_cast<int64_t>(k.size()) / c.index_head_dim;
  for (int64_t j = 0; j < n; ++j) {
    cache.SetEntry(s, static_cast<int32_t>(j),
                   std::span<const float>(kv).subspan(j * c.head_dim, c.head_dim),
                   std::span<const float>(k).subspan(j * c.index_head_dim, c.index_head_dim));
  }
}

// Runs kv source s's Compressor over attn_in[s] (one-shot prefill) into `cache`.
void RunCompressor(const CaseData& d, int32_t s, ContiguousKvCache& cache, ExecContext& ctx) {
  const LayerRole& role = d.weights->plan().layers[s];
  Result<std::unique_ptr<Compressor>> comp =
      Compressor::Create(*d.weights, "layers." + std::to_string(s) + ".attn", role);
  EXPECT_TRUE(comp.ok()) << comp.status().ToString();
  if (!comp.ok()) std::abort();
  const BatchRequest request[] = {cache.Request(0, static_cast<int32_t>(d.t_count), 0)};
  (*comp)->Forward(d.LayerInput(s), request, cache.view(), ctx);
}

// The layer's query latent (the attention's wq_a and q_norm, which the indexer shares).
std::vector<float> QueryLatent(const ModelWeights& weights, int32_t l, std::span<const float> x,
                               ExecContext& ctx) {
  Result<std::unique_ptr<Attention>> attention = Attention::Create(weights, l);
  EXPECT_TRUE(attention.ok()) << attention.status().ToString();
  if (!attention.ok()) std::abort();
  const int64_t t = static_cast<int64_t>(x.size()) / weights.config().hidden_size;
  std::vector<float> qr(t * weights.config().q_lora_rank);
  (*attention)->QueryLatent(x, static_cast<int32_t>(t), qr, ctx);
  return qr;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || a == b; }

class IndexerGoldenTest : public testing::TestWithParam<GoldenCase> {};

// Every index source of the plan, in plan order (the candidate source before its filters), on
// the golden attn_in[l] and the golden index keys of its kv source: scores (bf16, exact),
// top-k, tie flags and the candidate mask equal the goldens at every stable position.
TEST_P(IndexerGoldenTest, ScoresTopKTiesAndCandidatesMatch) {
  const GoldenCase& gc = GetParam();
  const CaseData d = LoadCase(gc);
  const ModelConfig& c = d.weights->config();
  const int64_t t = d.t_count;
  OwnedExecContext exec(2);
  ExecContext& ctx = exec.ctx;
  ContiguousKvCache cache = NewCache(d);
  std::map<int32_t, bool> stored;  // kv sources whose golden entries are in the cache
  const BatchRequest request[] = {cache.Request(0, static_cast<int32_t>(t), 0)};
  std::span<IndexerForwardState> states =
      IndexerForwardState::Create(1, d.weights->plan().layers.size(), ctx.arena);
  IndexerForwardState& state = states[0];
  int num_index_layers = 0;
  for (const LayerRole& role : d.weights->plan().layers) {
    if (!role.is_index_source) continue;
    ++num_index_layers;
    const int32_t l = role.layer;
    const int32_t s = *role.kv_source_layer;
    if (!stored[s]) StoreGoldenEntries(d, s, cache);
    stored[s] = true;
    Result<std::unique_ptr<Indexer>> ix = Indexer::Create(*d.weights, l);
    ASSERT_TRUE(ix.ok()) << ix.status().ToString();
    const std::vector<float> qr = QueryLatent(*d.weights, l, d.LayerInput(l), ctx);
    IndexerDebug debug;
    {
      ScopedForwardObserver watch(ctx, debug);
      (*ix)->Forward(d.LayerInput(l), qr, request, cache.view(), states, ctx);
    }

    const std::string suffix = "_L" + std::to_string(l) + ".npy";
    const NpyArray scores_npy = ReadGolden(d.dir + "/indexer_scores" + suffix);
    const NpyArray topk_npy = ReadGolden(d.dir + "/indexer_topk" + suffix);
    const std::vector<float> want_scores = scores_npy.ToFloat();
    const std::vector<int64_t> want_topk = topk_npy.ToInt64();
    const std::vector<int64_t> want_tie = ReadGolden(d.dir + "/indexer_tie" + suffix).ToInt64();
    const int64_t n = scores_npy.shape[1];
    ASSERT_EQ(n, t / role.ratio);
    ASSERT_EQ(topk_npy.shape, (std::vector<int64_t>{t, c.index_topk}));
    const IndexerForwardState::TopK& got = state.topk[l];
    ASSERT_EQ(got.per_token, c.index_topk);

    int score_mismatch = 0, topk_mismatch = 0, tie_mismatch = 0, cand_mismatch = 0, ties = 0;
    std::vector<int64_t> want_cand;
    if (role.candidate_mode == CandidateMode::kProduce) {
      want_cand = ReadGolden(d.dir + "/candidates" + suffix).ToInt64();
    }
    for (int64_t p = 0; p < t; ++p) {
      if (!d.stable[p]) continue;
      for (int64_t e = 0; e < n; ++e) {
        if (!SameBits(debug.scores[p * n + e], want_scores[p * n + e])) {
          if (score_mismatch == 0) {
            ADD_FAILURE() << gc.config << "/" << gc.prompt << " layer " << l << " position " << p
                          << " entry " << e << ": score " << debug.scores[p * n + e] << ", want "
                          << want_scores[p * n + e];
          }
          ++score_mismatch;
        }
      }
      for (int64_t k = 0; k < c.index_topk; ++k) {
        topk_mismatch += got.entries[p * c.index_topk + k] != want_topk[p * c.index_topk + k];
      }
      ties += want_tie[p] != 0;
      tie_mismatch += debug.tie[p] != want_tie[p];
      if (!want_cand.empty()) {
        // The golden mask is over visible entries; ours also marks the invisible tail of the
        // pinned block (harmless: those entries are −inf anyway).
        const int64_t visible = (p + 1) / role.ratio;
        const IndexerForwardState::Candidates& cand = state.candidates[l];
        std::vector<uint8_t> row(static_cast<size_t>(n));
        cand.RowMask(p, row);
        for (int64_t e = 0; e < n; ++e) {
          const int64_t mine = e < visible ? row[e] : 0;
          cand_mismatch += mine != want_cand[p * n + e];
        }
      }
    }
    std::printf(
        "%s/%s layer %d (%s, %s): %d stable of %lld positions, %lld entries; mismatches: "
        "scores %d, top-k %d, tie flags %d (golden ties %d), candidates %d\n",
        gc.config, gc.prompt, l, std::string(LayerModeName(role.mode)).c_str(),
        std::string(CandidateModeName(role.candidate_mode)).c_str(), d.num_stable,
        static_cast<long long>(t), static_cast<long long>(n), score_mismatch, topk_mismatch,
        tie_mismatch, ties, cand_mismatch);
    EXPECT_EQ(score_mismatch, 0) << "layer " << l;
    EXPECT_EQ(topk_mismatch, 0) << "layer " << l;
    EXPECT_EQ(tie_mismatch, 0) << "layer " << l;
    EXPECT_EQ(cand_mismatch, 0) << "layer " << l;
  }
  EXPECT_GT(num_index_layers, 0);
}

// The whole chain from attn_in: the Compressor's caches agree with the golden caches, the indexer
// on them gives the golden top-k, and every Full / Reindex / Reuse layer's attention on that
// selection reproduces attn_out[l] (within 1e-3 at stable positions).
TEST_P(IndexerGoldenTest, AttentionOnTheIndexerSelectionMatchesAttnOut) {
  const GoldenCase& gc = GetParam();
  const CaseData d = LoadCase(gc);
  const ModelConfig& c = d.weights->config();
  const int64_t t = d.t_count;
  const int64_t hidden = c.hidden_size;
  const std::vector<float> want_out = ReadGolden(d.dir + "/attn_out.npy").ToFloat();
  OwnedExecContext exec(2);
  ExecContext& ctx = exec.ctx;
  ContiguousKvCache cache = NewCache(d);
  std::map<int32_t, bool> compressed;
  const BatchRequest request[] = {cache.Request(0, static_cast<int32_t>(t), 0)};
  std::span<IndexerForwardState> states =
      IndexerForwardState::Create(1, d.weights->plan().layers.size(), ctx.arena);
  IndexerForwardState& state = states[0];
  int num_layers = 0;
  for (const LayerRole& role : d.weights->plan().layers) {
    if (role.ratio == 0) continue;
    ++num_layers;
    const int32_t l = role.layer;
    const int32_t s = *role.kv_source_layer;
    if (!compressed[s]) {
      RunCompressor(d, s, cache, ctx);
      compressed[s] = true;
      ContiguousKvCache golden = NewCache(d);
      StoreGoldenEntries(d, s, golden);
      for (int32_t j = 0; j < t / d.weights->plan().layers[s].ratio; ++j) {
        EXPECT_EQ(cache.IndexKey(s, j), golden.IndexKey(s, j)) << "kv source " << s;
      }
    }
    if (role.is_index_source) {
      Result<std::unique_ptr<Indexer>> ix = Indexer::Create(*d.weights, l);
      ASSERT_TRUE(ix.ok()) << ix.status().ToString();
      const std::vector<float> qr = QueryLatent(*d.weights, l, d.LayerInput(l), ctx);
      (*ix)->Forward(d.LayerInput(l), qr, request, cache.view(), states, ctx);
      const std::vector<int64_t> want_topk =
          ReadGolden(d.dir + "/indexer_topk_L" + std::to_string(l) + ".npy").ToInt64();
      const IndexerForwardState::TopK& got = state.topk[l];
      for (int64_t p = 0; p < t; ++p) {
        if (!d.stable[p]) continue;
        for (int64_t k = 0; k < got.per_token; ++k) {
          EXPECT_EQ(got.entries[p * got.per_token + k], want_topk[p * got.per_token + k])
              << "layer " << l << " position " << p;
        }
      }
    }
    Result<std::unique_ptr<Attention>> attention = Attention::Create(*d.weights, l);
    ASSERT_TRUE(attention.ok()) << attention.status().ToString();
    const CompressedSelection selection[] = {state.SelectionFor(role)};
    std::vector<float> qr(t * c.q_lora_rank);
    (*attention)->QueryLatent(d.LayerInput(l), static_cast<int32_t>(t), qr, ctx);
    std::vector<float> out(t * hidden);
    (*attention)->Forward(d.LayerInput(l), qr, request, cache.view(), selection, out, ctx);
    double max_err = 0;
    for (int64_t p = 0; p < t; ++p) {
      if (!d.stable[p]) continue;
      for (int64_t i = 0; i < hidden; ++i) {
        max_err = std::max<double>(
            max_err, std::fabs(out[p * hidden + i] - want_out[(l * t + p) * hidden + i]));
      }
    }
    std::printf("%s/%s layer %d (%s): max |attn_out err| %.3g at %d stable positions\n", gc.config,
                gc.prompt, l, std::string(LayerModeName(role.mode)).c_str(), max_err, d.num_stable);
    EXPECT_LE(max_err, 1e-3) << "layer " << l;
  }
  EXPECT_GT(num_layers, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Goldens, IndexerGoldenTest,
    testing::Values(GoldenCase{"tiny-a", "chat5"}, GoldenCase{"tiny-a", "mix40"},
                    GoldenCase{"tiny-a", "long120"}, GoldenCase{"tiny-b", "chat5"},
                    GoldenCase{"tiny-b", "mix40"}, GoldenCase{"tiny-b", "long120"},
                    GoldenCase{"tiny-c", "chat5"}, GoldenCase{"tiny-c", "mix40"},
                    GoldenCase{"tiny-c", "long120"}),
    CaseName);

// model.md §7.9: a one-shot prefill, chunks and token-by-token decode select the same entries
// (absolute positions; the keys include the entries completed earlier in the chunk). tiny-c has
// window 8, top-k 4 and 3 candidate blocks of 2, so the filter is active. The thread count does
// not matter either.
TEST(IndexerTest, ChunksDecodeAndThreadCountsSelectLikeOneShotPrefill) {
  const CaseData d = LoadCase(GoldenCase{"tiny-c", "long120"});
  const ModelConfig& c = d.weights->config();
  const int64_t hidden = c.hidden_size;
  const int64_t t = d.t_count;
  OwnedExecContext exec(2);
  ExecContext& ctx = exec.ctx;

  // Runs every kv source's compressor and every index source over the given chunks; returns the
  // concatenated top-k lists per index source.
  auto run = [&](const std::vector<int64_t>& chunks, ExecContext& run_ctx) {
    std::map<int32_t, std::unique_ptr<Compressor>> compressors;
    std::map<int32_t, std::unique_ptr<Attention>> attentions;
    std::map<int32_t, std::unique_ptr<Indexer>> indexers;
    ContiguousKvCache cache = NewCache(d);
    std::map<int32_t, std::vector<int32_t>> all_topk;
    for (const LayerRole& role : d.weights->plan().layers) {
      if (role.is_kv_source) {
        auto comp =
            Compressor::Create(*d.weights, "layers." + std::to_string(role.layer) + ".attn", role);
        EXPECT_TRUE(comp.ok());
        compressors.emplace(role.layer, std::move(comp).value());
      }
      if (role.is_index_source) {
        auto ix = Indexer::Create(*d.weights, role.layer);
        EXPECT_TRUE(ix.ok());
        indexers.emplace(role.layer, std::move(ix).value());
        auto attention = Attention::Create(*d.weights, role.layer);
        EXPECT_TRUE(attention.ok());
        attentions.emplace(role.layer, std::move(attention).value());
      }
    }
    int64_t begin = 0;
    for (int64_t n : chunks) {
      std::span<IndexerForwardState> states =
          IndexerForwardState::Create(1, d.weights->plan().layers.size(), run_ctx.arena);
      const BatchRequest request[] = {
          cache.Request(0, static_cast<int32_t>(n), static_cast<int32_t>(begin))};
      for (const LayerRole& role : d.weights->plan().layers) {
        const int32_t l = role.layer;
        std::span<const float> x = d.LayerInput(l).subspan(begin * hidden, n * hidden);
        if (role.is_kv_source) {
          compressors.at(l)->Forward(x, request, cache.view(), run_ctx);
        }
        if (role.is_index_source) {
          std::vector<float> qr(n * c.q_lora_rank);
          attentions.at(l)->QueryLatent(x, static_cast<int32_t>(n), qr, run_ctx);
          indexers.at(l)->Forward(x, qr, request, cache.view(), states, run_ctx);
          const std::span<const int32_t> e = states[0].topk[l].entries;
          all_topk[l].insert(all_topk[l].end(), e.begin(), e.end());
        }
      }
      begin += n;
    }
    EXPECT_EQ(begin, t);
    return all_topk;
  };
  const auto one_shot = run({t}, ctx);
  std::vector<int64_t> chunked = {37, 1, 1, 20};  // then one-token decode steps to the end
  for (int64_t p = 59; p < t; ++p) chunked.push_back(1);
  const auto chunks = run(chunked, ctx);
  ASSERT_EQ(one_shot.size(), 4u);
  EXPECT_EQ(chunks, one_shot);
  // One thread (no pool) gives the same lists as two.
  OwnedExecContext serial(1);
  EXPECT_EQ(run({t}, serial.ctx), one_shot);
}

// The official index-key slot (model/index_key_slot.h) on one decode step of tiny-c (layers 2, 4
// ratio 2; 6 ratio 1, the candidate source; 8 its filter): at an even position the ratio-2
// indexers score layer 6's keys as their own entries — exactly what the clean indexer computes
// on a cache whose layer-2/4 index keys are layer 6's first rows — and every other step and layer
// is unchanged.
TEST(IndexerTest, OfficialIndexKeySlotScoresTheLastPublishedKeysAtEvenDecodeSteps) {
  const CaseData d = LoadCase(GoldenCase{"tiny-c", "long120"});
  const ModelConfig& c = d.weights->config();
  const int64_t hidden = c.hidden_size;
  OwnedExecContext exec(1);
  ExecContext& ctx = exec.ctx;
  ContiguousKvCache cache = NewCache(d);
  ContiguousKvCache swapped = NewCache(d);  // layer 2 and 4 index keys := layer 6's
  for (const LayerRole& role : d.weights->plan().layers) {
    if (role.is_kv_source) RunCompressor(d, role.layer, cache, ctx);
  }
  for (const LayerRole& role : d.weights->plan().layers) {
    if (!role.is_kv_source) continue;
    for (int32_t j = 0; j < d.t_count / role.ratio; ++j) {
      const int32_t key_layer = role.ratio == 2 ? 6 : role.layer;
      swapped.SetEntry(role.layer, j, cache.KvEntry(role.layer, j), cache.IndexKey(key_layer, j));
    }
  }
  // Every index source's scores and top-k for the one-token step at `p`.
  struct Scores final : ForwardObserver {
    std::map<int32_t, std::vector<float>> by_layer;
    bool WantsIndexerScores() const override { return true; }
    void OnIndexerScores(int32_t layer, size_t, std::span<const float> s,
                         std::span<const uint8_t>) override {
      by_layer[layer].assign(s.begin(), s.end());
    }
  };
  auto step = [&](ContiguousKvCache& kv, int32_t p, bool official) {
    ctx.official_index_key_slot = official;
    Scores scores;
    ScopedForwardObserver watch(ctx, scores);
    std::map<int32_t, std::vector<int32_t>> topk;
    std::span<IndexerForwardState> states =
        IndexerForwardState::Create(1, d.weights->plan().layers.size(), ctx.arena);
    const BatchRequest request[] = {kv.Request(0, 1, p)};
    for (const LayerRole& role : d.weights->plan().layers) {
      if (!role.is_index_source) continue;
      const auto x = d.LayerInput(role.layer).subspan(p * hidden, hidden);
      const std::vector<float> qr = QueryLatent(*d.weights, role.layer, x, ctx);
      auto ix = Indexer::Create(*d.weights, role.layer);
      EXPECT_TRUE(ix.ok());
      (*ix)->Forward(x, qr, request, kv.view(), states, ctx);
      const std::span<const int32_t> e = states[0].topk[role.layer].entries;
      topk[role.layer].assign(e.begin(), e.end());
    }
    ctx.official_index_key_slot = false;
    return std::make_pair(scores.by_layer, topk);
  };
  int changed_topk = 0;
  for (int32_t p : {100, 101, 110, 111, 118, 119}) {
    const auto clean = step(cache, p, false);
    const auto official = step(cache, p, true);
    if (p % 2 == 1) {
      EXPECT_EQ(official, clean) << "odd position " << p << " completes every group";
      continue;
    }
    const auto expected = step(swapped, p, false);
    for (int32_t l : {2, 4}) {
      EXPECT_EQ(official.first.at(l), expected.first.at(l)) << "layer " << l << " p " << p;
      EXPECT_EQ(official.second.at(l), expected.second.at(l)) << "layer " << l << " p " << p;
      EXPECT_NE(official.first.at(l), clean.first.at(l)) << "layer " << l << " p " << p;
      changed_topk += official.second.at(l) != clean.second.at(l);
    }
    for (int32_t l : {6, 8}) {
      EXPECT_EQ(official.first.at(l), clean.first.at(l)) << "layer " << l << " p " << p;
      EXPECT_EQ(official.second.at(l), clean.second.at(l)) << "layer " << l << " p " << p;
    }
  }
  EXPECT_GT(changed_topk, 0) << "the borrowed keys never changed a selection";
}

TEST(IndexerTest, CreateRejectsALayerThatIsNotAnIndexSource) {
  const ModelWeights& weights = LoadGolden("tiny-a");
  for (int32_t l : {0, 3}) {  // swa, reuse
    Result<std::unique_ptr<Indexer>> ix = Indexer::Create(weights, l);
    ASSERT_FALSE(ix.ok()) << "layer " << l;
    EXPECT_NE(ix.status().ToString().find("not an index source"), std::string::npos);
  }
  EXPECT_FALSE(Indexer::Create(weights, 99).ok());
}

}  // namespace
}  // namespace dsv41

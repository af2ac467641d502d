#include "model/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/npy.h"
#include "base/thread_pool.h"
#include "kv/kv_layout.h"
#include "model/compressor.h"
#include "model/rope.h"
#include "model/weights.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model";

// ---- RoPE tables (model.md §6.2) -------------------------------------------------------------

YarnConfig ReleasedYarn() {
  return YarnConfig{
      .factor = 16, .original_max_position_embeddings = 65536, .beta_fast = 32, .beta_slow = 1};
}

TEST(RopeTest, MainTableHitsExactPowersOfTen) {
  // theta = 10000, d = 64: pairs 8, 16, 24 have exponents 1/4, 1/2, 3/4, so theta^e is exactly
  // 10, 100, 1000 and inv_freq is the fp32 reciprocal of that.
  std::vector<float> f = RopeInvFreq(64, 10000.0, YarnConfig{});
  ASSERT_EQ(f.size(), 32u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[8], 1.0f / 10.0f);
  EXPECT_EQ(f[16], 1.0f / 100.0f);
  EXPECT_EQ(f[24], 1.0f / 1000.0f);
  // The spec's printed values (§6.2 table, 7 digits).
  EXPECT_NEAR(f[1], 7.498942e-1, 1e-7);
  EXPECT_NEAR(f[4], 3.162278e-1, 1e-7);
  EXPECT_NEAR(f[15], 1.333521e-2, 1e-8);
  EXPECT_NEAR(f[31], 1.333521e-4, 1e-10);
}

TEST(RopeTest, YarnRampBoundsOfTheReleaseAndTheTinyFixtures) {
  // §6.2: corr(32) = 15.4533, corr(1) = 24.7084 for d = 64, theta = 160000.
  YarnRampBounds release = ComputeYarnRampBounds(64, 160000.0, ReleasedYarn());
  EXPECT_EQ(release.low, 15);
  EXPECT_EQ(release.high, 25);
  // d = 16 (tiny-a/c): corr(32) = 16·ln(65536/64π)/(2·ln 160000) = 3.863, corr(1) = 6.177.
  YarnRampBounds tiny = ComputeYarnRampBounds(16, 160000.0, ReleasedYarn());
  EXPECT_EQ(tiny.low, 3);
  EXPECT_EQ(tiny.high, 7);
}

TEST(RopeTest, CompressTableKeepsLowPairsAndDividesHighPairsByTheFactor) {
  std::vector<float> base = RopeInvFreq(64, 160000.0, YarnConfig{});
  std::vector<float> f = RopeInvFreq(64, 160000.0, ReleasedYarn());
  ASSERT_EQ(f.size(), 32u);
  // 160000^(1/4) = 20 exactly.
  EXPECT_EQ(base[8], 1.0f / 20.0f);
  // At and below low = 15 the ramp is 0: keep = 1, the blend is exactly the base frequency.
  for (int i = 0; i <= 15; ++i) EXPECT_EQ(f[i], base[i]) << "pair " << i;
  // At and above high = 25 the ramp is 1: keep = 0, exactly base / 16 (a power of two).
  for (int i = 25; i < 32; ++i) EXPECT_EQ(f[i], base[i] / 16.0f) << "pair " << i;
  // The spec's printed values inside the ramp and at its ends.
  EXPECT_NEAR(f[1], 6.876560e-1, 1e-7);
  EXPECT_NEAR(f[15], 3.635539e-3, 1e-9);
  EXPECT_NEAR(f[16], 2.265625e-3, 1e-9);
  EXPECT_NEAR(f[17], 1.396801e-3, 1e-9);
  EXPECT_NEAR(f[20], 2.969778e-4, 1e-10);
  EXPECT_NEAR(f[24], 1.953125e-5, 1e-11);
  EXPECT_NEAR(f[25], 5.372313e-6, 1e-12);
  EXPECT_NEAR(f[31], 5.680529e-7, 1e-13);
}

TEST(RopeTest, ConfigTablesFollowThePlan) {
  ModelConfig c;
  c.qk_rope_head_dim = 16;
  c.rope_theta = 10000;
  c.compress_rope_theta = 160000;
  c.compress_yarn = ReleasedYarn();
  Rope main = Rope::ForTable(c, RopeTable::kMain);
  Rope compress = Rope::ForTable(c, RopeTable::kCompress);
  EXPECT_EQ(main.rope_dim(), 16);
  std::vector<float> want_main = RopeInvFreq(16, 10000, YarnConfig{});
  std::vector<float> want_compress = RopeInvFreq(16, 160000, ReleasedYarn());
  EXPECT_EQ(std::vector<float>(main.inv_freq().begin(), main.inv_freq().end()), want_main);
  EXPECT_EQ(std::vector<float>(compress.inv_freq().begin(), compress.inv_freq().end()),
            want_compress);
  // d = 16: pair 7 is at high = 7, so it is divided by 16; pair 3 = low keeps its base.
  std::vector<float> base = RopeInvFreq(16, 160000, YarnConfig{});
  EXPECT_EQ(want_compress[7], base[7] / 16.0f);
  EXPECT_EQ(want_compress[3], base[3]);
  EXPECT_NE(want_compress[5], base[5]);
}

// ---- Rotation (model.md §6.1) -----------------------------------------------------------------

TEST(RopeTest, RotatesTrailingPairsAndLeavesTheLeadingDims) {
  Rope rope(4, 10000.0, YarnConfig{});  // inv_freq = {1, 1/100}
  ASSERT_EQ(rope.inv_freq()[1], 0.01f);
  // 6 dims: 2 pass through, then pairs (1, 0) and (0, 2).
  std::vector<float> v = {0.3f, -7.0f, 1.0f, 0.0f, 0.0f, 2.0f};
  rope.Rotate(v, 1, /*inverse=*/false);
  EXPECT_EQ(v[0], 0.3f);
  EXPECT_EQ(v[1], -7.0f);
  // Pair 0, angle 1 rad: (1, 0) -> (cos 1, sin 1) = (0.5403023, 0.8414710), rounded to bf16.
  EXPECT_EQ(v[2], Bf16Round(0.5403023f));
  EXPECT_EQ(v[3], Bf16Round(0.84147098f));
  // Pair 1, angle 0.01 rad: (0, 2) -> (−2 sin 0.01, 2 cos 0.01) = (−0.019999667, 1.99990000).
  EXPECT_EQ(v[4], Bf16Round(-0.019999667f));
  EXPECT_EQ(v[5], Bf16Round(1.9999f));
}

TEST(RopeTest, PositionZeroIsTheBf16Identity) {
  Rope rope(8, 10000.0, YarnConfig{});
  std::vector<float> v = {0.5f, -1.25f, 3.0f, 0.125f, -2.0f, 1.0f, 0.75f, -0.5f};
  std::vector<float> before = v;
  rope.Rotate(v, 0, false);
  EXPECT_EQ(v, before);
}

TEST(RopeTest, InverseUndoesTheRotationUpToBf16Rounding) {
  Rope rope(16, 160000.0, ReleasedYarn());
  std::vector<float> original(32);
  for (int i = 0; i < 32; ++i) original[i] = Bf16Round(0.1f * static_cast<float>(i) - 1.3f);
  for (int32_t pos : {1, 17, 1000, 65535}) {
    std::vector<float> v(original.begin(), original.end());
    rope.Rotate(v, pos, false);
    EXPECT_NE(v, original) << "pos " << pos;
    rope.Rotate(v, pos, true);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(v[i], original[i]);
    // Two bf16 roundings of values up to |2|: at most a few bf16 ulps (2^-7 relative).
    for (int i = 16; i < 32; ++i) EXPECT_NEAR(v[i], original[i], 0.03) << "pos " << pos;
  }
}

TEST(RopeTest, AngleIsTheFp32ProductOfPositionAndFrequency) {
  Rope rope(64, 10000.0, YarnConfig{});
  std::vector<float> cos(32), sin(32);
  rope.Angles(123457, cos, sin);
  const float angle = 123457.0f * rope.inv_freq()[1];  // one fp32 rounding
  EXPECT_EQ(cos[1], static_cast<float>(std::cos(static_cast<double>(angle))));
  EXPECT_EQ(sin[1], static_cast<float>(std::sin(static_cast<double>(angle))));
}

// ---- SinkAttention (model.md §7.6) -------------------------------------------------------------

TEST(SinkAttentionTest, OneKeyWithAVeryNegativeSinkReturnsTheKey) {
  std::vector<float> q = {1.0f, 0.0f};
  std::vector<float> k = {0.5f, -2.0f};
  const float* keys[] = {k.data()};
  std::vector<float> out(2);
  // p = exp(0) = 1, den = 1 + exp(−100 − s) ≈ 1: out = bf16(k).
  SinkAttention(q, keys, -100.0f, 1.0f, out);
  EXPECT_EQ(out, k);
}

TEST(SinkAttentionTest, SinkEnlargesOnlyTheDenominator) {
  // Two equal scores and sink = s: den = 2·1 + exp(s − s) = 3, so out = (k0 + k1) / 3.
  std::vector<float> q = {1.0f, 1.0f};
  std::vector<float> k0 = {1.0f, 1.0f};
  std::vector<float> k1 = {1.0f, 1.0f};
  const float* keys[] = {k0.data(), k1.data()};
  std::vector<float> out(2);
  SinkAttention(q, keys, /*sink=*/1.0f, /*scale=*/0.5f, out);  // s = 2 · 0.5 = 1 = sink
  EXPECT_EQ(out[0], Bf16Round(2.0f / 3.0f));
  EXPECT_EQ(out[1], Bf16Round(2.0f / 3.0f));
}

TEST(SinkAttentionTest, ProbabilitiesAreBf16ForTheValueProductOnly) {
  // Scores 0 and ln-ish: p1 = exp(−0.3) = 0.7408182 (bf16: 0.7421875). The value product uses the
  // bf16 probability, the denominator the fp32 one.
  std::vector<float> q = {1.0f};
  std::vector<float> k0 = {0.0f};
  std::vector<float> k1 = {-0.3f};
  const float* keys[] = {k0.data(), k1.data()};
  std::vector<float> out(1);
  SinkAttention(q, keys, -1000.0f, 1.0f, out);
  // m = 0: p0 = 1 (value 0), p1 = exp(−0.3); acc = bf16(p1)·(−0.3); den = 1 + p1.
  const float p1 = static_cast<float>(std::exp(-0.30000001192092896));
  const float acc = Bf16Round(p1) * -0.3f;
  EXPECT_EQ(out[0], Bf16Round(acc / (1.0f + p1)));
}

TEST(SinkAttentionTest, SixtyFiveKeysSpanTwoBlocks) {
  // 65 identical keys: every p = 1 in both blocks (the max does not change), den = 65 + e^(sink−s).
  std::vector<float> q = {0.0f, 0.0f};
  std::vector<float> k = {1.0f, -1.0f};
  std::vector<const float*> keys(65, k.data());
  std::vector<float> out(2);
  SinkAttention(q, keys, 0.0f, 1.0f, out);
  EXPECT_EQ(out[0], Bf16Round(65.0f / 66.0f));
  EXPECT_EQ(out[1], Bf16Round(-65.0f / 66.0f));
}

TEST(SinkAttentionTest, ThreeBlocksAgreeWithTheExactSoftmaxToBf16Precision) {
  // 150 keys (blocks of 64, 64, 22) whose scores rise in later blocks, so the running max and the
  // rescaling α matter; compare with the softmax evaluated in double over all keys and the sink.
  const int dim = 4;
  std::vector<float> q = {0.5f, -0.25f, 1.0f, 0.125f};
  std::vector<std::vector<float>> rows(150, std::vector<float>(dim));
  for (int k = 0; k < 150; ++k) {
    for (int d = 0; d < dim; ++d) {
      rows[k][d] = Bf16Round(static_cast<float>(((k * 7 + d * 13) % 17) - 8) * 0.25f +
                             (d == 2 ? 0.05f * static_cast<float>(k) : 0.0f));
    }
  }
  std::vector<const float*> keys;
  for (const auto& r : rows) keys.push_back(r.data());
  const float sink = 2.0f;
  const float scale = 0.7f;
  std::vector<float> out(dim);
  SinkAttention(q, keys, sink, scale, out);

  std::vector<double> s(150);
  double mx = sink;
  for (int k = 0; k < 150; ++k) {
    double dot = 0;
    for (int d = 0; d < dim; ++d) dot += static_cast<double>(q[d]) * rows[k][d];
    s[k] = dot * scale;
    mx = std::max(mx, s[k]);
  }
  double den = std::exp(sink - mx);
  std::vector<double> num(dim, 0.0);
  for (int k = 0; k < 150; ++k) {
    const double p = std::exp(s[k] - mx);
    den += p;
    for (int d = 0; d < dim; ++d) num[d] += p * rows[k][d];
  }
  for (int d = 0; d < dim; ++d) {
    const double want = num[d] / den;
    // bf16 output and bf16 probabilities: a few parts in 2^8.
    EXPECT_NEAR(out[d], want, 0.02 * std::fabs(want) + 1e-3) << "dim " << d;
  }
}

TEST(SinkAttentionTest, ScoresAreExactDotProducts) {
  // q·k = 2^60 + 1 − 2^60 = 1 exactly; a double running sum would lose the 1 and give 0.
  // s = 1, one key: den = 1 + exp(sink − s) = 1 + e^-1, out = bf16(k / den).
  std::vector<float> q = {1.0f, 1.0f, 1.0f};
  std::vector<float> k = {0x1p60f, 1.0f, -0x1p60f};
  const float* keys[] = {k.data()};
  std::vector<float> out(3);
  SinkAttention(q, keys, /*sink=*/0.0f, /*scale=*/1.0f, out);
  const float den = 1.0f + 0.36787944f;
  EXPECT_EQ(out[1], Bf16Round(1.0f / den));
}

TEST(SinkAttentionTest, TheValueProductIsAnExactSum) {
  // Three keys with equal scores: Σ p·k over dim 0 = 2^60 + 1 − 2^60 = 1 exactly (sequential
  // double would give 0); den = 3 + e^-100 → 3.
  std::vector<float> q = {0.0f};
  std::vector<float> k0 = {0x1p60f};
  std::vector<float> k1 = {1.0f};
  std::vector<float> k2 = {-0x1p60f};
  const float* keys[] = {k0.data(), k1.data(), k2.data()};
  std::vector<float> out(1);
  SinkAttention(q, keys, -100.0f, 1.0f, out);
  EXPECT_EQ(out[0], Bf16Round(1.0f / 3.0f));
}

// ---- Golden SWA-only layers: attn_in -> attn_out, swa_kv ----------------------------------------

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

class AttentionGoldenTest : public testing::TestWithParam<GoldenCase> {};

// Every layer's attention(attn_in[l]) against attn_out[l] and swa_kv[l]. SWA-only layers run
// alone; ratio > 0 layers attend the compressed cache their kv source's Compressor builds from
// attn_in[source] and the golden top-k of their index source (indexer_topk_L<i>), since the
// indexer is not part of this code yet.
TEST_P(AttentionGoldenTest, LayersMatchAttnOutAndSwaKv) {
  const GoldenCase& gc = GetParam();
  const ModelWeights& weights = LoadGolden(gc.config);
  const ModelConfig& c = weights.config();
  const std::string dir = kGoldens + "/cases/" + gc.config + "/" + gc.prompt;
  const NpyArray attn_in = ReadGolden(dir + "/attn_in.npy");
  const NpyArray attn_out = ReadGolden(dir + "/attn_out.npy");
  const NpyArray swa_kv = ReadGolden(dir + "/swa_kv.npy");
  const NpyArray stability = ReadGolden(dir + "/stability_gemm32.npy");
  const int64_t t_count = attn_in.shape[1];
  const int64_t hidden = c.hidden_size;
  ASSERT_EQ(attn_in.shape, (std::vector<int64_t>{c.num_hidden_layers, t_count, hidden}));
  ASSERT_EQ(swa_kv.shape, (std::vector<int64_t>{c.num_hidden_layers, t_count, c.head_dim}));
  const std::vector<float> in = attn_in.ToFloat();
  const std::vector<float> want = attn_out.ToFloat();
  const std::vector<float> want_kv = swa_kv.ToFloat();
  const std::vector<float> stable_measure = stability.ToFloat();

  OwnedExecContext exec(2);
  int num_swa_layers = 0;
  // One contiguous cache holds every layer's window rows and the kv sources' entries.
  Result<ContiguousKvCache> cache = ContiguousKvCache::Create(c, weights.plan(), t_count);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  const BatchRequest request[] = {cache->Request(0, static_cast<int32_t>(t_count), 0)};
  std::map<int32_t, bool> compressed;  // kv sources whose entries are in the cache
  for (const LayerRole& role : weights.plan().layers) {
    num_swa_layers += role.mode == LayerMode::kSwaOnly;
    const int32_t l = role.layer;
    Result<std::unique_ptr<Attention>> attention = Attention::Create(weights, l);
    ASSERT_TRUE(attention.ok()) << attention.status().ToString();

    std::vector<CompressedSelection> selection;
    std::vector<int32_t> topk;
    if (role.ratio > 0) {
      const int32_t s = *role.kv_source_layer;
      if (!compressed[s]) {
        const LayerRole& source = weights.plan().layers[s];
        Result<std::unique_ptr<Compressor>> comp =
            Compressor::Create(weights, "layers." + std::to_string(s) + ".attn", source);
        ASSERT_TRUE(comp.ok()) << comp.status().ToString();
        (*comp)->Forward(std::span<const float>(in).subspan(s * t_count * hidden, t_count * hidden),
                         request, cache->view(), exec.ctx);
        compressed[s] = true;
      }
      const NpyArray golden_topk =
          ReadGolden(dir + "/indexer_topk_L" + std::to_string(*role.index_source_layer) + ".npy");
      ASSERT_EQ(golden_topk.shape.size(), 2u);
      for (int64_t id : golden_topk.ToInt64()) topk.push_back(static_cast<int32_t>(id));
      selection.push_back(CompressedSelection{
          .entries = topk, .per_token = static_cast<int32_t>(golden_topk.shape[1])});
    }
    const std::span<const float> x(in.data() + l * t_count * hidden, t_count * hidden);
    std::vector<float> qr(t_count * c.q_lora_rank);
    (*attention)->QueryLatent(x, static_cast<int32_t>(t_count), qr, exec.ctx);
    std::vector<float> out(t_count * hidden);
    (*attention)->Forward(x, qr, request, cache->view(), selection, out, exec.ctx);

    double max_err = 0;
    double max_kv_err = 0;
    double max_err_all = 0;  // every position, unstable ones included (reported only)
    for (int64_t i = 0; i < t_count * hidden; ++i) {
      max_err_all =
          std::max<double>(max_err_all, std::fabs(out[i] - want[l * t_count * hidden + i]));
    }
    int num_stable = 0;
    for (int64_t t = 0; t < t_count; ++t) {
      if (stable_measure[t] > 1e-4f) continue;
      ++num_stable;
      for (int64_t d = 0; d < hidden; ++d) {
        const double err = std::fabs(out[t * hidden + d] - want[(l * t_count + t) * hidden + d]);
        max_err = std::max(max_err, err);
      }
      const std::vector<float> row = cache->SwaRow(l, static_cast<int32_t>(t));
      for (int64_t d = 0; d < c.head_dim; ++d) {
        const double err = std::fabs(row[d] - want_kv[(l * t_count + t) * c.head_dim + d]);
        max_kv_err = std::max(max_kv_err, err);
      }
    }
    std::printf(
        "%s/%s layer %d (%s): %d stable of %lld positions, max |attn_out err| %.3g, "
        "max |swa_kv err| %.3g (all positions: %.3g)\n",
        gc.config, gc.prompt, l, std::string(LayerModeName(role.mode)).c_str(), num_stable,
        static_cast<long long>(t_count), max_err, max_kv_err, max_err_all);
    EXPECT_LE(max_err, 1e-3) << gc.config << "/" << gc.prompt << " layer " << l;
    EXPECT_EQ(max_kv_err, 0.0) << gc.config << "/" << gc.prompt << " layer " << l;
  }
  EXPECT_GT(num_swa_layers, 0);
}

// model.md §7.9: absolute positions make a one-shot prefill, chunks and token-by-token decode
// identical; ParallelFor's split never changes a value (1 thread = 2 threads).
TEST(AttentionTest, ChunksDecodeAndThreadCountsGiveIdenticalBits) {
  const ModelWeights& weights = LoadGolden("tiny-c");  // window 8 < 40 tokens: the window slides
  const ModelConfig& c = weights.config();
  const NpyArray attn_in = ReadGolden(kGoldens + "/cases/tiny-c/mix40/attn_in.npy");
  const int64_t t_count = attn_in.shape[1];
  const int64_t hidden = c.hidden_size;
  const std::vector<float> all_in = attn_in.ToFloat();
  const std::span<const float> in(all_in.data(), t_count * hidden);  // layer 0
  Result<std::unique_ptr<Attention>> attention = Attention::Create(weights, 0);
  ASSERT_TRUE(attention.ok()) << attention.status().ToString();

  Result<ContiguousKvCache> one_shot_cache = ContiguousKvCache::Create(c, weights.plan(), t_count);
  ASSERT_TRUE(one_shot_cache.ok()) << one_shot_cache.status().ToString();
  std::vector<float> qr(t_count * c.q_lora_rank);
  OwnedExecContext serial(1);
  (*attention)->QueryLatent(in, static_cast<int32_t>(t_count), qr, serial.ctx);
  std::vector<float> one_shot(t_count * hidden);
  const BatchRequest whole[] = {one_shot_cache->Request(0, static_cast<int32_t>(t_count), 0)};
  (*attention)->Forward(in, qr, whole, one_shot_cache->view(), {}, one_shot, serial.ctx);

  // Chunks through the packed profile and 4-token blocks: the stored form never changes a bit.
  OwnedExecContext two(2);
  Result<ContiguousKvCache> chunked_cache =
      ContiguousKvCache::Create(c, weights.plan(), t_count, KvProfile::kPacked, 4);
  ASSERT_TRUE(chunked_cache.ok()) << chunked_cache.status().ToString();
  std::vector<float> chunked(t_count * hidden);
  const std::vector<int64_t> chunk_sizes = {13, 1, 9, 1, 1, 15};  // sums to 40
  int64_t begin = 0;
  for (int64_t n : chunk_sizes) {
    const BatchRequest part[] = {
        chunked_cache->Request(0, static_cast<int32_t>(n), static_cast<int32_t>(begin))};
    (*attention)
        ->Forward(in.subspan(begin * hidden, n * hidden),
                  std::span<const float>(qr).subspan(begin * c.q_lora_rank, n * c.q_lora_rank),
                  part, chunked_cache->view(), {},
                  std::span<float>(chunked).subspan(begin * hidden, n * hidden), two.ctx);
    begin += n;
  }
  ASSERT_EQ(begin, t_count);
  EXPECT_EQ(chunked, one_shot);
  for (int32_t p = 0; p < t_count; ++p) {
    EXPECT_EQ(one_shot_cache->SwaRow(0, p), chunked_cache->SwaRow(0, p)) << "position " << p;
  }
}

TEST(AttentionTest, CreateRejectsALayerOutsideThePlan) {
  const ModelWeights& weights = LoadGolden("tiny-a");
  Result<std::unique_ptr<Attention>> a = Attention::Create(weights, 10);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().ToString().find("layer 10"), std::string::npos) << a.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Goldens, AttentionGoldenTest,
    testing::Values(GoldenCase{"tiny-a", "chat5"}, GoldenCase{"tiny-a", "mix40"},
                    GoldenCase{"tiny-a", "long120"}, GoldenCase{"tiny-b", "chat5"},
                    GoldenCase{"tiny-b", "mix40"}, GoldenCase{"tiny-b", "long120"},
                    GoldenCase{"tiny-c", "chat5"}, GoldenCase{"tiny-c", "mix40"},
                    GoldenCase{"tiny-c", "long120"}),
    CaseName);

}  // namespace
}  // namespace dsv41

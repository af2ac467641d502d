// mHC, norms, embedding, final collapse and head against the model goldens: every per-layer array
// that these modules produce is rebuilt from the golden arrays of the modules around them
// (attention and MoE outputs, Engram streams) and compared as goldens/model/README.md says.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "base/npy.h"
#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "model/head.h"
#include "model/mhc.h"
#include "model/norm.h"
#include "model/weights.h"

namespace dsv41 {
namespace {

const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model/";

struct Case {
  const char* config;
  const char* prompt;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.config << "/" << c.prompt; }

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  std::string name = std::string(info.param.config) + "_" + info.param.prompt;
  for (char& c : name) c = (c == '-') ? '_' : c;
  return name;
}

// Comparison tally of one array: positions are stable when stability_gemm32 <= 1e-4.
struct Tally {
  std::string what;
  int64_t values = 0;
  int64_t exact = 0;
  int64_t stable_values = 0;
  int64_t stable_over_tolerance = 0;
  double max_stable_diff = 0.0;
  double max_diff = 0.0;

  void Add(float engine, float golden, bool stable) {
    ++values;
    const bool same = engine == golden || (std::isnan(engine) && std::isnan(golden));
    exact += same ? 1 : 0;
    const double diff = same ? 0.0 : std::fabs(static_cast<double>(engine) - golden);
    const double d = std::isnan(diff) ? INFINITY : diff;
    max_diff = std::max(max_diff, d);
    if (stable) {
      ++stable_values;
      max_stable_diff = std::max(max_stable_diff, d);
      stable_over_tolerance += d > 1e-3 ? 1 : 0;
    }
  }
  void Report() const {
    std::printf("  %-12s %9lld values, %9lld bit-exact, max diff %.3g (stable: %lld, max %.3g)\n",
                what.c_str(), static_cast<long long>(values), static_cast<long long>(exact),
                max_diff, static_cast<long long>(stable_values), max_stable_diff);
  }
};

// The reference's arrays of one case.
struct MhcGoldens {
  std::vector<float> stability, attn_in, attn_out, ffn_in, ffn_out, streams_out, pre_mix,
      engram_streams, final_hidden, logits;
  bool stable(int64_t t) const { return stability[t] <= 1e-4f; }
};

struct MhcTallies {
  Tally attn_in{"attn_in"}, ffn_in{"ffn_in"}, streams{"streams_out"}, pre{"pre_mix"},
      hidden{"final_hidden"}, logits{"logits"}, ref_logits{"logits (ref)"};
};

class MhcGoldenTest : public testing::TestWithParam<Case> {
 protected:
  std::vector<float> Load(const std::string& name) {
    const std::string path = case_dir_ + name + ".npy";
    Result<NpyArray> array = ReadNpy(path);
    EXPECT_TRUE(array.ok()) << array.status().ToString();
    return array.ok() ? array->ToFloat() : std::vector<float>();
  }
  MhcGoldens LoadGoldens() {
    return MhcGoldens{.stability = Load("stability_gemm32"),
                      .attn_in = Load("attn_in"),
                      .attn_out = Load("attn_out"),
                      .ffn_in = Load("ffn_in"),
                      .ffn_out = Load("ffn_out"),
                      .streams_out = Load("streams_out"),
                      .pre_mix = Load("pre_mix"),
                      .engram_streams = Load("engram_streams"),
                      .final_hidden = Load("final_hidden"),
                      .logits = Load("logits")};
  }

  // One block's mHC on the golden streams and sublayer outputs of every token: the attention and
  // FFN inputs, the next pre-mix and the block's output streams against the reference's.
  static void CheckBlock(const ModelWeights& weights, const MhcDims& dims, int64_t layer,
                         int64_t num_tokens, std::span<const float> embedded, const MhcGoldens& g,
                         MhcTallies& tallies) {
    const int64_t hc = dims.hc_mult;
    const int64_t dim = dims.hidden_size;
    const LayerRole& role = weights.plan().layers[layer];
    const std::string prefix = "layers." + std::to_string(layer) + ".";
    Result<MhcWeights> hc_attn = GetMhcWeights(weights, prefix + "hc_attn", dims);
    Result<MhcWeights> hc_ffn = GetMhcWeights(weights, prefix + "hc_ffn", dims);
    Result<NormWeight> attn_norm = GetNormWeight(weights, prefix + "attn_norm.weight", dim);
    Result<NormWeight> ffn_norm = GetNormWeight(weights, prefix + "ffn_norm.weight", dim);
    ASSERT_TRUE(hc_attn.ok() && hc_ffn.ok() && attn_norm.ok() && ffn_norm.ok()) << prefix;
    std::vector<float> x_mid(hc * dim), collapsed(dim), out(hc * dim);
    for (int64_t t = 0; t < num_tokens; ++t) {
      const bool stable = g.stable(t);
      // The streams entering the block: the embedding, the previous block's output, or the
      // Engram-fused streams of this layer (fused before the block, model.md §4.4).
      const float* x_in = layer == 0 ? &embedded[t * hc * dim]
                                     : &g.streams_out[((layer - 1) * num_tokens + t) * hc * dim];
      if (role.engram_slot.has_value()) {
        x_in = &g.engram_streams[(*role.engram_slot * num_tokens + t) * hc * dim];
      }
      const std::span<const float> x(x_in, hc * dim);
      const std::span<const float> pi_in(&g.pre_mix[(layer * num_tokens + t) * hc], hc);
      const int64_t row = (layer * num_tokens + t) * dim;

      HcPre(x, pi_in, collapsed);
      RmsNorm(collapsed, *attn_norm, dims.norm_eps, collapsed);
      for (int64_t d = 0; d < dim; ++d)
        tallies.attn_in.Add(collapsed[d], g.attn_in[row + d], stable);

      const MhcMix mix_attn = ComputeMix(x, *hc_attn, dims);
      HcPost(std::span<const float>(&g.attn_out[row], dim), x, mix_attn, x_mid);
      const MhcMix mix_ffn = ComputeMix(x_mid, *hc_ffn, dims);
      const int64_t next_pre = ((layer + 1) * num_tokens + t) * hc;
      for (int64_t k = 0; k < hc; ++k)
        tallies.pre.Add(mix_ffn.pre[k], g.pre_mix[next_pre + k], stable);

      HcPre(x_mid, mix_attn.pre_span(), collapsed);
      RmsNorm(collapsed, *ffn_norm, dims.norm_eps, collapsed);
      for (int64_t d = 0; d < dim; ++d) tallies.ffn_in.Add(collapsed[d], g.ffn_in[row + d], stable);

      HcPost(std::span<const float>(&g.ffn_out[row], dim), x_mid, mix_ffn, out);
      const int64_t stream_row = (layer * num_tokens + t) * hc * dim;
      for (int64_t i = 0; i < hc * dim; ++i) {
        tallies.streams.Add(out[i], g.streams_out[stream_row + i], stable);
      }
    }
  }

  // The head on the golden last streams: it collapses them with the last FFN pre-mix (pre_mix
  // row L); the final hidden state and the logits (kernel and scalar reference products).
  static void CheckHead(const HeadWeights& head, const MhcDims& dims, int64_t num_layers,
                        int64_t num_tokens, int64_t vocab, const MhcGoldens& g,
                        MhcTallies& tallies) {
    const int64_t hc = dims.hc_mult;
    const int64_t dim = dims.hidden_size;
    std::vector<float> hidden(num_tokens * dim);
    FinalHidden(head, dims,
                std::span<const float>(&g.streams_out[(num_layers - 1) * num_tokens * hc * dim],
                                       num_tokens * hc * dim),
                std::span<const float>(&g.pre_mix[num_layers * num_tokens * hc], num_tokens * hc),
                num_tokens, hidden);
    std::vector<float> engine_logits(num_tokens * vocab);
    OwnedExecContext exec(2);
    HeadLogits(head, hidden, num_tokens, engine_logits, exec.ctx);
    // The scalar reference product (double accumulation) beside the kernel's fast order.
    std::vector<float> ref_logits(num_tokens * vocab);
    LinearRef(head.head, hidden, num_tokens, ref_logits, LinearOptions{});
    for (int64_t t = 0; t < num_tokens; ++t) {
      const bool stable = g.stable(t);
      for (int64_t v = 0; v < vocab; ++v) {
        tallies.ref_logits.Add(ref_logits[t * vocab + v], g.logits[t * vocab + v], stable);
      }
      for (int64_t d = 0; d < dim; ++d) {
        tallies.hidden.Add(hidden[t * dim + d], g.final_hidden[t * dim + d], stable);
      }
      for (int64_t v = 0; v < vocab; ++v) {
        tallies.logits.Add(engine_logits[t * vocab + v], g.logits[t * vocab + v], stable);
      }
    }
  }

  std::string case_dir_;
};

TEST_P(MhcGoldenTest, RebuildsStreamsNormsPreMixesAndLogits) {
  const Case& c = GetParam();
  case_dir_ = kGoldens + "cases/" + c.config + "/" + c.prompt + "/";
  Result<ModelWeights> loaded = ModelWeights::Load(kGoldens + "checkpoints/" + c.config);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const ModelWeights& weights = *loaded;
  const ModelConfig& config = weights.config();
  const MhcDims dims = MhcDimsFromConfig(config);
  const int64_t num_layers = config.num_hidden_layers;
  const int64_t hc = dims.hc_mult;
  const int64_t dim = dims.hidden_size;
  const int64_t vocab = config.vocab_size;

  Result<NpyArray> ids_npy = ReadNpy(case_dir_ + "input_ids.npy");
  ASSERT_TRUE(ids_npy.ok()) << ids_npy.status().ToString();
  std::vector<int32_t> ids;
  for (int64_t id : ids_npy->ToInt64()) ids.push_back(static_cast<int32_t>(id));
  const int64_t num_tokens = static_cast<int64_t>(ids.size());
  const MhcGoldens g = LoadGoldens();
  ASSERT_EQ(static_cast<int64_t>(g.streams_out.size()), num_layers * num_tokens * hc * dim);
  ASSERT_EQ(static_cast<int64_t>(g.pre_mix.size()), (num_layers + 1) * num_tokens * hc);
  ASSERT_EQ(static_cast<int64_t>(g.logits.size()), num_tokens * vocab);

  Result<HeadWeights> head = GetHeadWeights(weights);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  std::vector<float> embedded(num_tokens * hc * dim);
  ASSERT_TRUE(EmbedTokens(*head, ids, dims.hc_mult, embedded).ok());

  MhcTallies tallies;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    CheckBlock(weights, dims, layer, num_tokens, embedded, g, tallies);
    if (HasFatalFailure()) return;
  }
  CheckHead(*head, dims, num_layers, num_tokens, vocab, g, tallies);

  std::printf("%s/%s: %lld tokens, %lld layers\n", c.config, c.prompt,
              static_cast<long long>(num_tokens), static_cast<long long>(num_layers));
  MhcTallies& t = tallies;
  for (const Tally* tally :
       {&t.attn_in, &t.ffn_in, &t.pre, &t.streams, &t.hidden, &t.logits, &t.ref_logits}) {
    tally->Report();
    EXPECT_EQ(tally->stable_over_tolerance, 0) << tally->what << ": max " << tally->max_stable_diff;
  }
  // Everything but the head GEMM is canonical arithmetic (model.md §12.8) on golden inputs, so it
  // is bit-exact at every position, stable or not; only the logits may carry GEMM-order noise.
  for (const Tally* tally : {&t.attn_in, &t.ffn_in, &t.pre, &t.streams, &t.hidden}) {
    EXPECT_EQ(tally->exact, tally->values) << tally->what << ": max diff " << tally->max_diff;
  }
}

TEST(MhcRowsTest, AnyThreadCountGivesComputeMixBits) {
  Result<ModelWeights> weights = ModelWeights::Load(kGoldens + "checkpoints/tiny-a");
  ASSERT_TRUE(weights.ok()) << weights.status().ToString();
  Result<NpyArray> streams_npy = ReadNpy(kGoldens + "cases/tiny-a/mix40/streams_out.npy");
  ASSERT_TRUE(streams_npy.ok()) << streams_npy.status().ToString();
  const std::vector<float> all = streams_npy->ToFloat();
  const MhcDims dims = MhcDimsFromConfig(weights->config());
  const int64_t rows = streams_npy->shape[1];
  const int64_t width = dims.stream_values();
  const std::span<const float> streams(&all[3 * rows * width], rows * width);  // layer 3's output
  Result<MhcWeights> site = GetMhcWeights(*weights, "layers.4.hc_attn", dims);
  ASSERT_TRUE(site.ok()) << site.status().ToString();

  std::vector<MhcMix> serial(rows), threaded(rows);
  OwnedExecContext one_thread(1), three_threads(3);
  ComputeMixRows(streams, rows, *site, dims, serial, one_thread.ctx);
  ComputeMixRows(streams, rows, *site, dims, threaded, three_threads.ctx);
  for (int64_t t = 0; t < rows; ++t) {
    const MhcMix one = ComputeMix(streams.subspan(t * width, width), *site, dims);
    for (const MhcMix* mix : {&serial[t], &threaded[t]}) {
      EXPECT_EQ(mix->hc_mult, one.hc_mult);
      EXPECT_EQ(mix->pre, one.pre) << "token " << t;
      EXPECT_EQ(mix->post, one.post) << "token " << t;
      EXPECT_EQ(mix->comb, one.comb) << "token " << t;
    }
  }
  // HcPreRows with per-token weights equals HcPre token by token.
  std::vector<float> pre(rows * dims.hc_mult), rows_out(rows * dims.hidden_size);
  for (int64_t t = 0; t < rows; ++t) {
    for (int32_t k = 0; k < dims.hc_mult; ++k) pre[t * dims.hc_mult + k] = serial[t].pre[k];
  }
  HcPreRows(streams, pre, rows, rows_out);
  std::vector<float> one_out(dims.hidden_size);
  for (int64_t t = 0; t < rows; ++t) {
    HcPre(streams.subspan(t * width, width), serial[t].pre_span(), one_out);
    EXPECT_TRUE(std::equal(one_out.begin(), one_out.end(), &rows_out[t * dims.hidden_size]))
        << "token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, MhcGoldenTest,
                         testing::Values(Case{"tiny-a", "chat5"}, Case{"tiny-a", "mix40"},
                                         Case{"tiny-a", "long120"}, Case{"tiny-b", "chat5"},
                                         Case{"tiny-b", "mix40"}, Case{"tiny-b", "long120"},
                                         Case{"tiny-c", "chat5"}, Case{"tiny-c", "mix40"},
                                         Case{"tiny-c", "long120"}),
                         CaseName);

}  // namespace
}  // namespace dsv41

#include "model/compressor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/npy.h"
#include "base/thread_pool.h"
#include "kv/kv_layout.h"
#include "model/weights.h"

namespace dsv41 {
namespace {

const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model";

const ModelWeights& LoadGoldenModel(const std::string& config) {
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

NpyArray ReadArray(const std::string& path) {
  Result<NpyArray> a = ReadNpy(path);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  if (!a.ok()) std::abort();
  return std::move(a).value();
}

struct CompressorCase {
  const char* config;
  const char* prompt;
};

std::string CompressorCaseName(const testing::TestParamInfo<CompressorCase>& info) {
  std::string name = std::string(info.param.config) + "_" + info.param.prompt;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class CompressorGoldenTest : public testing::TestWithParam<CompressorCase> {};

// Every kv source's caches after the prompt equal compressed_kv_L<s> and index_k_L<s> (model.md
// §7.3, §7.4), fed one-shot and in chunks that leave a ratio-2 group open across a boundary.
TEST_P(CompressorGoldenTest, KvSourcesMatchCompressedKvAndIndexK) {
  const CompressorCase& cc = GetParam();
  const ModelWeights& weights = LoadGoldenModel(cc.config);
  const ModelConfig& c = weights.config();
  const std::string dir = kGoldens + "/cases/" + cc.config + "/" + cc.prompt;
  const NpyArray attn_in = ReadArray(dir + "/attn_in.npy");
  const std::vector<float> stability = ReadArray(dir + "/stability_gemm32.npy").ToFloat();
  const int64_t t_count = attn_in.shape[1];
  const int64_t hidden = c.hidden_size;
  const std::vector<float> in = attn_in.ToFloat();
  OwnedExecContext exec(2);
  OwnedExecContext serial(1);
  int num_sources = 0;
  for (const LayerRole& role : weights.plan().layers) {
    if (!role.is_kv_source) continue;
    ++num_sources;
    const int32_t s = role.layer;
    Result<std::unique_ptr<Compressor>> comp =
        Compressor::Create(weights, "layers." + std::to_string(s) + ".attn", role);
    ASSERT_TRUE(comp.ok()) << comp.status().ToString();
    const std::span<const float> x(in.data() + s * t_count * hidden, t_count * hidden);

    Result<ContiguousKvCache> one_shot = ContiguousKvCache::Create(c, weights.plan(), t_count);
    ASSERT_TRUE(one_shot.ok()) << one_shot.status().ToString();
    const BatchRequest whole[] = {one_shot->Request(0, static_cast<int32_t>(t_count), 0)};
    (*comp)->Forward(x, whole, one_shot->view(), exec.ctx);
    Result<ContiguousKvCache> chunked =
        ContiguousKvCache::Create(c, weights.plan(), t_count, KvProfile::kPacked);
    ASSERT_TRUE(chunked.ok()) << chunked.status().ToString();
    int32_t pos = 0;
    for (int32_t n : {3, 1, 2, 5, 1000}) {
      n = std::min<int32_t>(n, static_cast<int32_t>(t_count) - pos);
      if (n <= 0) break;
      const BatchRequest part[] = {chunked->Request(0, n, pos)};
      (*comp)->Forward(x.subspan(pos * hidden, n * hidden), part, chunked->view(), serial.ctx);
      pos += n;
    }
    for (int32_t j = 0; j < t_count / role.ratio; ++j) {
      EXPECT_EQ(chunked->KvEntry(s, j), one_shot->KvEntry(s, j)) << "layer " << s << " entry " << j;
      EXPECT_EQ(chunked->IndexKey(s, j), one_shot->IndexKey(s, j)) << "layer " << s;
    }

    const std::string suffix = "_L" + std::to_string(s) + ".npy";
    const NpyArray want_kv = ReadArray(dir + "/compressed_kv" + suffix);
    const NpyArray want_k = ReadArray(dir + "/index_k" + suffix);
    const int32_t num_entries = static_cast<int32_t>(t_count / role.ratio);
    ASSERT_EQ(want_kv.shape, (std::vector<int64_t>{num_entries, c.head_dim}));
    ASSERT_EQ(want_k.shape, (std::vector<int64_t>{num_entries, c.index_head_dim}));
    const std::vector<float> kv = want_kv.ToFloat();
    const std::vector<float> k = want_k.ToFloat();
    double max_kv_err = 0, max_k_err = 0, max_kv_err_all = 0, max_k_err_all = 0;
    int num_stable = 0;
    for (int32_t j = 0; j < num_entries; ++j) {
      // An entry depends on the tokens of its group; it counts where all of them are stable.
      bool stable = true;
      for (int32_t p = j * role.ratio; p < (j + 1) * role.ratio; ++p) {
        stable = stable && stability[p] <= 1e-4f;
      }
      num_stable += stable;
      for (int32_t d = 0; d < c.head_dim; ++d) {
        const double err = std::fabs(one_shot->KvEntry(s, j)[d] - kv[j * c.head_dim + d]);
        max_kv_err_all = std::max(max_kv_err_all, err);
        if (stable) max_kv_err = std::max(max_kv_err, err);
      }
      for (int32_t d = 0; d < c.index_head_dim; ++d) {
        const double err = std::fabs(one_shot->IndexKey(s, j)[d] - k[j * c.index_head_dim + d]);
        max_k_err_all = std::max(max_k_err_all, err);
        if (stable) max_k_err = std::max(max_k_err, err);
      }
    }
    std::printf(
        "%s/%s kv source %d (ratio %d): %d stable of %d entries, max err kv %.3g, "
        "index_k %.3g (all entries: %.3g, %.3g)\n",
        cc.config, cc.prompt, s, role.ratio, num_stable, num_entries, max_kv_err, max_k_err,
        max_kv_err_all, max_k_err_all);
    EXPECT_LE(max_kv_err, 1e-3) << "layer " << s;
    EXPECT_LE(max_k_err, 1e-3) << "layer " << s;
  }
  EXPECT_GT(num_sources, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Goldens, CompressorGoldenTest,
    testing::Values(CompressorCase{"tiny-a", "chat5"}, CompressorCase{"tiny-a", "mix40"},
                    CompressorCase{"tiny-a", "long120"}, CompressorCase{"tiny-b", "chat5"},
                    CompressorCase{"tiny-b", "mix40"}, CompressorCase{"tiny-b", "long120"},
                    CompressorCase{"tiny-c", "chat5"}, CompressorCase{"tiny-c", "mix40"},
                    CompressorCase{"tiny-c", "long120"}),
    CompressorCaseName);

}  // namespace
}  // namespace dsv41

#include "model/compressor.h"

#include <algorithm>

#include "base/check.h"
#include "checkpoint/dtype.h"
#include "model/linear_weight.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {}  // namespace

Compressor::Compressor(const ModelConfig& config, int32_t ratio)
    : config_(config), ratio_(ratio), rope_(Rope::ForTable(config, RopeTable::kCompress)) {}

Result<std::unique_ptr<Compressor>> Compressor::Create(const ModelWeights& weights,
                                                       const std::string& prefix,
                                                       const LayerRole& role) {
  if (!role.is_kv_source || role.ratio < 1) {
    return InvalidArgumentError("%s: layer %d is not a kv source with ratio >= 1", prefix.c_str(),
                                role.layer);
  }
  const ModelConfig& c = weights.config();
  std::unique_ptr<Compressor> comp(new Compressor(c, role.ratio));
  const std::string cp = prefix + ".compressor";
  DSV41_ASSIGN_OR_RETURN(comp->wkv_, GetLinear(weights, cp + ".wkv", c.head_dim, c.hidden_size));
  if (role.ratio > 1) {
    DSV41_ASSIGN_OR_RETURN(comp->wgate_,
                           GetLinear(weights, cp + ".wgate", c.head_dim, c.hidden_size));
  }
  DSV41_ASSIGN_OR_RETURN(comp->norm_, GetNormWeight(weights, cp + ".norm.weight", c.head_dim));
  DSV41_ASSIGN_OR_RETURN(comp->wk_,
                         GetLinear(weights, prefix + ".indexer.wk", c.index_head_dim, c.head_dim));
  DSV41_ASSIGN_OR_RETURN(
      comp->k_norm_, GetNormWeight(weights, prefix + ".indexer.k_norm.weight", c.index_head_dim));
  return comp;
}

void Compressor::Publish(std::span<const float> latent, int32_t entry_idx,
                         CompressedCache& cache) const {
  const int64_t head_dim = config_.head_dim;
  const int64_t index_dim = config_.index_head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int32_t pos = entry_idx * ratio_;  // §6.3: the first token of the group
  const size_t half = rope_.inv_freq().size();
  std::vector<float> cos(half);
  std::vector<float> sin(half);
  rope_.Angles(pos, cos, sin);

  // 1. Index key from the un-rotated latent: bf16 weights, no activation quantisation (§12.4).
  std::vector<float> k(index_dim);
  Linear(wk_, latent, 1, k, LinearOptions{}, nullptr);
  for (float& v : k) v = Bf16Round(v);
  RmsNorm(k, k_norm_, eps, k);
  Rope::RotateWith(k, cos, sin, /*inverse=*/false);
  FakeQuantFq4B32Pow2(k);
  cache.index_k.insert(cache.index_k.end(), k.begin(), k.end());

  // 2. Main KV: the rotated latent, fq4_b16_e4m3.
  std::vector<float> c(latent.begin(), latent.end());
  DSV41_CHECK(static_cast<int64_t>(c.size()) == head_dim, "latent %zu", c.size());
  Rope::RotateWith(c, cos, sin, /*inverse=*/false);
  FakeQuantFq4B16E4m3(c);
  cache.kv.insert(cache.kv.end(), c.begin(), c.end());
}

void Compressor::Forward(std::span<const float> x, int32_t num_tokens, int32_t start_pos,
                         CompressedCache& cache, ThreadPool* pool) const {
  const int64_t t_count = num_tokens;
  const int64_t hidden = config_.hidden_size;
  const int64_t head_dim = config_.head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  DSV41_CHECK(static_cast<int64_t>(x.size()) == t_count * hidden, "x %zu", x.size());
  DSV41_CHECK(start_pos == cache.num_entries() * ratio_ + cache.num_pending,
              "start %d, %d entries of ratio %d, %d pending", start_pos, cache.num_entries(),
              ratio_, cache.num_pending);

  std::vector<float> a(t_count * head_dim);
  if (ratio_ == 1) {
    // §7.3 ratio 1: latent = RMSNorm(norm, bf16(wkv · x)), entry j = p.
    Linear(wkv_, x, t_count, a, LinearOptions{}, pool);
    for (int64_t t = 0; t < t_count; ++t) {
      std::span<float> latent = std::span<float>(a).subspan(t * head_dim, head_dim);
      for (float& v : latent) v = Bf16Round(v);
      RmsNorm(latent, norm_, eps, latent);
      Publish(latent, start_pos + static_cast<int32_t>(t), cache);
    }
    return;
  }

  // §7.3 ratio r > 1: fp32 projections a = wkv·x, g = wgate·x; a group closes at its last member.
  std::vector<float> g(t_count * head_dim);
  Linear(wkv_, x, t_count, a, LinearOptions{}, pool);
  Linear(wgate_, x, t_count, g, LinearOptions{}, pool);
  std::vector<float> e(ratio_);
  std::vector<float> terms(ratio_);
  std::vector<float> latent(head_dim);
  for (int64_t t = 0; t < t_count; ++t) {
    const float* a_t = a.data() + t * head_dim;
    const float* g_t = g.data() + t * head_dim;
    cache.pending.insert(cache.pending.end(), a_t, a_t + head_dim);
    cache.pending.insert(cache.pending.end(), g_t, g_t + head_dim);
    if (++cache.num_pending < ratio_) continue;
    // Members i = 0..r−1 in position order, each [a ‖ g]. Per channel: softmax of the gates
    // (max subtracted, CrExp, sequential fp32 denominator), then the sequential fp32 sum of
    // fp32(w_i · a_i); the pooled vector is rounded to bf16 before the norm.
    const float* members = cache.pending.data();
    for (int64_t ch = 0; ch < head_dim; ++ch) {
      float mx = members[head_dim + ch];
      for (int32_t i = 1; i < ratio_; ++i)
        mx = std::max(mx, members[i * 2 * head_dim + head_dim + ch]);
      for (int32_t i = 0; i < ratio_; ++i) {
        e[i] = CrExp(members[i * 2 * head_dim + head_dim + ch] - mx);
      }
      const float den = SeqSum(e);
      for (int32_t i = 0; i < ratio_; ++i) {
        const float w = e[i] / den;
        terms[i] = w * members[i * 2 * head_dim + ch];
      }
      latent[ch] = Bf16Round(SeqSum(terms));
    }
    RmsNorm(latent, norm_, eps, latent);
    Publish(latent, cache.num_entries(), cache);
    cache.pending.clear();
    cache.num_pending = 0;
  }
}

}  // namespace dsv41

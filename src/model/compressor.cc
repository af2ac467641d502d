#include "model/compressor.h"

#include <algorithm>

#include "base/check.h"
#include "checkpoint/dtype.h"
#include "kernels/compressor_pool.h"
#include "kernels/rope.h"
#include "model/linear_weight.h"
#include "model/weights.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {}  // namespace

Compressor::Compressor(const ModelConfig& config, const LayerRole& role)
    : config_(config),
      layer_(role.layer),
      ratio_(role.ratio),
      rope_(Rope::ForTable(config, RopeTable::kCompress)) {}

Result<std::unique_ptr<Compressor>> Compressor::Create(const ModelWeights& weights,
                                                       const std::string& prefix,
                                                       const LayerRole& role) {
  if (!role.is_kv_source || role.ratio < 1) {
    return InvalidArgumentError("%s: layer %d is not a kv source with ratio >= 1", prefix.c_str(),
                                role.layer);
  }
  const ModelConfig& c = weights.config();
  std::unique_ptr<Compressor> comp(new Compressor(c, role));
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

void Compressor::PublishEntries(std::span<float> latents, std::span<const Completed> completed,
                                std::span<const BatchRequest> requests, const KvCacheView& cache,
                                ExecContext& ctx) const {
  const int64_t num_completed = static_cast<int64_t>(completed.size());
  const int64_t head_dim = config_.head_dim;
  const int64_t index_dim = config_.index_head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const KvCacheLayout& layout = *cache.layout;
  const KvSourcePlaces& places = *layout.sources[layer_];
  // §7.4 publish: 1. index key from the un-rotated latent (bf16 weights, no activation
  // quantisation, §12.4); 2. the rotated latent, fq4_b16_e4m3. Entry j is rotated at position
  // j·ratio, the first token of its group (§6.3).
  std::span<float> k = ctx.arena.Alloc<float>(num_completed * index_dim);
  LinearProduct(wk_, latents, num_completed, k, ctx);
  const size_t half = rope_.inv_freq().size();
  std::span<float> cos = ctx.arena.Alloc<float>(half);
  std::span<float> sin = ctx.arena.Alloc<float>(half);
  for (int64_t c = 0; c < num_completed; ++c) {
    const auto [request_idx, entry] = completed[c];
    const std::span<const std::vector<uint32_t>> tables = requests[request_idx].block_tables;
    rope_.Angles(entry * ratio_, cos, sin);
    std::span<float> key = k.subspan(c * index_dim, index_dim);
    for (float& v : key) v = Bf16Round(v);
    RmsNorm(key, k_norm_, eps, key);
    RopeRotateRowsSimd(key, 1, 1, cos, sin, /*inverse=*/false);
    FakeQuantFq4B32Pow2(key);
    const std::span<const uint32_t> table = tables[places.kv.group_idx];
    EncodeIndexRow(key, cache.RowAt(places.index, table, entry), places.index.row_bytes);
    std::span<float> latent = latents.subspan(c * head_dim, head_dim);
    RopeRotateRowsSimd(latent, 1, 1, cos, sin, /*inverse=*/false);
    FakeQuantFq4B16E4m3(latent);
    EncodeKvRow(layout.profile, latent, cache.RowAt(places.kv, table, entry));
  }
}

void Compressor::Forward(std::span<const float> x, std::span<const BatchRequest> requests,
                         const KvCacheView& cache, ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  const int64_t t_count = static_cast<int64_t>(x.size()) / config_.hidden_size;
  DSV41_CHECK(static_cast<int64_t>(x.size()) == t_count * config_.hidden_size, "x %zu", x.size());
  ProductsOfInput of_x(x, t_count);
  const Projections projections = QueueProjections(of_x, ctx.arena);
  of_x.Run(ctx);
  ForwardProjected(projections, requests, cache, ctx);
}

Compressor::Projections Compressor::QueueProjections(ProductsOfInput& of_x,
                                                     StepArena& arena) const {
  // §7.3: fp32 projections a = wkv·x and, for ratio > 1, g = wgate·x over every row.
  Projections p;
  p.a = arena.Alloc<float>(of_x.rows() * config_.head_dim);
  of_x.Add(wkv_, p.a, /*round_bf16=*/false);
  if (ratio_ > 1) {
    p.g = arena.Alloc<float>(p.a.size());
    of_x.Add(wgate_, p.g, /*round_bf16=*/false);
  }
  return p;
}

void Compressor::ForwardProjected(const Projections& projections,
                                  std::span<const BatchRequest> requests, const KvCacheView& cache,
                                  ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  StepArena& arena = ctx.arena;
  const int64_t head_dim = config_.head_dim;
  const std::span<const float> a = projections.a;
  const std::span<const float> g = projections.g;
  const int64_t t_count = static_cast<int64_t>(a.size()) / head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const KvCacheLayout& layout = *cache.layout;
  const KvSourcePlaces& places = *layout.sources[layer_];
  DSV41_CHECK(static_cast<int64_t>(a.size()) == t_count * head_dim &&
                  g.size() == (ratio_ > 1 ? a.size() : 0),
              "layer %d: a %zu, g %zu", layer_, a.size(), g.size());
  DSV41_CHECK(places.ratio == ratio_ && layout.head_dim == head_dim, "layer %d: cache ratio %d",
              layer_, places.ratio);

  // The bf16 latent (un-rotated, normalised) of every entry the step completes, with where the
  // entry goes: (request, entry id).
  int64_t max_completed = 0;
  for (const BatchRequest& r : requests) {
    max_completed += (r.start_pos + r.num_tokens) / ratio_ - r.start_pos / ratio_;
  }
  std::span<float> latents = arena.Alloc<float>(max_completed * head_dim);
  std::span<Completed> completed = arena.Alloc<Completed>(max_completed);
  int64_t num_completed = 0;
  std::span<const float*> members = arena.Alloc<const float*>(ratio_);
  std::span<const float*> gates = arena.Alloc<const float*>(ratio_);
  std::span<float> pool_scratch = arena.Alloc<float>(ratio_ * std::max<int64_t>(head_dim, 2));
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& r = requests[i];
    for (int32_t t = 0; t < r.num_tokens; ++t) {
      const int64_t row = r.first_row + t;
      const int32_t pos = r.start_pos + t;
      const size_t begin = static_cast<size_t>(num_completed) * head_dim;
      if (ratio_ == 1) {
        // §7.3 ratio 1: latent = RMSNorm(norm, bf16(wkv · x)), entry j = p.
        for (int64_t ch = 0; ch < head_dim; ++ch) {
          latents[begin + ch] = Bf16Round(a[row * head_dim + ch]);
        }
        completed[num_completed++] = Completed{static_cast<int32_t>(i), pos};
        continue;
      }
      // The ring row of p holds [a ‖ g]; a group closes at its last member.
      const uint32_t ring_block = BlockAt(r.block_tables[places.ring.group_idx], 0);
      const int32_t ring_rows = places.ring.rows_per_page;
      auto* ring_row =
          reinterpret_cast<float*>(cache.Row(places.ring, ring_block, pos % ring_rows));
      std::copy_n(a.data() + row * head_dim, head_dim, ring_row);
      std::copy_n(g.data() + row * head_dim, head_dim, ring_row + head_dim);
      if ((pos + 1) % ratio_ != 0) continue;
      for (int32_t m = 0; m < ratio_; ++m) {
        const int32_t member_pos = pos - ratio_ + 1 + m;
        members[m] = reinterpret_cast<const float*>(
            cache.Row(places.ring, ring_block, member_pos % ring_rows));
        gates[m] = members[m] + head_dim;
      }
      // Members i = 0..r−1 in position order, each [a ‖ g]. Per channel: softmax of the gates
      // (max subtracted, CrExp, sequential fp32 denominator), then the sequential fp32 sum of
      // fp32(w_i · a_i); the pooled vector is rounded to bf16 before the norm.
      CompressorPoolSimd(members, gates, latents.subspan(begin, head_dim), pool_scratch);
      completed[num_completed++] = Completed{static_cast<int32_t>(i), pos / ratio_};
    }
  }
  DSV41_CHECK(num_completed == max_completed, "%lld entries completed, %lld expected",
              static_cast<long long>(num_completed), static_cast<long long>(max_completed));
  if (num_completed == 0) return;
  RmsNormRows(latents, num_completed, norm_, eps, latents);

  PublishEntries(latents, completed.first(num_completed), requests, cache, ctx);
}

}  // namespace dsv41

#pragma once

// The compressor of a kv-source layer (model.md §7.3) and the publishing of each completed entry
// into the source's compressed-KV and index-K caches (§7.4). Ratio 1 projects every token; ratio
// r > 1 pools the r tokens of each group of absolute positions with a per-channel softmax gate and
// keeps the members of a still-open group (the pending state) for the next forward.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/linear.h"
#include "model/config.h"
#include "model/layer_plan.h"
#include "model/norm.h"
#include "model/rope.h"

namespace dsv41 {

class ModelWeights;
class ThreadPool;

// A kv source's per-request caches (model.md §7.10). Engine thread only.
struct CompressedCache {
  CompressedCache(int32_t head_dim, int32_t index_head_dim)
      : head_dim(head_dim), index_head_dim(index_head_dim) {}

  int32_t head_dim;
  int32_t index_head_dim;
  // Entry j's post-RoPE, fq4_b16_e4m3 latent [head_dim], entries contiguous.
  std::vector<float> kv;
  // Entry j's post-RoPE, fq4_b32_pow2 index key [index_head_dim], entries contiguous.
  std::vector<float> index_k;
  // Ratio > 1: the fp32 [a ‖ g] (2·head_dim floats) of each member of the open group, in
  // position order; num_pending < ratio members.
  std::vector<float> pending;
  int32_t num_pending = 0;

  int32_t num_entries() const { return static_cast<int32_t>(kv.size() / head_dim); }
  std::span<const float> Kv(int32_t j) const {
    return std::span<const float>(kv).subspan(static_cast<size_t>(j) * head_dim, head_dim);
  }
  std::span<const float> IndexK(int32_t j) const {
    return std::span<const float>(index_k).subspan(static_cast<size_t>(j) * index_head_dim,
                                                   index_head_dim);
  }
};

// The compressor and publisher of one kv-source layer. Immutable after Create (views into the
// ModelWeights, which must outlive it). Engine thread only (Forward uses `pool`).
class Compressor {
 public:
  // `prefix` is the layer's attention prefix ("layers.2.attn"); `role` must be a kv source with
  // ratio >= 1. Errors name the tensor.
  static Result<std::unique_ptr<Compressor>> Create(const ModelWeights& weights,
                                                    const std::string& prefix,
                                                    const LayerRole& role);

  int32_t ratio() const { return ratio_; }
  CompressedCache NewCache() const {
    return CompressedCache(config_.head_dim, config_.index_head_dim);
  }

  // Feeds `num_tokens` new tokens of one request, x: [num_tokens, hidden_size] (the attention
  // input, bf16 values), at positions start_pos .. start_pos + num_tokens − 1, where start_pos
  // must continue the cache (= num_entries · ratio + num_pending). Appends every entry these
  // tokens complete (entry j closes at position j·ratio + ratio − 1) to `cache`, in order: index
  // key first, from the un-rotated latent, then the rotated, quantised latent (§7.4).
  void Forward(std::span<const float> x, int32_t num_tokens, int32_t start_pos,
               CompressedCache& cache, ThreadPool* pool) const;

 private:
  Compressor(const ModelConfig& config, int32_t ratio);

  // §7.4 for entry `entry_idx` from its bf16 latent (un-rotated); appends to `cache`.
  void Publish(std::span<const float> latent, int32_t entry_idx, CompressedCache& cache) const;

  ModelConfig config_;
  int32_t ratio_;
  Rope rope_;  // the compress table
  LinearWeight wkv_;
  LinearWeight wgate_;  // ratio > 1 only
  NormWeight norm_;
  LinearWeight wk_;
  NormWeight k_norm_;
};

}  // namespace dsv41

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

#include "base/exec_context.h"
#include "base/status.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "kernels/linear.h"
#include "kv/kv_layout.h"
#include "model/batch.h"
#include "model/linear_weight.h"
#include "model/norm.h"
#include "model/rope.h"

namespace dsv41 {

class ModelWeights;
class ThreadPool;

// The compressor and publisher of one kv-source layer. Immutable after Create (views into the
// ModelWeights, which must outlive it). Engine thread only (Forward uses the context's pool and
// arena).
class Compressor {
 public:
  // `prefix` is the layer's attention prefix ("layers.2.attn"); `role` must be a kv source with
  // ratio >= 1. Errors name the tensor.
  static Result<std::unique_ptr<Compressor>> Create(const ModelWeights& weights,
                                                    const std::string& prefix,
                                                    const LayerRole& role);

  int32_t ratio() const { return ratio_; }
  // Feeds the new tokens of a step, x: [T, hidden_size] (the attention input, bf16 values) of
  // every request. Each request's token at position p stores its fp32 [a ‖ g] in the request's
  // ring (ratio > 1) and, when it completes entry j (p = j·ratio + ratio − 1), publishes the
  // entry's index key and rotated, quantised latent (§7.4) into the cache through the request's
  // block tables. A group left open by one step closes in a later one: its members wait in the
  // ring. Projections run once over all T rows.
  void Forward(std::span<const float> x, std::span<const BatchRequest> requests,
               const KvCacheView& cache, ExecContext& ctx) const;

  // The same in two steps, so that the projections run with the layer's other products of x:
  // QueueProjections allocates a = wkv · x and, for ratio > 1, g = wgate · x (fp32, [T, head_dim]
  // each) from `arena` and queues them on `of_x`; after of_x.Run, ForwardProjected does the rest.
  struct Projections {
    std::span<float> a;
    std::span<float> g;  // empty for ratio 1
  };
  Projections QueueProjections(ProductsOfInput& of_x, StepArena& arena) const;
  void ForwardProjected(const Projections& projections, std::span<const BatchRequest> requests,
                        const KvCacheView& cache, ExecContext& ctx) const;

 private:
  Compressor(const ModelConfig& config, const LayerRole& role);

  // Where a completed entry goes: its request and entry id.
  struct Completed {
    int32_t request_idx;
    int32_t entry;
  };
  // §7.4: writes completed entry c's index key (from the un-rotated latent) and its rotated,
  // fq4_b16_e4m3 latent; latents [completed.size(), head_dim], normalised, are rotated in place.
  void PublishEntries(std::span<float> latents, std::span<const Completed> completed,
                      std::span<const BatchRequest> requests, const KvCacheView& cache,
                      ExecContext& ctx) const;

  ModelConfig config_;
  int32_t layer_;

  int32_t ratio_;
  Rope rope_;  // the compress table
  LinearWeight wkv_;
  LinearWeight wgate_;  // ratio > 1 only
  NormWeight norm_;
  LinearWeight wk_;
  NormWeight k_norm_;
};

}  // namespace dsv41

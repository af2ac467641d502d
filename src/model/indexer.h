#pragma once

// The lightning indexer of an index-source layer (model.md §7.5): per token, bf16 scores of the
// visible entries of its kv source's index-K cache, the two-level candidate filter (source /
// filter / plain modes) and the top-k entry list the attention attends (attention.h
// CompressedSelection). Reuse layers read the list their index source published in the same
// forward from IndexerForwardState (model.md §7.10 "Per-forward shared state").

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/exec_context.h"
#include "base/forward_observer.h"
#include "base/status.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "kernels/linear.h"
#include "kv/kv_layout.h"
#include "model/attention.h"
#include "model/batch.h"
#include "model/linear_weight.h"
#include "model/norm.h"
#include "model/rope.h"

namespace dsv41 {

class ModelWeights;
class ThreadPool;

// The indices of the min(k, scores.size()) highest scores, ties to the lower index (model.md §7.5
// step 6 and the candidate blocks' rule), returned in ascending index order. −inf scores are
// ordinary values (they lose to every finite score and tie among themselves). NaN is not allowed.
// An allocating form of TopKAscendingSimd (kernels/indexer_topk.h), which the forward uses.
std::vector<int32_t> TopKAscending(std::span<const float> scores, int32_t k);

// The candidate mask of one token (model.md §7.5 step 5): `scores` holds the N entries' scores
// with −inf for invisible ones, `num_visible` = V. Blocks of `block_size` entries (N padded with
// −inf), block score = max, the block of the newest visible entry (V − 1) // block_size pinned to
// +inf when V > 0, the top min(num_blocks, n_blocks) blocks (ties to the lower block) whose score
// is > −inf are kept. mask[n] = 1 for every entry of a kept block (n < N).
void CandidateMask(std::span<const float> scores, int32_t num_visible, int32_t num_blocks,
                   int32_t block_size, std::span<uint8_t> mask);

// The same selection as the kept block ids, ascending, into `blocks` (room for num_blocks); returns
// how many. `block_score`, `order`, `picks`: scratch of ceil(N / block_size) each.
int32_t CandidateBlocks(std::span<const float> scores, int32_t num_visible, int32_t num_blocks,
                        int32_t block_size, std::span<int32_t> blocks, std::span<float> block_score,
                        std::span<int32_t> order, std::span<int32_t> picks);

// model.md §7.5 step 2's constant fp32(index_head_dim^−½ · index_n_heads^−½): the two powers
// multiplied in double, rounded once.
float IndexWeightScale(const ModelConfig& config);

// What every index source of one forward publishes for the layers after it (model.md §7.8,
// §7.10): per index-source layer its top-k lists, and the candidate source's mask. Filled layer
// by layer in plan order; one per request of the step, valid for that step. Everything lives in
// the step arena (allocated by Create and by the indexers, inside the forward's arena scope).
struct IndexerForwardState {
  struct TopK {
    // [num_tokens, per_token] entry ids, ascending, −1 padded (the goldens' indexer_topk layout);
    // empty until the layer's indexer ran.
    std::span<int32_t> entries;
    int32_t per_token = 0;
  };
  struct Candidates {
    // [num_tokens, per_token]: each token's kept blocks of block_size entries (CandidateBlocks),
    // ascending, −1 padded; `counts` [num_tokens] how many. Over the kv source's num_entries
    // entries at the time it was computed.
    std::span<int32_t> blocks;
    std::span<int32_t> counts;
    int32_t per_token = 0;
    int32_t block_size = 0;
    int32_t num_entries = 0;
    // Token t's kept blocks.
    std::span<const int32_t> Row(int64_t t) const {
      return std::span<const int32_t>(blocks).subspan(t * per_token, counts[t]);
    }
    // Token t's candidates as a 0/1 mask over mask.size() entries.
    void RowMask(int64_t t, std::span<uint8_t> mask) const;
  };
  std::span<TopK> topk;              // by layer id: what that index-source layer published
  std::span<Candidates> candidates;  // by layer id: what that candidate source published

  // `num_requests` empty states over `num_layers` layers, from `arena`.
  static std::span<IndexerForwardState> Create(size_t num_requests, size_t num_layers,
                                               StepArena& arena);
  // The selection layer `role` (ratio > 0) attends: the top-k its index source published. The
  // index source must have run (checked).
  CompressedSelection SelectionFor(const LayerRole& role) const;
};

// What Indexer::Forward computed for tests and debugging (the goldens' arrays), recorded as an
// observer (ScopedForwardObserver): the last indexer call's last request.
struct IndexerDebug final : ForwardObserver {
  // [num_tokens, N] bf16 scores as the top-k saw them: −inf where invisible, and for a candidate
  // filter also outside the candidate mask (the goldens' indexer_scores_L<l>).
  std::vector<float> scores;
  // [num_tokens]: 1 where the top-k boundary was an exact tie (k < V and the k-th and (k+1)-th
  // highest scores are equal).
  std::vector<uint8_t> tie;

  bool WantsIndexerScores() const override { return true; }
  void OnIndexerScores(int32_t /*layer*/, size_t /*request_idx*/, std::span<const float> s,
                       std::span<const uint8_t> t) override {
    scores.assign(s.begin(), s.end());
    tie.assign(t.begin(), t.end());
  }
};

// The indexer of one index-source layer (roles Full and Reindex). Immutable after Create (views
// into the ModelWeights, which must outlive it); Forward is const. Engine thread only (Forward
// uses the context's pool and arena).
class Indexer {
 public:
  // The indexer of backbone layer `layer` (weights `layers.<layer>.attn.indexer.*`, and the
  // attention's wq_a / q_norm for QueryLatent). The role must be an index source. Errors name the
  // tensor.
  static Result<std::unique_ptr<Indexer>> Create(const ModelWeights& weights, int32_t layer);
  // The same from an explicit attention prefix ("layers.6.attn") and role.
  static Result<std::unique_ptr<Indexer>> Create(const ModelWeights& weights,
                                                 const std::string& prefix, const LayerRole& role);

  const LayerRole& role() const { return role_; }

  // Runs model.md §7.5 for the new tokens of a step. x: [T, hidden_size] attention input; qr:
  // [T, q_lora_rank] the attention's QueryLatent (the indexer shares wq_a and q_norm). Request i
  // scores the index keys of every entry its kv source completed so far, this step's included
  // (the Compressor ran first), read through its block tables, and publishes states[i].topk[layer]
  // (per_token = index_topk); a candidate source also publishes states[i].candidates[layer]; a
  // candidate filter reads the mask of config.candidate_source_layer_id (must be present,
  // checked). The query products run once over all T rows. When ctx.observer wants them, each
  // request's scores and tie flags go to OnIndexerScores. With ctx.official_index_key_slot, a
  // request whose kv source completes no group in the step scores the keys IndexKeySourceLayer
  // names instead (model/index_key_slot.h).
  void Forward(std::span<const float> x, std::span<const float> qr,
               std::span<const BatchRequest> requests, const KvCacheView& cache,
               std::span<IndexerForwardState> states, ExecContext& ctx) const;

  // The same in steps, so that the query products run with the layer's other products of x and
  // qr: AllocateState draws this layer's published state (states[i].topk / candidates) from
  // `arena`, where it must outlive the step's later layers; QueueProjections allocates
  // qi = bf16(wq_b · qr) [T, heads · head_dim] and w = bf16(weights_proj · x) [T, heads] and
  // queues them; after both Runs, ForwardProjected does the rest (qi and w are finished in place).
  void AllocateState(std::span<const BatchRequest> requests, std::span<IndexerForwardState> states,
                     StepArena& arena) const;
  struct Projections {
    std::span<float> qi;
    std::span<float> w;
  };
  Projections QueueProjections(ProductsOfInput& of_x, ProductsOfInput& of_qr,
                               StepArena& arena) const;
  void ForwardProjected(const Projections& projections, std::span<const BatchRequest> requests,
                        const KvCacheView& cache, std::span<IndexerForwardState> states,
                        ExecContext& ctx) const;

 private:
  Indexer(const ModelConfig& config, const LayerPlan& plan, const LayerRole& role);
  // Steps 1–2 over every row of the step, after the products: qi = fq4_b32_pow2(rope(qi)) per
  // head ([T, num_heads * head_dim]) and w = bf16(w · c) ([T, num_heads]), in place.
  void FinishQueries(std::span<const BatchRequest> requests, std::span<float> qi,
                     std::span<float> w, StepArena& arena) const;

  ModelConfig config_;
  LayerPlan plan_;  // for the official index-key slot (IndexKeySourceLayer)
  LayerRole role_;
  Rope rope_;  // the compress table
  float weight_scale_;
  LinearWeight wq_b_;
  LinearWeight weights_proj_;
};

}  // namespace dsv41

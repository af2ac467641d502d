#pragma once

// One layer's attention (model.md §7): the query path (§7.1), the layer's own SWA KV (§7.2), the
// sparse attention with the per-head sink (§7.6), the inverse RoPE and the grouped low-rank
// output projection (§7.7), with the bf16 rounding points of §12.5. One Attention object per
// layer, built from the layer plan's role. Every role shares this part; a ratio > 0 layer also
// attends the compressed entries its index source selected for each token (CompressedSelection):
// the kv source's Compressor (compressor.h) fills the compressed cache and the indexer (§7.5, not
// here yet) picks the entries. The key list of a token is its window rows in position order, then
// its selected entries in ascending order (§7.6).

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
#include "kernels/sparse_attention.h"  // SinkAttention, kAttentionKeyBlock
#include "kv/kv_layout.h"
#include "model/batch.h"
#include "model/linear_weight.h"
#include "model/norm.h"
#include "model/rope.h"

namespace dsv41 {

class ModelWeights;
class ThreadPool;

// How the new rows of one request see each other and the cache.
enum class AttentionMode {
  // model.md §7.2: every new row is stored as the window row of its position and a row at p sees
  // the window rows max(0, p − W + 1) .. p.
  kCausal,
  // model.md §11.4 step 2, a DSpark block: the new rows (positions s .. s + n − 1) are not stored;
  // every one of them sees the stored window rows max(0, s − W) .. s − 1 in position order, then
  // all n block rows (non-causal inside the block).
  kDraftBlock,
};

// The compressed entries each new token of one request attends (model.md §7.6, §7.8 keys_c):
// `entries` [num_tokens, per_token] holds entry ids of the layer's kv source in ascending order,
// −1 for unused slots (the goldens' indexer_topk layout). A view, valid for one Forward call.
struct CompressedSelection {
  std::span<const int32_t> entries;
  int32_t per_token = 0;
};

// The attention sublayer of one layer. Immutable after Create (weights are views into the
// ModelWeights, which must outlive it); Forward is const and may run for different requests one
// after another. Engine thread only (Forward uses the context's pool and arena).
class Attention {
 public:
  // The attention of backbone layer `layer` (weights `layers.<layer>.attn.*`), as its role in the
  // plan says (its RoPE table; whether Forward needs a CompressedSelection). Errors name the
  // tensor.
  static Result<std::unique_ptr<Attention>> Create(const ModelWeights& weights, int32_t layer);

  // The same from an explicit prefix (e.g. "layers.3.attn") and role.
  static Result<std::unique_ptr<Attention>> Create(const ModelWeights& weights,
                                                   const std::string& prefix,
                                                   const LayerRole& role);

  // The attention of DSpark stage `stage` (model.md §11.1: weights `mtp.<stage>.attn.*`, SWA only,
  // the main RoPE table), whose window rows are the stage's G_DRAFT rows (KvCacheLayout::draft).
  static Result<std::unique_ptr<Attention>> CreateDsparkStage(const ModelWeights& weights,
                                                              int32_t stage);

  const LayerRole& role() const { return role_; }

  // qr = RMSNorm(q_norm, wq_a · x) [num_tokens, q_lora_rank] (model.md §7.1 step 1): the
  // low-rank query latent, which the layer's indexer reads too. x: [num_tokens, hidden_size].
  void QueryLatent(std::span<const float> x, int32_t num_tokens, std::span<float> qr,
                   ExecContext& ctx) const;
  // The same in two steps, so that wq_a runs with the layer's other products of x: queues
  // qr = bf16(wq_a · x) on `of_x`; after of_x.Run, NormQueryLatent applies q_norm in place.
  void QueueQueryLatent(ProductsOfInput& of_x, std::span<float> qr) const;
  void NormQueryLatent(std::span<float> qr) const;

  // Runs the layer for every new token of a step (prefill, chunks and decode steps of several
  // requests: model.md §7.9). x: [T, hidden_size] attention input (bf16 values), qr its
  // QueryLatent; out: [T, hidden_size] bf16 values. The weight products run once over all T rows;
  // each request writes its new window rows into `cache` through its block tables, then attends
  // its own window and, when the role's ratio is > 0, selections[i] of its kv source's entries
  // (selections has one entry per request exactly then; checked).
  // `mode` says which keys the new rows see (kDraftBlock: DSpark stages only; their rows are
  // then not stored).
  void Forward(std::span<const float> x, std::span<const float> qr,
               std::span<const BatchRequest> requests, const KvCacheView& cache,
               std::span<const CompressedSelection> selections, std::span<float> out,
               ExecContext& ctx, AttentionMode mode = AttentionMode::kCausal) const;

  // The same in two steps, so that the projections run with the layer's other products of x and
  // qr: QueueProjections allocates q = bf16(wq_b · qr) [T, heads · head_dim] and kv = bf16(wkv ·
  // x) [T, head_dim] from `arena` and queues them; after both Runs, ForwardProjected does the
  // rest (it rotates, normalises and quantises q and kv in place).
  struct Projections {
    std::span<float> q;
    std::span<float> kv;
  };
  Projections QueueProjections(ProductsOfInput& of_x, ProductsOfInput& of_qr,
                               StepArena& arena) const;
  void ForwardProjected(const Projections& projections, std::span<const BatchRequest> requests,
                        const KvCacheView& cache, std::span<const CompressedSelection> selections,
                        std::span<float> out, ExecContext& ctx,
                        AttentionMode mode = AttentionMode::kCausal) const;

  // Stores fq8_b32(rope(RMSNorm(kv_norm, wkv · x))) of each row as the window row of its
  // request's position (model.md §7.2 steps 1–4 without the attention; DSpark window seeding,
  // §11.3, where x is main_x). x: [T, hidden_size], rows as `requests` lay them out.
  void WriteWindowRows(std::span<const float> x, std::span<const BatchRequest> requests,
                       const KvCacheView& cache, ExecContext& ctx) const;

  // Where this attention's window rows live in `layout`: its layer's SWA rows, or its stage's
  // draft rows.
  const KvRowPlace& WindowPlace(const KvCacheLayout& layout) const;

 private:
  Attention(const ModelConfig& config, const LayerRole& role, std::string prefix);

  // The cos/sin of every row's position [T, qk_rope_head_dim / 2] each.
  void RowAngles(std::span<const BatchRequest> requests, std::span<float> cos,
                 std::span<float> sin) const;
  // kv [T, head_dim] = bf16(wkv · x) on entry, fq8_b32(rope(RMSNorm(kv_norm, kv))) at each
  // row's position on return (§7.2 steps 2–3), each row also encoded into its window row when
  // `store`.
  void WindowKv(std::span<const BatchRequest> requests, std::span<const float> cos,
                std::span<const float> sin, const KvCacheView& cache, bool store,
                std::span<float> kv) const;

  // The keys the tokens of one request may attend, decoded once for all of them.
  struct RequestKeys {
    int32_t window_begin = 0;
    std::span<float> window_rows;    // [positions window_begin .., head_dim]
    std::span<int32_t> entry_index;  // entry id → row of `entries`, −1 when not selected
    std::span<float> entries;        // [selected entries, head_dim]
  };
  // Decodes request r's window rows from max(0, start − W + 1) on into `keys` (a block: the
  // stored rows max(0, start − W) .. start − 1, then its own rows from `kv`); returns the longest
  // window key list of its tokens.
  int32_t DecodeWindowKeys(const BatchRequest& r, const KvCacheView& cache, bool block,
                           std::span<const float> kv, RequestKeys& keys, StepArena& arena) const;
  // Decodes the union of request r's selected entries of `source` into `keys`; returns the
  // longest key list (window and entries) of its tokens.
  int32_t DecodeSelectedEntries(const BatchRequest& r, const CompressedSelection& selection,
                                const KvSourcePlaces& source, const KvCacheView& cache,
                                RequestKeys& keys, StepArena& arena) const;
  // o [T, num_heads, head_dim]: each (token, head) attends its window rows in position order,
  // then its selected entries in the given order (§7.6). max_keys bounds every key list.
  void AttendAll(std::span<const float> q, std::span<const BatchRequest> requests,
                 std::span<const int32_t> request_of, std::span<const RequestKeys> keys_of,
                 std::span<const CompressedSelection> selections, bool block, int32_t max_keys,
                 std::span<float> o, ExecContext& ctx) const;
  // out = wo_b · bf16(wo_a_g · inverse_rope(o)) per group g (§7.7); rotates o in place.
  void OutputProjection(std::span<float> o, std::span<const float> cos, std::span<const float> sin,
                        int64_t t_count, std::span<float> out, ExecContext& ctx) const;

  ModelConfig config_;
  LayerRole role_;
  std::string prefix_;
  Rope rope_;
  float attn_scale_;  // fp32(head_dim^-0.5), converted once (§12.8 item 5)
  LinearWeight wq_a_;
  LinearWeight wq_b_;
  LinearWeight wkv_;
  std::vector<LinearWeight> wo_a_groups_;  // wo_a rows of group g, as a bf16-exact product
  LinearWeight wo_b_;
  NormWeight q_norm_;
  NormWeight kv_norm_;
  std::vector<float> attn_sink_;
  int32_t dspark_stage_ = -1;  // >= 0: a DSpark stage's attention (rows in G_DRAFT)
};

}  // namespace dsv41

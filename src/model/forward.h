#pragma once

// The whole text forward (model.md §3, §4.4, §7.8–7.10, §10) over a batch: the flattened new
// tokens of several requests, each at its own absolute positions, with its own caches. Every
// quantity is per token and per request, so a batch equals each request run alone, and one-shot
// prefill, any chunking and token-by-token decode give the same bits (§7.9).

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/attention.h"
#include "model/compressor.h"
#include "model/engram_fusion.h"
#include "model/head.h"
#include "model/indexer.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/norm.h"

namespace dsv41 {

class ModelWeights;
class ThreadPool;

// The per-request state of model.md §7.10 that the backbone reads and extends: every layer's
// window rows and every kv source's compressed KV, index keys and pending group. The forward sees
// it only through this interface (a paged implementation comes with the block pool).
// Engine thread only.
class RequestCaches {
 public:
  virtual ~RequestCaches() = default;
  // Positions already processed (the absolute position of the next new token).
  virtual int32_t num_positions() const = 0;
  // The attention cache of backbone layer `layer`.
  virtual AttentionCache& Attention(int32_t layer) = 0;
  // The compressed caches of kv-source layer `layer`.
  virtual CompressedCache& Compressed(int32_t layer) = 0;
};

// RequestCaches in plain vectors, one per layer and one per kv source (TextModel::NewCaches).
class ContiguousCaches final : public RequestCaches {
 public:
  ContiguousCaches(std::vector<AttentionCache> attention,
                   std::vector<std::unique_ptr<CompressedCache>> compressed)
      : attention_(std::move(attention)), compressed_(std::move(compressed)) {}

  int32_t num_positions() const override {
    return attention_.empty() ? 0 : attention_[0].swa.num_positions();
  }
  AttentionCache& Attention(int32_t layer) override { return attention_[layer]; }
  CompressedCache& Compressed(int32_t layer) override;

 private:
  std::vector<AttentionCache> attention_;
  std::vector<std::unique_ptr<CompressedCache>> compressed_;  // [layers], null: no kv source
};

// One request's slice of a Batch: tokens token_ids[first_row .. first_row + num_tokens − 1] at
// absolute positions start_pos .. start_pos + num_tokens − 1 (start_pos must equal its caches'
// num_positions()).
struct BatchRequest {
  int32_t first_row = 0;
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
};

// One forward step (serving.md §2): the new tokens of every scheduled request, flattened in
// request order, and which rows need logits.
struct Batch {
  std::vector<int32_t> token_ids;      // [T]
  std::vector<BatchRequest> requests;  // consecutive, covering [0, T)
  // [T, n_engram_layers, n_hash_cols] global table rows of every new token (engram/row_ids.h);
  // empty when the model has no Engram layer.
  std::vector<int64_t> engram_rows;
  // Rows of token_ids whose logits are wanted, ascending; logits_out holds them in this order.
  std::vector<int32_t> logit_rows;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

// Per-layer intermediates of one Forward, for golden comparisons and debugging (the goldens'
// arrays of the same names), each [layers, T, hidden_size] in batch row order.
struct ForwardTrace {
  std::vector<float> attn_in;   // RMSNorm(attn_norm, hc_pre(X, pi_in))
  std::vector<float> attn_out;  // the attention output
  std::vector<float> ffn_in;    // RMSNorm(ffn_norm, hc_pre(X, preA))
  std::vector<float> ffn_out;   // the MoE output
};

struct TextModelOptions {
  // Every weight product through LinearRef (exact accumulation): reproduces the goldens bit for
  // bit, slowly. The fast path differs only by the accumulation order §12.8 item 1 leaves free.
  bool reference_linear = false;
};

// The backbone, the final norm and the head of a loaded model. Immutable after Load (views into
// the ModelWeights, which must outlive it). Forward is engine thread only.
class TextModel {
 public:
  // Builds every layer's modules as its role in the plan says (attention; compressor on kv
  // sources; indexer on index sources; Engram fusion on Engram layers; MoE; mHC sites; norms).
  // Errors name the tensor.
  static Result<std::unique_ptr<TextModel>> Load(const ModelWeights& weights,
                                                 const TextModelOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const LayerPlan& plan() const { return plan_; }
  int32_t vocab_size() const { return config_.vocab_size; }

  // Empty caches for a new request.
  std::unique_ptr<RequestCaches> NewCaches() const;

  // Runs `batch`: caches[i] belongs to batch.requests[i] and is extended by its tokens. logits_out
  // receives [logit_rows.size(), vocab] fp32. InvalidArgument (naming the request or row) for a
  // malformed batch: rows not covering the tokens, a start_pos that does not continue the caches,
  // a token id outside the vocabulary, missing Engram rows. `pool` may be null.
  Status Forward(const Batch& batch, std::span<RequestCaches* const> caches,
                 std::span<float> logits_out, ThreadPool* pool,
                 ForwardTrace* trace = nullptr) const;

 private:
  struct Layer {
    LayerRole role;
    std::unique_ptr<dsv41::Attention> attention;
    std::unique_ptr<Compressor> compressor;  // kv sources only
    std::unique_ptr<Indexer> indexer;        // index sources only
    std::unique_ptr<EngramFusion> engram;    // Engram layers only
    std::unique_ptr<Moe> moe;
    MhcWeights hc_attn;
    MhcWeights hc_ffn;
    NormWeight attn_norm;
    NormWeight ffn_norm;
  };

  TextModel() = default;

  Status CheckBatch(const Batch& batch, std::span<RequestCaches* const> caches,
                    size_t logits_size) const;

  ModelConfig config_;
  LayerPlan plan_;
  MhcDims dims_;
  float norm_eps_ = 0.0f;
  HeadWeights head_;
  std::vector<Layer> layers_;
};

}  // namespace dsv41

#pragma once

// The whole text forward (model.md §3, §4.4, §7.8–7.10, §10) over a batch: the flattened new
// tokens of several requests, each at its own absolute positions, reading and writing its cache
// rows through its own block tables. Every quantity is per token and per request, so a batch
// equals each request run alone, and one-shot prefill, any chunking and token-by-token decode give
// the same bits (§7.9); where the rows live (paged or one consecutive table) never matters. (Not
// so with ExecContext::official_index_key_slot, which reproduces the official reference's defect.)

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/exec_context.h"
#include "base/forward_observer.h"
#include "base/status.h"
#include "engram/step_rows.h"
#include "kv/kv_layout.h"
#include "model/attention.h"
#include "model/batch.h"
#include "model/compressor.h"
#include "model/engram_fusion.h"
#include "model/hc_block.h"
#include "model/head.h"
#include "model/indexer.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/norm.h"

namespace dsv41 {

class ModelWeights;

// Per-layer intermediates of the forwards it observes (ScopedForwardObserver), for golden
// comparisons and debugging (the goldens' arrays of the same names), each [layers, T,
// hidden_size] in batch row order, appended forward after forward.
struct ForwardTrace final : ForwardObserver {
  std::vector<float> attn_in;   // RMSNorm(attn_norm, hc_pre(X, pi_in))
  std::vector<float> attn_out;  // the attention output
  std::vector<float> ffn_in;    // RMSNorm(ffn_norm, hc_pre(X, preA))
  std::vector<float> ffn_out;   // the MoE output

  void OnAttentionSublayer(int32_t /*layer*/, std::span<const float> in,
                           std::span<const float> out) override {
    attn_in.insert(attn_in.end(), in.begin(), in.end());
    attn_out.insert(attn_out.end(), out.begin(), out.end());
  }
  void OnFfnSublayer(int32_t /*layer*/, std::span<const float> in,
                     std::span<const float> out) override {
    ffn_in.insert(ffn_in.end(), in.begin(), in.end());
    ffn_out.insert(ffn_out.end(), out.begin(), out.end());
  }
};

// Where Forward writes its results.
struct ForwardOutputs {
  std::span<float> logits = {};       // [batch.logit_rows.size(), vocab] fp32
  std::span<float> main_hidden = {};  // [batch.main_hidden_rows.size(), MainHiddenWidth()]
};

// The backbone, the final norm and the head of a loaded model. Immutable after Load (views into
// the ModelWeights, which must outlive it). Forward is engine thread only.
class TextModel {
 public:
  // Builds every layer's modules as its role in the plan says (attention; compressor on kv
  // sources; indexer on index sources; Engram fusion on Engram layers; MoE; mHC sites; norms).
  // Errors name the tensor.
  static Result<std::unique_ptr<TextModel>> Load(const ModelWeights& weights);

  const ModelConfig& config() const { return config_; }
  // A first size for the step arena of steps of up to `max_tokens` tokens: the largest
  // per-token temporaries of one layer. The arena grows to its high-water mark if this is short.
  size_t StepScratchBytes(int32_t max_tokens) const;
  const LayerPlan& plan() const { return plan_; }
  int32_t vocab_size() const { return config_.vocab_size; }

  // Runs `batch`: request i writes the rows of its new positions into `cache` through its block
  // tables and reads its earlier ones (the caller guarantees they hold positions 0 ..
  // start_pos − 1 of that request). out.logits receives [logit_rows.size(), vocab] fp32.
  // InvalidArgument (naming the request, group or row) for a malformed batch, before any cache
  // row changes: rows not covering the tokens, a block table missing a block the step touches, a
  // cache laid out for another model, a token id outside the vocabulary, bad Engram rows.
  // Temporaries come from ctx.arena (given back before returning); work is split over ctx.pool,
  // whose thread count never changes a bit; weight products accumulate as ctx.numerics says.
  // out.main_hidden receives [main_hidden_rows.size(), MainHiddenWidth()]: for each of
  // batch.main_hidden_rows, bf16(fp32(Σ_k X[k]) / hc_mult) of the streams entering each DSpark
  // target layer (after its Engram fusion), in dspark_target_layer_ids order (model.md §11.2).
  //
  // engram_rows: the step's Engram rows (batch.engram_rows), fetched ahead by the engine's
  // prefetcher (engine/engram_prefetch.h) or read when asked (SyncEngramStepRows, e.g.
  // MappedEngramRows); each Engram layer waits for its own rows right before its fusion, and a
  // storage error ends the forward with that error (the cache rows of earlier layers are then
  // written; the caller fails the step's requests). The logits are the same bits from any tier.
  Status Forward(const Batch& batch, const KvCacheView& cache, EngramStepRows& engram_rows,
                 ForwardOutputs out, ExecContext& ctx) const;

  // The Engram tables read straight from the checkpoint mapping, in Engram slot order, as a
  // synchronous EngramStepRows (StartStep it with each batch's engram_rows). Views into the
  // ModelWeights; no tables without Engram layers.
  SyncEngramStepRows MappedEngramRows() const;

  // Floats of one row of main_hidden: len(dspark_target_layer_ids) × hidden_size.
  int64_t MainHiddenWidth() const;

 private:
  struct Layer {
    LayerRole role;
    std::unique_ptr<dsv41::Attention> attention;
    std::unique_ptr<Compressor> compressor;  // kv sources only
    std::unique_ptr<Indexer> indexer;        // index sources only
    std::unique_ptr<EngramFusion> engram;    // Engram layers only
    std::unique_ptr<Moe> moe;
    HcBlockWeights hc;
  };

  TextModel() = default;

  Status CheckBatch(const Batch& batch, const KvCacheView& cache, size_t logits_size,
                    size_t main_hidden_size) const;

  ModelConfig config_;
  LayerPlan plan_;
  MhcDims dims_;
  float norm_eps_ = 0.0f;
  HeadWeights head_;
  std::vector<Layer> layers_;
};

}  // namespace dsv41

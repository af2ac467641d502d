#pragma once

// The Engram module of one Engram layer (model.md §9.6, §3): the token's table rows are gathered
// and dequantised, projected by `engram.wkv`, and fused into the 4 residual streams through a
// per-stream gate. Row ids come from engram/ (ComputeEngramRows) as plain int64 spans; the rows
// themselves come through engram/engram_rows.h.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/exec_context.h"
#include "base/status.h"
#include "engram/engram_rows.h"
#include "kernels/linear.h"

namespace dsv41 {

class ModelWeights;

// Dequantises `n` rows (model.md §9.6): out[i·row_dim + d] =
// bf16(e4m3(values[i·row_dim + d]) · 2^(scales[i·row_dim/32 + d/32] − 127)), as fp32.
void DequantizeEngramRows(std::span<const std::byte> values, std::span<const std::byte> scales,
                          int32_t row_dim, int64_t n, std::span<float> out);

// One Engram layer's module: `layers.N.engram.{embed,wkv,q_weight,k_weight}`. Sizes come from the
// config (hidden_size, hc_mult, n_hash_cols, engram_head_dim). Views into the ModelWeights it was
// loaded from, which must outlive it, plus the fp32 product q_weight ⊙ k_weight [hc_mult, hidden].
// Move-only; the methods keep no state.
class EngramFusion {
 public:
  // `layer` must have an Engram slot in the layer plan (InvalidArgument otherwise); errors name
  // the tensor.
  static Result<EngramFusion> Load(const ModelWeights& weights, int32_t layer);

  // The table of this layer read straight from the checkpoint mapping (used by Forward here and
  // by TextModel::MappedEngramRows).
  const EngramRowSource& resident_rows() const { return *resident_rows_; }

  int32_t num_cols() const { return num_cols_; }  // rows per token (n_hash_cols)
  int32_t row_dim() const { return row_dim_; }    // engram_head_dim
  int32_t engram_in() const { return num_cols_ * row_dim_; }
  int32_t engram_out() const { return (hc_mult_ + 1) * hidden_; }
  int32_t hc_mult() const { return hc_mult_; }
  int32_t hidden_size() const { return hidden_; }

  // e [T, engram_in] = the num_cols rows of each token (row_ids [T, num_cols], column order)
  // read from `source` and dequantised, concatenated in column order (bf16 values as fp32).
  // Errors come from the source (a row outside the table).
  // Scratch comes from ctx.arena.
  Status GatherRows(const EngramRowSource& source, std::span<const int64_t> row_ids,
                    int64_t num_tokens, std::span<float> e, ExecContext& ctx) const;

  // As GatherRows from rows fetched ahead: e[t, c] = the dequantised fetched row index[t·num_cols
  // + c]. Sizes are checked (caller bugs). Split over ctx.pool; bits do not depend on it.
  void GatherFetched(const EngramFetchedRows& rows, int64_t num_tokens, std::span<float> e,
                     ExecContext& ctx) const;

  // kv [T, engram_out] = bf16(wkv · e), activation-quantised when wkv is FP8 (§12.4). It does not
  // depend on the streams: it may run as soon as the rows arrive.
  void Project(std::span<const float> e, int64_t num_tokens, std::span<float> kv,
               ExecContext& ctx) const;

  // Fuses kv into streams [T, hc_mult, hidden] (bf16 values as fp32, updated in place), §9.6:
  // per stream j, r = rsqrt(ms(H) + eps)·rsqrt(ms(K_j) + eps), dot = fp32(Σ_d
  // fp32(fp32(H·w_j)·K_j)) (each product rounded to fp32, their sum exact) · r · fp32(hidden^−½),
  // gate = sigmoid(signed sqrt(max(|dot|, 1e-6))), 0 for a dead token; H ← bf16(H + fp32(gate ·
  // V)). gate [T, hc_mult] receives the gates (may be empty). dead: empty (text) or [T], nonzero
  // inside an image span. Work is split over ctx.pool; results do not depend on it.
  void Fuse(std::span<const float> kv, int64_t num_tokens, std::span<float> streams,
            std::span<float> gate, std::span<const uint8_t> dead, ExecContext& ctx) const;

  // GatherRows from the resident table, Project and Fuse.
  Status Forward(std::span<const int64_t> row_ids, int64_t num_tokens, std::span<float> streams,
                 std::span<float> gate, ExecContext& ctx, std::span<const uint8_t> dead = {}) const;
  // GatherFetched, Project and Fuse: the same bits as Forward over the same rows.
  void ForwardFetched(const EngramFetchedRows& rows, int64_t num_tokens, std::span<float> streams,
                      std::span<float> gate, ExecContext& ctx,
                      std::span<const uint8_t> dead = {}) const;

 private:
  EngramFusion() = default;

  // Fuse of one token; scratch: hidden_size floats.
  void FuseToken(const float* kv, float* streams, float* gate, bool dead,
                 std::span<float> scratch) const;

  std::unique_ptr<MappedEngramRowSource> resident_rows_;
  LinearWeight wkv_;
  std::vector<float> qk_;  // fp32(q_weight ⊙ k_weight) [hc_mult, hidden]
  int32_t num_cols_ = 0;
  int32_t row_dim_ = 0;
  int32_t hc_mult_ = 0;
  int32_t hidden_ = 0;
  float eps_ = 0.0f;              // fp32(rms_norm_eps)
  float inv_sqrt_hidden_ = 0.0f;  // fp32(hidden^−½)
};

}  // namespace dsv41

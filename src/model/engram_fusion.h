#pragma once

// The Engram module of one Engram layer (model.md §9.6, §3): the token's table rows are gathered
// and dequantised, projected by `engram.wkv`, and fused into the 4 residual streams through a
// per-stream gate. Row ids come from engram/ (ComputeEngramRows) as plain int64 spans: this layer
// sits below engram/ and does not hash.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/exec_context.h"
#include "base/status.h"
#include "kernels/linear.h"

namespace dsv41 {

class ModelWeights;

// What an Engram row store did since it was opened (cumulative; thread-safe snapshots).
struct EngramStoreCounters {
  uint64_t rows_fetched = 0;  // rows asked for (by FillRows and WarmRows)
  uint64_t cache_hits = 0;    // of those, served from the hot-row cache (disk tier)
  uint64_t rows_read = 0;     // of those, read from the file (disk tier)
  uint64_t pages_read = 0;    // distinct 4 KiB pages read (disk tier)
  uint64_t bytes_read = 0;    // bytes read from the file (disk tier)
  uint64_t read_errors = 0;   // fetches that failed (a read error or a short read)
};

// The store of one Engram layer's table (serving.md §8.2): where its rows come from — a copy in
// anonymous memory (resident), the checkpoint mapping (mapped), or the file through pread and a
// hot-row cache (disk; model/engram_store.h). A row is `row_dim` e4m3 values and row_dim/32
// ue8m0 scales (one per 32 values), exactly as `engram.embed.weight` / `engram.embed.scale`
// store it: every tier returns the stored bytes unchanged, and the dequantisation is shared code
// after the fetch (DequantizeEngramRows). Implementations are thread-safe.
class EngramRowSource {
 public:
  virtual ~EngramRowSource() = default;

  virtual int64_t num_rows() const = 0;
  virtual int32_t row_dim() const = 0;

  // For each i, copies row row_ids[i] into values[i·row_dim ..] (e4m3 bytes) and
  // scales[i·row_dim/32 ..] (ue8m0 bytes). OutOfRange naming the table and the row when a row id
  // is outside [0, num_rows); DataLoss or IoError naming the file and tensor when the storage
  // fails (a read error, a short read), in which case the outputs must not be used.
  // values.size() = n·row_dim, scales.size() = n·row_dim/32 (checked).
  virtual Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                          std::span<std::byte> scales) const = 0;

  // A hint that these rows are wanted soon (the next prefill chunk): the disk tier reads the
  // missing ones into its hot-row cache. No output; errors only count.
  virtual Status WarmRows(std::span<const int64_t> row_ids) const {
    (void)row_ids;
    return OkStatus();
  }
  // Forgets what is cached (hot rows; the table files' pages in the page cache), for cold-start
  // measurements. Not while a fetch runs.
  virtual Status DropCaches() { return OkStatus(); }
  // Bytes this store holds in memory of its own (the resident copy, the hot-row cache).
  virtual uint64_t resident_bytes() const { return 0; }
  virtual EngramStoreCounters counters() const { return {}; }
};

// The rows of one Engram layer for one step, fetched ahead of the forward: `values` [U, row_dim]
// and `scales` [U, row_dim/32] hold the U distinct rows, `index` [T·num_cols] says which of them
// each (token, column) reads. Views into the fetcher's persistent buffers.
struct EngramFetchedRows {
  std::span<const std::byte> values;
  std::span<const std::byte> scales;
  std::span<const int32_t> index;
};

// Where the forward waits for a step's Engram rows (engine/engram_prefetch.h): the fetch was
// submitted before the forward began; WaitForLayer blocks until that Engram slot's rows are in
// (a per-layer completion) and returns them, or the storage's error.
class EngramStepRows {
 public:
  virtual ~EngramStepRows() = default;
  virtual Result<EngramFetchedRows> WaitForLayer(int32_t engram_slot) = 0;
};

// The rows read straight from the checkpoint mapping of `<prefix>.engram.embed.{weight,scale}`.
// A view: the ModelWeights must outlive it.
class MappedEngramRowSource final : public EngramRowSource {
 public:
  // Errors name the tensor: missing, wrong dtype (F8_E4M3 / F8_E8M0), wrong rank or shape, a row
  // width that is not a multiple of 32.
  static Result<MappedEngramRowSource> Open(const ModelWeights& weights, int32_t layer);

  int64_t num_rows() const override { return num_rows_; }
  int32_t row_dim() const override { return row_dim_; }
  Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                  std::span<std::byte> scales) const override;

 private:
  MappedEngramRowSource() = default;

  std::string name_;  // "layers.N.engram.embed" for messages
  std::span<const std::byte> values_;
  std::span<const std::byte> scales_;
  int64_t num_rows_ = 0;
  int32_t row_dim_ = 0;
};

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

  // The table of this layer read straight from the checkpoint mapping (used by Forward).
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

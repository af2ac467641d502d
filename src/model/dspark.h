#pragma once

// DSpark, the draft network of model.md §11: `num_nextn_predict_layers` stages (`mtp.0..`) run in
// sequence as hyper-connected blocks (§4.4) with SWA-only attention over the stage's own window and
// a small MoE, then the shared head, a sequential Markov head and a confidence head. The main
// forward records main_hidden (TextModel::Forward); SeedWindows turns it into main_x and stores
// each stage's window row of every main position; Draft proposes a block of tokens after the last
// main position. The windows live in the paged cache as the G_DRAFT rows (KvCacheLayout::draft),
// addressed by absolute position like SWA rows, so a rejected verify position is rolled back by
// truncation and prefix caching and preemption cover them (serving.md §3.6, §7.2).

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/exec_context.h"
#include "base/status.h"
#include "config/config.h"
#include "kernels/linear.h"
#include "kv/kv_layout.h"
#include "model/attention.h"
#include "model/batch.h"
#include "model/hc_block.h"
#include "model/head.h"
#include "model/mhc.h"
#include "model/moe.h"
#include "model/norm.h"

namespace dsv41 {

class ModelWeights;

// One request's draft step (model.md §11.4): the main model has consumed positions 0 .. last_pos
// (the stage windows hold them) and sampled `token` (t1) for position last_pos + 1.
struct DraftRequest {
  int32_t token = 0;
  int32_t last_pos = 0;
  // The request's block tables of every cache group (its G_DRAFT tables are read).
  std::span<const std::vector<uint32_t>> block_tables;
};

// The drafts of R requests, block size B.
struct DraftResult {
  std::vector<int32_t> tokens;    // [R, B]: o[1..B], for positions last_pos + 2 ..
  std::vector<float> confidence;  // [R, B]: the confidence head's raw (pre-sigmoid) c_i
  std::vector<float> logits;      // [R, B, vocab] U incl. the Markov bias (only when asked)
};

// Immutable after Load (views into the ModelWeights, which must outlive it). Engine thread only
// (uses the context's pool and arena).
class DsparkModel {
 public:
  // Builds every stage from the plan's stage count (errors name the tensor; a config without
  // stages is InvalidArgument). The weights must have been loaded with include_dspark.
  static Result<std::unique_ptr<DsparkModel>> Load(const ModelWeights& weights);

  int32_t num_stages() const { return static_cast<int32_t>(stages_.size()); }
  int32_t block_size() const { return config_.dspark_block_size; }
  int32_t vocab_size() const { return config_.vocab_size; }
  // Floats of one main_hidden row (TextModel::MainHiddenWidth).
  int64_t main_hidden_width() const { return main_proj_.in; }

  // model.md §11.2–11.3: main_x = RMSNorm(main_norm, main_proj · main_hidden) of every row, then
  // each stage stores fq8_b32(rope(RMSNorm(kv_norm, wkv · main_x), q, main)) as its window row of
  // the row's position q. main_hidden: [T, main_hidden_width()]; `rows` lays the T rows out by
  // request (first_row into main_hidden, start_pos = the position of its first row, the request's
  // block tables). InvalidArgument, before any row is written, when a draft table lacks a block.
  Status SeedWindows(std::span<const float> main_hidden, std::span<const BatchRequest> rows,
                     const KvCacheView& cache, ExecContext& ctx) const;

  // model.md §11.4 for every request at once: the block [t1, N, …] at positions last_pos + 1 ..,
  // the stages, the final collapse and norm, the shared head, the Markov head (greedy, the lowest
  // id on ties) and the confidence head. `out` is resized; logits are filled when want_logits.
  // InvalidArgument when a request's window blocks are missing or a token id is out of range.
  Status Draft(std::span<const DraftRequest> requests, const KvCacheView& cache, bool want_logits,
               DraftResult& out, ExecContext& ctx) const;

 private:
  struct Stage {
    std::unique_ptr<Attention> attention;
    std::unique_ptr<Moe> moe;
    HcBlockWeights hc;
  };

  DsparkModel() = default;

  // InvalidArgument unless every draft table of `r` holds the blocks of positions
  // [first_pos, last_pos] (nothing to check when first_pos > last_pos).
  Status CheckWindowBlocks(const KvCacheView& cache, std::span<const std::vector<uint32_t>> tables,
                           int64_t first_pos, int64_t last_pos) const;
  // model.md §11.4 steps 4–5: the Markov head over each request's block, sequential from its
  // token (adding its bias to `logits` [rows, vocab] in place), then every row's confidence from
  // [z ; e]; fills out.tokens and out.confidence.
  void MarkovTokens(std::span<const DraftRequest> requests, std::span<const float> z,
                    std::span<float> logits, DraftResult& out, ExecContext& ctx) const;

  ModelConfig config_;
  MhcDims dims_;
  float norm_eps_ = 0.0f;
  HeadWeights head_;                         // the shared embedding and head
  LinearWeight main_proj_;                   // mtp.0.main_proj [hidden, n_targets · hidden]
  NormWeight main_norm_;                     // mtp.0.main_norm
  NormWeight final_norm_;                    // mtp.<last>.norm
  std::span<const std::byte> markov_embed_;  // mtp.<last>.markov_head.embed bf16 [vocab, rank]
  LinearWeight markov_head_;                 // mtp.<last>.markov_head.head [vocab, rank]
  LinearWeight confidence_;                  // mtp.<last>.confidence_head.proj [1, hidden + rank]
  std::vector<Stage> stages_;
};

}  // namespace dsv41

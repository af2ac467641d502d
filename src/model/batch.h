#pragma once

// The per-step batch (serving.md §2): the flattened new tokens of every scheduled request, where
// each request's tokens sit, and the block tables through which the forward reaches its cache rows.
// The scheduler and the model meet in this plain struct: no policy, no tensors.

#include <cstdint>
#include <vector>

#include "kv/batch_request.h"

namespace dsv41 {

// One forward step: the new tokens of every scheduled request, flattened in request order, and
// which rows need logits.
struct Batch {
  std::vector<int32_t> token_ids;      // [T]
  std::vector<BatchRequest> requests;  // consecutive, covering [0, T)
  // [T, n_engram_layers, n_hash_cols] global table rows of every new token (engram/row_ids.h);
  // empty when the model has no Engram layer.
  std::vector<int64_t> engram_rows;
  // Rows of token_ids whose logits are wanted, ascending; logits_out holds them in this order.
  std::vector<int32_t> logit_rows;
  // Rows of token_ids whose DSpark main_hidden (model.md §11.2) is wanted, ascending; empty when
  // nothing drafts (the forward then records nothing).
  std::vector<int32_t> main_hidden_rows;
  // Image spans (vision.md §10, §11): both empty when no row of the step lies in a span; else
  // [T] each: the row's SpanRole (vision/image_span.h; −1 text) and, for a span row, the
  // hidden_size values of h it takes instead of its token's embedding (its aligner row, or the
  // learned START / NEWLINE / END row; bf16 values). A span row is dead for Engram and routes
  // with bias_vl; the ids of span rows are never read.
  std::vector<int8_t> span_roles;
  std::vector<const float*> span_rows;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

}  // namespace dsv41

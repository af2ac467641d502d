#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "engram/hash_constants.h"
#include "engram/token_map.h"

namespace dsv41 {

// Engram row ids (model.md §9.4, §9.5). They are a pure function of a request's class ids and
// dead mask by absolute position, so prefill, chunked prefill, decode, prefix-cache hits,
// recompute and speculative rollback all hash identically from the request's token list (truncate
// it to roll back; nothing carries between requests). `class_ids` and `dead` are indexed by
// absolute position, from the request's first token.

// Maps token ids to class ids; InvalidArgument naming the position and token when a token id is
// outside the map. `class_ids` has the size of `token_ids`.
Status MapTokensToEngramClasses(const EngramTokenMap& token_map, std::span<const int32_t> token_ids,
                                std::span<int32_t> class_ids);

// The lookback ids x[0..G−1] of position `pos`, newest first (§9.4 step 1): x[s] is the class at
// pos − s until the walk reaches the sequence start or a dead token; from there on (sticky) x[s]
// is `pad_class_id`. A dead current token gives all pads. `class_ids` are indexed by absolute
// position; `dead` is empty (no dead token) or one flag per class id (nonzero = inside an image
// span). Requires pos < class_ids.size() and x.size() = G.
void EngramLookback(std::span<const int32_t> class_ids, std::span<const uint8_t> dead, int64_t pos,
                    int32_t pad_class_id, std::span<int64_t> x);

// The rows of one Engram layer from lookback ids (§9.4 step 2): a rolling xor of x[n] · m[n] in
// 64-bit unsigned arithmetic; after each order n + 1 (n >= 1), each head k gives
// row[(n − 1)·H + k] = h mod prime + offset. `rows` has (G − 1)·H entries.
void HashEngramLookback(const EngramLayerHashConstants& layer, int32_t n_heads,
                        std::span<const int64_t> x, std::span<int64_t> rows);

// Rows of positions first_pos .. first_pos + num_pos − 1 of one request into
// out[num_pos, num_layers, num_cols] (global row indices into each layer's table). Only the
// positions p − (G − 1) .. p of `class_ids` and `dead` are read for position p. Requires those
// positions to exist and out.size() = num_pos · num_layers · num_cols (caller bugs otherwise).
void ComputeEngramRows(const EngramHashConstants& constants, std::span<const int32_t> class_ids,
                       std::span<const uint8_t> dead, int64_t first_pos, int64_t num_pos,
                       std::span<int64_t> out);

}  // namespace dsv41

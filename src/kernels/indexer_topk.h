#pragma once

// The model-agnostic halves of the lightning indexer (model.md §7.5 steps 3 and 6): the score of
// one query against many index keys (the scalar reference of index_score_tile.h's kernel), and the
// top-k entry list (a reference and a twin with the same results).

#include <cstdint>
#include <span>

namespace dsv41 {

// Step 3 for one token: with `heads` = w.size() and dim = q.size() / heads,
//   scores[e] = bf16(Σ_h bf16(w[h] · relu(bf16(q[h] · keys[e])))),
// each dot product (over dim values) and the head sum exact and rounded once (§12.8 item 2), then
// to bf16; relu(x) = x > 0 ? x : +0. q: [heads, dim], keys: [scores.size(), dim].
void IndexerScoresRef(std::span<const float> q, std::span<const float> w,
                      std::span<const float> keys, std::span<float> scores);
// The forward scores with IndexerScoresTile (index_score_tile.h), which has these bits.

// Step 6: the indices of the min(k, n) highest of n = scores.size() scores, ties to the lower
// index, written to out[0 .. min(k, n)) in ascending index order (returns that count; k < 0 counts
// as 0). −inf is an ordinary value; −0 ties with +0; NaN is not allowed. scratch holds at least n
// ints, out at least min(k, n).
int32_t TopKAscendingRef(std::span<const float> scores, int32_t k, std::span<int32_t> scratch,
                         std::span<int32_t> out);
// The same result without a sort: the k-th highest key by selection, then one vectorised pass in
// index order keeps what is above it and the first ties.
int32_t TopKAscendingSimd(std::span<const float> scores, int32_t k, std::span<int32_t> scratch,
                          std::span<int32_t> out);

}  // namespace dsv41

#pragma once

// Sizes of the indexer's per-step buffers (model.md §7.5), kept apart from the kernels so they can
// be checked at the released context without allocating. All in 64 bits: at 1M context one
// request's [tokens, entries] score matrix passes 2^31 elements from 2048 tokens over a ratio-1
// source (real-weight-traps.md K3).

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dsv41 {

// Entries a ratio-`ratio` kv source has completed once a step of `num_tokens` new tokens from
// position `start_pos` has run: the columns of the step's score matrix (ratio > 0).
inline int64_t IndexerVisibleEntries(int64_t start_pos, int64_t num_tokens, int32_t ratio) {
  return (start_pos + num_tokens) / ratio;
}

// Elements of one request's [num_tokens, IndexerVisibleEntries] matrix: its bf16 scores (held as
// floats) and a candidate source's mask (one byte each).
inline size_t IndexerScoreElements(int64_t start_pos, int64_t num_tokens, int32_t ratio) {
  return static_cast<size_t>(num_tokens) *
         static_cast<size_t>(IndexerVisibleEntries(start_pos, num_tokens, ratio));
}

// Bytes of that score matrix as floats.
inline size_t IndexerScoreBytes(int64_t start_pos, int64_t num_tokens, int32_t ratio) {
  return IndexerScoreElements(start_pos, num_tokens, ratio) * sizeof(float);
}

// How many of a request's `num_tokens` new tokens one pass of the indexer scores, so that a
// pass's score matrix stays within `budget_bytes`: all of them when they fit, else the most that
// fit rounded down to a multiple of 16 (the tokens that share a decoded key tile), at least 16.
// A token's scores, top-k and candidates do not depend on the pass it is in.
inline int64_t IndexerTokensPerPass(int64_t start_pos, int64_t num_tokens, int32_t ratio,
                                    size_t budget_bytes) {
  if (IndexerScoreBytes(start_pos, num_tokens, ratio) <= budget_bytes) return num_tokens;
  const auto entries = static_cast<size_t>(IndexerVisibleEntries(start_pos, num_tokens, ratio));
  const int64_t fit = static_cast<int64_t>(budget_bytes / (entries * sizeof(float)));
  return std::min(num_tokens, std::max<int64_t>(16, fit / 16 * 16));
}

}  // namespace dsv41

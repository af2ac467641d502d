#pragma once

// The per-request token history (model.md §3, §9.5): every token of a request by absolute
// position, with its Engram class id and its dead flag (inside an image span). Engram row ids are
// a pure function of it, so prefill, chunked prefill and decode hash alike, and speculative
// rollback is a truncation. Pure data: the caller maps tokens to class ids (engram/) and hashes.

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// Engine thread only (one per request; nothing is shared between requests).
class TokenHistory {
 public:
  TokenHistory() = default;

  // Number of tokens (= the next absolute position).
  int64_t size() const { return static_cast<int64_t>(token_ids_.size()); }
  bool empty() const { return token_ids_.empty(); }

  // Appends tokens at positions size() .. size() + n − 1 with their class ids and dead flags.
  // class_ids.size() = token_ids.size(); dead is empty (text: none dead) or the same size.
  // InvalidArgument naming the sizes, or a negative class id and its position, otherwise (nothing
  // is appended then).
  Status Append(std::span<const int32_t> token_ids, std::span<const int32_t> class_ids,
                std::span<const uint8_t> dead = {});

  // Keeps the first `num_tokens` tokens (speculative rollback, a shortened prefix). OutOfRange
  // when num_tokens is negative or above size().
  Status Truncate(int64_t num_tokens);
  // Room for num_tokens positions without reallocating.
  void Reserve(int64_t num_tokens);

  // Forgets everything (the history of a new request).
  void Clear();

  // By absolute position 0 .. size() − 1, in the form ComputeEngramRows takes.
  std::span<const int32_t> token_ids() const { return token_ids_; }
  std::span<const int32_t> class_ids() const { return class_ids_; }
  // Empty while no token is dead; otherwise one flag per position (nonzero = dead).
  std::span<const uint8_t> dead() const {
    return num_dead_ == 0 ? std::span<const uint8_t>() : std::span<const uint8_t>(dead_);
  }

 private:
  std::vector<int32_t> token_ids_;
  std::vector<int32_t> class_ids_;
  std::vector<uint8_t> dead_;  // always size(): 0 or 1
  int64_t num_dead_ = 0;
};

}  // namespace dsv41

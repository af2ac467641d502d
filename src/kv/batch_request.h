#pragma once

// The cache-rows view of one request in a step: where its new tokens sit in the step's rows, at
// which positions, and the block tables through which the forward reaches its cache rows
// (kv_layout.h addresses rows through it). Defined here, below the model, so the model reads and
// writes cache rows only through this view and the layout.

#include <cstdint>
#include <span>
#include <vector>

namespace dsv41 {

// One request's slice of a Batch: tokens token_ids[first_row .. first_row + num_tokens − 1] at
// absolute positions start_pos .. start_pos + num_tokens − 1. start_pos is the number of positions
// already in the request's cache (its context length before this step).
struct BatchRequest {
  int32_t first_row = 0;
  int32_t num_tokens = 0;
  int32_t start_pos = 0;
  // The request's block table of each cache group (CachePlan::groups): logical block index →
  // block id, kNoBlock where no block is held. A view into the request's own tables.
  std::span<const std::vector<uint32_t>> block_tables;
};

}  // namespace dsv41

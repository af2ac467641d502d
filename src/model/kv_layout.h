#pragma once

// What the forward needs to know of the hybrid paged KV cache (serving.md §3): how rows are
// encoded (the profile) and the sentinel of an unallocated block. The cache plan (kv/) derives
// the full layout from the config and layer plan.

#include <cstdint>

namespace dsv41 {

// How cache rows are encoded (serving.md §3.4). Every profile stores the model's QAT values
// exactly; they differ only in bytes per row.
enum class KvProfile {
  kSeed,     // bf16 KV and SWA rows, index K in the seed's (index_head_dim + 2)-byte geometry
  kCompact,  // bf16 KV and SWA rows, packed index K
  kPacked,   // packed KV, index K and SWA rows; ring sized from num_speculative_tokens
};

// A block-table entry that holds no block: never allocated, or released by the sliding window.
inline constexpr uint32_t kNoBlock = 0xFFFFFFFFu;

}  // namespace dsv41

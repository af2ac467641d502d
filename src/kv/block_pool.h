#pragma once

// The global block-id pool of the hybrid paged KV cache (serving.md §3.2, §3.7, §4): reference
// counts, the LRU free queue, and the prefix-cache map from (group, block hash) to block id.
// Like vLLM's BlockPool: a released block keeps its hash (and its pages' content) until the
// queue hands it out again, so it can still serve a prefix hit; handing it out is an eviction.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// Chained hash of one full logical block (serving.md §4); keys are per (cache group, hash).
using BlockHash = uint64_t;

// Engine thread only.
class BlockPool {
 public:
  // Ids 0 .. num_blocks − 1, all free and uncached, queued in id order; hashes are keyed per group
  // 0 .. num_groups − 1. num_blocks < 2^32 − 1 (kNoBlock stays no id).
  BlockPool(uint32_t num_blocks, int32_t num_groups);

  uint32_t num_blocks() const { return num_blocks_; }
  int32_t num_groups() const { return num_groups_; }
  // Blocks with reference count 0 (in the free queue), cached or not.
  uint32_t num_free() const { return num_free_; }
  // Free blocks that still hold a prefix hash (evictable hits).
  uint32_t num_cached_free() const { return num_cached_free_; }

  // Takes n blocks from the head of the free queue (least recently released first), each with
  // reference count 1, in queue order. A taken block that held a hash loses it (an eviction: its
  // (group, hash) entry is dropped and num_evictions counts it). std::nullopt, with nothing
  // changed, when fewer than n blocks are free.
  std::optional<std::vector<uint32_t>> Allocate(uint32_t n);
  // The same into `blocks` (replaced; its capacity kept, so a step allocates nothing); false,
  // with nothing changed, when fewer than n blocks are free.
  bool Allocate(uint32_t n, std::vector<uint32_t>& blocks);

  // The block cached under (group, hash), referenced or free; std::nullopt on a miss.
  std::optional<uint32_t> Lookup(int32_t group, BlockHash hash) const;

  // +1 reference (a prefix hit); a free block leaves the free queue and keeps its hash.
  void Touch(uint32_t block);

  // −1 reference each, in order; a block reaching 0 goes to the free-queue tail, keeping its hash,
  // so the first released is the first evicted. Releasing a block with no reference is a bug.
  void Release(std::span<const uint32_t> blocks);

  // Registers the referenced `block` under (group, hash). false, with nothing changed, when that
  // key already names a block (duplicates are not merged: tables stay append-only) or the block
  // already holds a hash.
  bool Cache(int32_t group, BlockHash hash, uint32_t block);

  // Drops the hash of the referenced `block` (its content is about to change, e.g. a speculative
  // rollback inside a full block held by one request). false when it held none.
  bool Uncache(uint32_t block);

  uint32_t ref_count(uint32_t block) const;
  bool is_cached(uint32_t block) const;
  // Cached blocks handed out again by Allocate since construction.
  uint64_t num_evictions() const { return num_evictions_; }

  // Every block is free xor referenced; the free queue holds exactly the free blocks, once each,
  // with consistent links; every map entry names a block holding that (group, hash) and every
  // hashed block has its entry; the free and cached-free counts match. InternalError naming the
  // first bad block otherwise. O(num_blocks).
  Status CheckConsistency() const;

 private:
  void Unlink(uint32_t block);
  void PushBack(uint32_t block);
  void DropHash(uint32_t block);
  size_t HomeSlot(int32_t group, BlockHash hash) const;
  // The slot holding the block cached under (group, hash), or kNoSlot.
  size_t FindSlot(int32_t group, BlockHash hash) const;

  static constexpr int32_t kNoGroup = -1;
  static constexpr uint32_t kEmptySlot = 0xFFFFFFFFu;
  static constexpr size_t kNoSlot = ~size_t{0};

  uint32_t num_blocks_;
  // Intrusive doubly linked free queue over ids; index num_blocks_ is the sentinel (head = its
  // next, tail = its prev).
  std::vector<uint32_t> prev_;
  std::vector<uint32_t> next_;
  std::vector<uint32_t> ref_;
  std::vector<int32_t> hash_group_;  // kNoGroup when the block holds no hash
  std::vector<BlockHash> hash_;
  int32_t num_groups_;
  // The prefix-cache map (group, hash) → block: open addressing with linear probing over block
  // ids (kEmptySlot where free), the key of an entry being its block's (hash_group_, hash_).
  // A block holds at most one hash, so the entries never outnumber the blocks; the table is sized
  // once to a power of two >= 2 × num_blocks and never allocates afterwards.
  std::vector<uint32_t> slots_;
  size_t slot_mask_ = 0;
  uint32_t num_free_ = 0;
  uint32_t num_cached_free_ = 0;
  uint64_t num_evictions_ = 0;
};

}  // namespace dsv41

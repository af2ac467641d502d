#include "kv/block_pool.h"

#include "base/check.h"

namespace dsv41 {

BlockPool::BlockPool(uint32_t num_blocks, int32_t num_groups)
    : num_blocks_(num_blocks),
      prev_(static_cast<size_t>(num_blocks) + 1),
      next_(static_cast<size_t>(num_blocks) + 1),
      ref_(num_blocks, 0),
      hash_group_(num_blocks, kNoGroup),
      hash_(num_blocks, 0),
      num_groups_(num_groups) {
  DSV41_CHECK(num_blocks < 0xFFFFFFFFu, "%u blocks", num_blocks);
  DSV41_CHECK(num_groups >= 0, "%d groups", num_groups);
  size_t capacity = 2;
  while (capacity < 2 * static_cast<size_t>(num_blocks)) capacity *= 2;
  slots_.assign(capacity, kEmptySlot);
  slot_mask_ = capacity - 1;
  prev_[num_blocks_] = num_blocks_;
  next_[num_blocks_] = num_blocks_;
  for (uint32_t b = 0; b < num_blocks_; ++b) PushBack(b);
  num_free_ = num_blocks_;
}

void BlockPool::Unlink(uint32_t block) {
  next_[prev_[block]] = next_[block];
  prev_[next_[block]] = prev_[block];
  prev_[block] = next_[block] = block;
}

void BlockPool::PushBack(uint32_t block) {
  const uint32_t tail = prev_[num_blocks_];
  prev_[block] = tail;
  next_[block] = num_blocks_;
  next_[tail] = block;
  prev_[num_blocks_] = block;
}

size_t BlockPool::HomeSlot(int32_t group, BlockHash hash) const {
  uint64_t z = hash ^ (static_cast<uint64_t>(group) + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<size_t>(z ^ (z >> 31)) & slot_mask_;
}

size_t BlockPool::FindSlot(int32_t group, BlockHash hash) const {
  for (size_t i = HomeSlot(group, hash);; i = (i + 1) & slot_mask_) {
    const uint32_t block = slots_[i];
    if (block == kEmptySlot) return kNoSlot;
    if (hash_group_[block] == group && hash_[block] == hash) return i;
  }
}

void BlockPool::DropHash(uint32_t block) {
  const int32_t group = hash_group_[block];
  DSV41_CHECK(group != kNoGroup, "block %u holds no hash", block);
  size_t hole = FindSlot(group, hash_[block]);
  DSV41_CHECK(hole != kNoSlot && slots_[hole] == block,
              "block %u: its (group %d, hash) entry is missing", block, group);
  // Backward-shift deletion: every later entry of the probe run whose home does not lie in
  // (hole, its slot] moves into the hole, so lookups never meet a gap before their entry.
  for (size_t j = (hole + 1) & slot_mask_; slots_[j] != kEmptySlot; j = (j + 1) & slot_mask_) {
    const uint32_t moved = slots_[j];
    const size_t home = HomeSlot(hash_group_[moved], hash_[moved]);
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    slots_[hole] = moved;
    hole = j;
  }
  slots_[hole] = kEmptySlot;
  hash_group_[block] = kNoGroup;
  hash_[block] = 0;
}

std::optional<std::vector<uint32_t>> BlockPool::Allocate(uint32_t n) {
  std::vector<uint32_t> blocks;
  if (!Allocate(n, blocks)) return std::nullopt;
  return blocks;
}

bool BlockPool::Allocate(uint32_t n, std::vector<uint32_t>& blocks) {
  if (n > num_free_) return false;
  blocks.clear();
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t block = next_[num_blocks_];
    DSV41_CHECK(block != num_blocks_ && ref_[block] == 0, "free queue broken at %u", block);
    Unlink(block);
    if (hash_group_[block] != kNoGroup) {
      DropHash(block);
      --num_cached_free_;
      ++num_evictions_;
    }
    ref_[block] = 1;
    blocks.push_back(block);
  }
  num_free_ -= n;
  return true;
}

std::optional<uint32_t> BlockPool::Lookup(int32_t group, BlockHash hash) const {
  DSV41_CHECK(group >= 0 && group < num_groups(), "group %d of %d", group, num_groups());
  const size_t slot = FindSlot(group, hash);
  if (slot == kNoSlot) return std::nullopt;
  return slots_[slot];
}

void BlockPool::Touch(uint32_t block) {
  DSV41_CHECK(block < num_blocks_, "block %u of %u", block, num_blocks_);
  if (ref_[block] == 0) {
    Unlink(block);
    --num_free_;
    if (hash_group_[block] != kNoGroup) --num_cached_free_;
  }
  ++ref_[block];
}

void BlockPool::Release(std::span<const uint32_t> blocks) {
  for (const uint32_t block : blocks) {
    DSV41_CHECK(block < num_blocks_, "block %u of %u", block, num_blocks_);
    DSV41_CHECK(ref_[block] > 0, "releasing block %u with no reference", block);
    if (--ref_[block] == 0) {
      PushBack(block);
      ++num_free_;
      if (hash_group_[block] != kNoGroup) ++num_cached_free_;
    }
  }
}

bool BlockPool::Cache(int32_t group, BlockHash hash, uint32_t block) {
  DSV41_CHECK(group >= 0 && group < num_groups(), "group %d of %d", group, num_groups());
  DSV41_CHECK(block < num_blocks_, "block %u of %u", block, num_blocks_);
  DSV41_CHECK(ref_[block] > 0, "caching unreferenced block %u", block);
  if (hash_group_[block] != kNoGroup) return false;
  size_t i = HomeSlot(group, hash);
  for (; slots_[i] != kEmptySlot; i = (i + 1) & slot_mask_) {
    const uint32_t other = slots_[i];
    if (hash_group_[other] == group && hash_[other] == hash) return false;
  }
  slots_[i] = block;  // a free slot exists: the entries never outnumber half the slots
  hash_group_[block] = group;
  hash_[block] = hash;
  return true;
}

bool BlockPool::Uncache(uint32_t block) {
  DSV41_CHECK(block < num_blocks_, "block %u of %u", block, num_blocks_);
  DSV41_CHECK(ref_[block] > 0, "uncaching unreferenced block %u", block);
  if (hash_group_[block] == kNoGroup) return false;
  DropHash(block);
  return true;
}

uint32_t BlockPool::ref_count(uint32_t block) const {
  DSV41_CHECK(block < num_blocks_, "block %u of %u", block, num_blocks_);
  return ref_[block];
}

bool BlockPool::is_cached(uint32_t block) const {
  DSV41_CHECK(block < num_blocks_, "block %u of %u", block, num_blocks_);
  return hash_group_[block] != kNoGroup;
}

Status BlockPool::CheckConsistency() const {
  std::vector<uint8_t> queued(num_blocks_, 0);
  uint32_t count = 0;
  uint32_t cached = 0;
  uint32_t prev = num_blocks_;
  for (uint32_t b = next_[num_blocks_]; b != num_blocks_; b = next_[b]) {
    if (b > num_blocks_) return InternalError("block pool: free queue links to id %u", b);
    if (queued[b]) return InternalError("block pool: block %u queued twice", b);
    if (prev_[b] != prev) {
      return InternalError("block pool: block %u: prev link %u, want %u", b, prev_[b], prev);
    }
    if (ref_[b] != 0) {
      return InternalError("block pool: block %u queued with %u references", b, ref_[b]);
    }
    queued[b] = 1;
    ++count;
    if (hash_group_[b] != kNoGroup) ++cached;
    prev = b;
  }
  if (prev_[num_blocks_] != prev) {
    return InternalError("block pool: queue tail %u, want %u", prev_[num_blocks_], prev);
  }
  for (uint32_t b = 0; b < num_blocks_; ++b) {
    if (ref_[b] == 0 && !queued[b]) {
      return InternalError("block pool: block %u is free but not queued", b);
    }
    const int32_t group = hash_group_[b];
    if (group == kNoGroup) continue;
    if (group < 0 || group >= num_groups()) {
      return InternalError("block pool: block %u holds a hash of group %d", b, group);
    }
    const size_t slot = FindSlot(group, hash_[b]);
    if (slot == kNoSlot || slots_[slot] != b) {
      return InternalError("block pool: block %u: its (group %d, hash %016llx) entry is missing", b,
                           group, static_cast<unsigned long long>(hash_[b]));
    }
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const uint32_t b = slots_[i];
    if (b == kEmptySlot) continue;
    if (b >= num_blocks_ || hash_group_[b] == kNoGroup) {
      return InternalError("block pool: map slot %zu names block %u, which holds no hash", i, b);
    }
    if (FindSlot(hash_group_[b], hash_[b]) != i) {
      return InternalError("block pool: map slot %zu (block %u) is not where its key leads", i, b);
    }
  }
  if (count != num_free_) {
    return InternalError("block pool: %u blocks queued, num_free %u", count, num_free_);
  }
  if (cached != num_cached_free_) {
    return InternalError("block pool: %u cached blocks queued, num_cached_free %u", cached,
                         num_cached_free_);
  }
  return OkStatus();
}

}  // namespace dsv41

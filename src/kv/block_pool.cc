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
      maps_(static_cast<size_t>(num_groups)) {
  DSV41_CHECK(num_blocks < 0xFFFFFFFFu, "%u blocks", num_blocks);
  DSV41_CHECK(num_groups >= 0, "%d groups", num_groups);
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

void BlockPool::DropHash(uint32_t block) {
  const int32_t group = hash_group_[block];
  DSV41_CHECK(group != kNoGroup, "block %u holds no hash", block);
  const size_t erased = maps_[static_cast<size_t>(group)].erase(hash_[block]);
  DSV41_CHECK(erased == 1, "block %u: its (group %d, hash) entry is missing", block, group);
  hash_group_[block] = kNoGroup;
  hash_[block] = 0;
}

std::optional<std::vector<uint32_t>> BlockPool::Allocate(uint32_t n) {
  if (n > num_free_) return std::nullopt;
  std::vector<uint32_t> blocks;
  blocks.reserve(n);
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
  return blocks;
}

std::optional<uint32_t> BlockPool::Lookup(int32_t group, BlockHash hash) const {
  DSV41_CHECK(group >= 0 && group < num_groups(), "group %d of %d", group, num_groups());
  const auto& map = maps_[static_cast<size_t>(group)];
  const auto it = map.find(hash);
  if (it == map.end()) return std::nullopt;
  return it->second;
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
  if (!maps_[static_cast<size_t>(group)].emplace(hash, block).second) return false;
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
    const auto& map = maps_[static_cast<size_t>(group)];
    const auto it = map.find(hash_[b]);
    if (it == map.end() || it->second != b) {
      return InternalError("block pool: block %u: its (group %d, hash %016llx) entry is missing", b,
                           group, static_cast<unsigned long long>(hash_[b]));
    }
  }
  for (int32_t g = 0; g < num_groups(); ++g) {
    for (const auto& [hash, b] : maps_[static_cast<size_t>(g)]) {
      if (b >= num_blocks_ || hash_group_[b] != g || hash_[b] != hash) {
        return InternalError(
            "block pool: (group %d, hash %016llx) names block %u, which holds no "
            "such key",
            g, static_cast<unsigned long long>(hash), b);
      }
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

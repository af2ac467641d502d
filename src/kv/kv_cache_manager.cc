#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "base/check.h"
#include "kv/kv_layout.h"

namespace dsv41 {
namespace {

// splitmix64's finalizer: a bijection of 64-bit words with full avalanche.
uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t TableSize(const RequestBlockTables& req, int32_t group) {
  if (req.tables.empty()) return 0;
  return static_cast<int64_t>(req.tables[static_cast<size_t>(group)].size());
}

}  // namespace

BlockHash HashBlockTokens(BlockHash parent, std::span<const int32_t> token_ids, uint64_t identity) {
  uint64_t h = Mix64(parent ^ 0x6B76626C6F636B31ull);  // "kvblock1": a domain tag
  h = Mix64(h ^ identity);
  for (const int32_t token : token_ids) h = Mix64(h ^ static_cast<uint32_t>(token));
  return Mix64(h ^ static_cast<uint64_t>(token_ids.size()));
}

BlockHash HashBlock(BlockHash parent, std::span<const int32_t> token_ids, int64_t block_begin,
                    std::span<const ContentKeyRange> content_keys, uint64_t identity) {
  BlockHash h = HashBlockTokens(parent, token_ids, identity);
  const int64_t block_end = block_begin + static_cast<int64_t>(token_ids.size());
  for (const ContentKeyRange& range : content_keys) {
    if (range.end <= block_begin || range.begin >= block_end) continue;
    h = Mix64(h ^ 0x696D6167655F6B31ull);  // "image_k1": a domain tag
    h = Mix64(h ^ range.key);
    h = Mix64(h ^ static_cast<uint64_t>(std::max(range.begin, block_begin) - block_begin));
    h = Mix64(h ^ static_cast<uint64_t>(std::min(range.end, block_end) - block_begin));
    h = Mix64(h ^ static_cast<uint64_t>(block_begin - range.begin));  // where in the span
  }
  return h;
}

KvCacheManager::KvCacheManager(const CachePlan& plan, uint32_t num_blocks,
                               const KvManagerOptions& options)
    : plan_(plan),
      options_(options),
      pool_(num_blocks, static_cast<int32_t>(plan.groups.size())),
      block_tokens_(plan.options.block_tokens),
      window_tokens_(std::max<int64_t>(plan.sliding_window, 1)) {
  DSV41_CHECK(block_tokens_ > 0, "block_tokens %d", block_tokens_);
  window_groups_ = plan_.swa_group_idx;
  window_groups_.insert(window_groups_.end(), plan_.draft_group_idx.begin(),
                        plan_.draft_group_idx.end());
}

bool KvCacheManager::IsWindowGroup(int32_t group) const {
  return std::find(window_groups_.begin(), window_groups_.end(), group) != window_groups_.end();
}

int64_t KvCacheManager::FirstWindowBlock(int64_t num_computed) const {
  return std::max<int64_t>(0, num_computed - window_tokens_ + 1) / block_tokens_;
}

void KvCacheManager::EnsureTables(RequestBlockTables& req) const {
  if (req.tables.empty()) {
    req.tables.resize(plan_.groups.size());
    return;
  }
  DSV41_CHECK(req.tables.size() == plan_.groups.size(), "%zu block tables for %zu groups",
              req.tables.size(), plan_.groups.size());
}

int64_t KvCacheManager::AcquirePrefix(std::span<const int32_t> token_ids, RequestBlockTables& req) {
  return AcquirePrefix(token_ids, {}, req);
}

int64_t KvCacheManager::AcquirePrefix(std::span<const int32_t> token_ids,
                                      std::span<const ContentKeyRange> content_keys,
                                      RequestBlockTables& req) {
  for (const std::vector<uint32_t>& table : req.tables) {
    DSV41_CHECK(table.empty(), "AcquirePrefix on a request that holds blocks");
  }
  DSV41_CHECK(req.block_hashes.empty() && req.num_cached_blocks == 0,
              "AcquirePrefix on a request with %zu block hashes", req.block_hashes.size());
  EnsureTables(req);
  if (!options_.enable_prefix_caching) return 0;
  const int64_t len = static_cast<int64_t>(token_ids.size());
  stats_.queried_tokens += static_cast<uint64_t>(len);
  const int32_t kv = plan_.kv_group_idx;
  if (kv < 0 && window_groups_.empty()) return 0;
  const int64_t max_blocks = len > 0 ? (len - 1) / block_tokens_ : 0;
  std::vector<BlockHash> hashes;
  hashes.reserve(static_cast<size_t>(max_blocks));
  BlockHash parent = kRootBlockHash;
  for (int64_t i = 0; i < max_blocks; ++i) {
    parent = HashBlock(parent,
                       token_ids.subspan(static_cast<size_t>(i * block_tokens_),
                                         static_cast<size_t>(block_tokens_)),
                       i * block_tokens_, content_keys, options_.identity);
    hashes.push_back(parent);
  }
  int64_t num_hit = max_blocks;
  if (kv >= 0) {
    num_hit = 0;
    while (num_hit < max_blocks && pool_.Lookup(kv, hashes[static_cast<size_t>(num_hit)])) {
      ++num_hit;
    }
  }
  // Downward search: the window groups need only the blocks covering [H − W, H).
  for (; num_hit > 0; --num_hit) {
    const int64_t first =
        std::max<int64_t>(0, num_hit * block_tokens_ - window_tokens_) / block_tokens_;
    bool all = true;
    for (size_t w = 0; all && w < window_groups_.size(); ++w) {
      for (int64_t i = first; all && i < num_hit; ++i) {
        all = pool_.Lookup(window_groups_[w], hashes[static_cast<size_t>(i)]).has_value();
      }
    }
    if (all) break;
  }
  if (num_hit == 0) return 0;
  const int64_t first =
      std::max<int64_t>(0, num_hit * block_tokens_ - window_tokens_) / block_tokens_;
  for (int32_t g = 0; g < static_cast<int32_t>(plan_.groups.size()); ++g) {
    if (g != kv && !IsWindowGroup(g)) continue;
    std::vector<uint32_t>& table = req.tables[static_cast<size_t>(g)];
    table.assign(static_cast<size_t>(num_hit), kNoBlock);
    for (int64_t i = (g == kv ? 0 : first); i < num_hit; ++i) {
      const std::optional<uint32_t> block = pool_.Lookup(g, hashes[static_cast<size_t>(i)]);
      DSV41_CHECK(block.has_value(), "group %d block %lld: hit vanished", g,
                  static_cast<long long>(i));
      pool_.Touch(*block);
      table[static_cast<size_t>(i)] = *block;
    }
  }
  req.block_hashes.assign(hashes.begin(), hashes.begin() + num_hit);
  req.num_cached_blocks = num_hit;
  const int64_t hit_tokens = num_hit * block_tokens_;
  stats_.hit_tokens += static_cast<uint64_t>(hit_tokens);
  return hit_tokens;
}

int64_t KvCacheManager::NumBlocksNeeded(const RequestBlockTables& req, int64_t num_computed,
                                        int64_t num_new) const {
  DSV41_CHECK(num_computed >= 0 && num_new >= 0, "step [%lld, +%lld)",
              static_cast<long long>(num_computed), static_cast<long long>(num_new));
  const int64_t end_blocks = CeilDiv(num_computed + num_new, block_tokens_);
  int64_t need = 0;
  if (plan_.kv_group_idx >= 0) {
    need += std::max<int64_t>(0, end_blocks - TableSize(req, plan_.kv_group_idx));
  }
  const int64_t first = FirstWindowBlock(num_computed);
  for (const int32_t g : window_groups_) {
    const int64_t size = TableSize(req, g);
    for (int64_t i = first; i < end_blocks; ++i) {
      if (i >= size || req.tables[static_cast<size_t>(g)][static_cast<size_t>(i)] == kNoBlock) {
        ++need;
      }
    }
  }
  if (plan_.ring_group_idx >= 0 && TableSize(req, plan_.ring_group_idx) == 0) ++need;
  return need;
}

bool KvCacheManager::Allocate(RequestBlockTables& req, int64_t num_computed, int64_t num_new) {
  EnsureTables(req);
  const int64_t first = FirstWindowBlock(num_computed);
  std::vector<uint32_t>& slid = scratch_;
  for (const int32_t g : window_groups_) {
    std::vector<uint32_t>& table = req.tables[static_cast<size_t>(g)];
    slid.clear();
    for (int64_t i = 0; i < std::min<int64_t>(first, static_cast<int64_t>(table.size())); ++i) {
      uint32_t& block = table[static_cast<size_t>(i)];
      if (block == kNoBlock) continue;
      slid.push_back(block);
      block = kNoBlock;
    }
    pool_.Release(slid);
  }
  const int64_t need = NumBlocksNeeded(req, num_computed, num_new);
  if (need > static_cast<int64_t>(pool_.num_free())) return false;
  std::vector<uint32_t>& fresh = scratch_;
  DSV41_CHECK(pool_.Allocate(static_cast<uint32_t>(need), fresh), "%lld blocks of %u free",
              static_cast<long long>(need), pool_.num_free());
  size_t next = 0;
  const int64_t end_blocks = CeilDiv(num_computed + num_new, block_tokens_);
  for (int32_t g = 0; g < static_cast<int32_t>(plan_.groups.size()); ++g) {
    std::vector<uint32_t>& table = req.tables[static_cast<size_t>(g)];
    if (g == plan_.ring_group_idx) {
      if (table.empty()) table.push_back(fresh[next++]);
      continue;
    }
    const int64_t from = g == plan_.kv_group_idx ? 0 : first;
    if (static_cast<int64_t>(table.size()) < end_blocks) {
      table.resize(static_cast<size_t>(end_blocks), kNoBlock);
    }
    for (int64_t i = from; i < end_blocks; ++i) {
      uint32_t& block = table[static_cast<size_t>(i)];
      if (block == kNoBlock) block = fresh[next++];
    }
  }
  DSV41_CHECK(next == fresh.size(), "used %zu of %zu new blocks", next, fresh.size());
  return true;
}

void KvCacheManager::CacheFullBlocks(RequestBlockTables& req, std::span<const int32_t> token_ids,
                                     int64_t num_computed) {
  CacheFullBlocks(req, token_ids, {}, num_computed);
}

void KvCacheManager::CacheFullBlocks(RequestBlockTables& req, std::span<const int32_t> token_ids,
                                     std::span<const ContentKeyRange> content_keys,
                                     int64_t num_computed) {
  if (!options_.enable_prefix_caching) return;
  EnsureTables(req);
  DSV41_CHECK(static_cast<int64_t>(token_ids.size()) >= num_computed,
              "%zu tokens for %lld positions", token_ids.size(),
              static_cast<long long>(num_computed));
  DSV41_CHECK(static_cast<int64_t>(req.block_hashes.size()) == req.num_cached_blocks,
              "%zu block hashes for %lld cached blocks", req.block_hashes.size(),
              static_cast<long long>(req.num_cached_blocks));
  const int64_t num_full = num_computed / block_tokens_;
  for (int64_t i = req.num_cached_blocks; i < num_full; ++i) {
    const BlockHash parent = i == 0 ? kRootBlockHash : req.block_hashes[static_cast<size_t>(i - 1)];
    const BlockHash hash = HashBlock(parent,
                                     token_ids.subspan(static_cast<size_t>(i * block_tokens_),
                                                       static_cast<size_t>(block_tokens_)),
                                     i * block_tokens_, content_keys, options_.identity);
    req.block_hashes.push_back(hash);
    for (int32_t g = 0; g < static_cast<int32_t>(plan_.groups.size()); ++g) {
      if (g == plan_.ring_group_idx) continue;
      const std::vector<uint32_t>& table = req.tables[static_cast<size_t>(g)];
      DSV41_CHECK(g != plan_.kv_group_idx || i < static_cast<int64_t>(table.size()),
                  "G_KV block %lld was never allocated", static_cast<long long>(i));
      if (i >= static_cast<int64_t>(table.size())) continue;
      const uint32_t block = table[static_cast<size_t>(i)];
      if (block != kNoBlock) (void)pool_.Cache(g, hash, block);
    }
  }
  req.num_cached_blocks = std::max(req.num_cached_blocks, num_full);
}

void KvCacheManager::Reserve(RequestBlockTables& req, int64_t max_tokens) {
  EnsureTables(req);
  const size_t blocks =
      static_cast<size_t>(CeilDiv(std::max<int64_t>(max_tokens, 0), block_tokens_));
  for (int32_t g = 0; g < static_cast<int32_t>(plan_.groups.size()); ++g) {
    if (g != plan_.ring_group_idx) req.tables[static_cast<size_t>(g)].reserve(blocks);
  }
  req.block_hashes.reserve(blocks);
}

void KvCacheManager::Free(RequestBlockTables& req) {
  std::vector<uint32_t>& blocks = scratch_;
  for (const std::vector<uint32_t>& table : req.tables) {
    blocks.clear();
    for (auto it = table.rbegin(); it != table.rend(); ++it) {
      if (*it != kNoBlock) blocks.push_back(*it);
    }
    pool_.Release(blocks);
  }
  req.tables.clear();
  req.block_hashes.clear();
  req.num_cached_blocks = 0;
}

void KvCacheManager::Truncate(RequestBlockTables& req, int64_t num_tokens) {
  DSV41_CHECK(num_tokens >= 0, "truncate to %lld", static_cast<long long>(num_tokens));
  if (req.tables.empty()) return;
  EnsureTables(req);
  const int64_t keep = CeilDiv(num_tokens, block_tokens_);
  const int64_t num_full = num_tokens / block_tokens_;
  const bool partial_was_offered =
      num_tokens % block_tokens_ != 0 && num_full < req.num_cached_blocks;
  std::vector<uint32_t>& blocks = scratch_;
  for (int32_t g = 0; g < static_cast<int32_t>(plan_.groups.size()); ++g) {
    if (g == plan_.ring_group_idx) continue;
    std::vector<uint32_t>& table = req.tables[static_cast<size_t>(g)];
    if (static_cast<int64_t>(table.size()) > keep) {
      blocks.clear();
      for (int64_t i = static_cast<int64_t>(table.size()) - 1; i >= keep; --i) {
        if (table[static_cast<size_t>(i)] != kNoBlock)
          blocks.push_back(table[static_cast<size_t>(i)]);
      }
      pool_.Release(blocks);
      table.resize(static_cast<size_t>(keep));
    }
    if (partial_was_offered && num_full < static_cast<int64_t>(table.size())) {
      const uint32_t block = table[static_cast<size_t>(num_full)];
      if (block != kNoBlock && pool_.is_cached(block)) {
        DSV41_CHECK(pool_.ref_count(block) == 1,
                    "truncating into cached block %u shared by %u requests", block,
                    pool_.ref_count(block));
        (void)pool_.Uncache(block);
      }
    }
  }
  req.num_cached_blocks = std::min(req.num_cached_blocks, num_full);
  if (static_cast<int64_t>(req.block_hashes.size()) > req.num_cached_blocks) {
    req.block_hashes.resize(static_cast<size_t>(req.num_cached_blocks));
  }
}

}  // namespace dsv41

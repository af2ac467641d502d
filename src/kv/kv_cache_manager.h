#pragma once

// Per-request block tables over the global block pool for every cache group of a CachePlan
// (serving.md §3.7) and prefix caching over them (serving.md §4), like vLLM's KVCacheManager with
// a full-attention manager for G_KV and sliding-window managers for the SWA / DSpark groups.

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "kv/block_pool.h"
#include "kv/cache_plan.h"

namespace dsv41 {

// Per-request state (owned by the engine's Request). Plain data: the manager fills it.
struct RequestBlockTables {
  // [plan group idx][logical block idx] → block id; kNoBlock where a window block slid out (or was
  // never needed after a prefix hit). G_RING holds one id (or none yet).
  std::vector<std::vector<uint32_t>> tables;
  // Chained hashes of the request's full blocks 0 .. size − 1 offered to the cache so far.
  std::vector<BlockHash> block_hashes;
  int64_t num_cached_blocks = 0;  // leading full blocks already offered to the cache
};

struct KvManagerOptions {
  bool enable_prefix_caching = true;
  // Model / profile / config identity, mixed into every block's hash, so caches of different
  // models or profiles never match.
  uint64_t identity = 0;
};

struct PrefixCacheStats {
  uint64_t queried_tokens = 0;  // prompt tokens offered to AcquirePrefix
  uint64_t hit_tokens = 0;      // of which served from the cache
};

// The parent of block 0 in the hash chain.
inline constexpr BlockHash kRootBlockHash = 0;

// Hash of one full block: a splitmix64-style chain over the parent's hash, the block's token ids
// (in order) and the identity. Equal tokens after different prefixes give different hashes.
BlockHash HashBlockTokens(BlockHash parent, std::span<const int32_t> token_ids, uint64_t identity);

// Positions whose content their token ids do not tell: an image span, whose positions all hold
// the placeholder id (vision.md §12). A block overlapping [begin, end) mixes `key` (the image's
// content hash, its plan, ...) and the overlap's bounds into its hash, so the same image at the
// same positions hits and any other image misses. A request's ranges are sorted and disjoint.
struct ContentKeyRange {
  int64_t begin = 0;
  int64_t end = 0;
  uint64_t key = 0;

  bool operator==(const ContentKeyRange&) const = default;
};

// HashBlockTokens of the block at positions [block_begin, block_begin + token_ids.size()), then
// for each range overlapping it its key and the overlap's offsets in the block. Without an
// overlapping range this is HashBlockTokens itself.
BlockHash HashBlock(BlockHash parent, std::span<const int32_t> token_ids, int64_t block_begin,
                    std::span<const ContentKeyRange> content_keys, uint64_t identity);

// Engine thread only.
class KvCacheManager {
 public:
  // A pool of num_blocks ids shared by all groups of `plan` (copied).
  KvCacheManager(const CachePlan& plan, uint32_t num_blocks, const KvManagerOptions& options);

  const CachePlan& plan() const { return plan_; }
  const BlockPool& pool() const { return pool_; }
  int32_t block_tokens() const { return block_tokens_; }
  const KvManagerOptions& options() const { return options_; }

  // A new request (tables empty) with prompt `token_ids`: the hit length H of serving.md §4 — the
  // largest multiple of B with H ≤ floor((len − 1) / B)·B such that G_KV blocks 0 .. H/B − 1 are
  // all cached and every SWA and draft group has cached the blocks covering [max(0, H − W), H);
  // searched downward. Takes a reference on each hit block and sizes the tables (G_KV and the
  // window groups get H/B entries, kNoBlock below each window group's first needed block; G_RING
  // stays empty). Sets block_hashes to the H/B hit hashes and num_cached_blocks to H/B. Returns H:
  // 0 when prefix caching is off (then stats are not counted either) or nothing hits. Counts
  // queried (len) and hit (H) tokens in stats.
  int64_t AcquirePrefix(std::span<const int32_t> token_ids, RequestBlockTables& req);
  // The same for a prompt with image spans: the blocks are hashed with HashBlock.
  int64_t AcquirePrefix(std::span<const int32_t> token_ids,
                        std::span<const ContentKeyRange> content_keys, RequestBlockTables& req);

  // New block ids Allocate(req, num_computed, num_new) would take (after its sliding free): G_KV
  // blocks missing for [0, end), each window group's missing (absent or kNoBlock) blocks for
  // [max(0, num_computed − W + 1), end), and one G_RING id when the group exists and the request
  // has none; end = num_computed + num_new.
  int64_t NumBlocksNeeded(const RequestBlockTables& req, int64_t num_computed,
                          int64_t num_new) const;

  // Prepares a step writing positions [num_computed, num_computed + num_new): first releases the
  // window (SWA, draft) blocks whose positions all lie below num_computed − W + 1 (sliding free;
  // the slot becomes kNoBlock; they stay cached until evicted), then allocates every block
  // NumBlocksNeeded counts. All or nothing: false, with no block allocated (the sliding free
  // stands), when the pool has fewer free blocks (evictable cached ones count as free).
  bool Allocate(RequestBlockTables& req, int64_t num_computed, int64_t num_new);

  // After a step that brought the request to num_computed positions: every full block entirely
  // below num_computed not yet offered is hashed (HashBlockTokens chained from the previous block)
  // and offered to the pool in every group but G_RING (window blocks that already slid out are
  // skipped; a key another block already holds is left as it is). token_ids holds the request's
  // tokens by position, at least num_computed of them, and must be final (accepted) there: a
  // cached block is shared by later hits. No-op when prefix caching is off.
  void CacheFullBlocks(RequestBlockTables& req, std::span<const int32_t> token_ids,
                       int64_t num_computed);
  // The same for a request with image spans (the blocks hashed with HashBlock).
  void CacheFullBlocks(RequestBlockTables& req, std::span<const int32_t> token_ids,
                       std::span<const ContentKeyRange> content_keys, int64_t num_computed);

  // Reserves the request's tables and hashes for max_tokens positions, so that the steps that
  // reach them allocate nothing.
  void Reserve(RequestBlockTables& req, int64_t max_tokens);

  // Releases every block of the request (finish, abort, preemption), each group's last logical
  // block first (so tails are evicted before the prefixes they extend), and clears it.
  void Free(RequestBlockTables& req);

  // Rollback to num_tokens positions (speculative rejection): in every group but G_RING releases
  // the blocks past the one holding position num_tokens − 1 (all of them for 0); keeps
  // block_hashes and num_cached_blocks only for the full blocks below num_tokens. The kept block
  // holding num_tokens − 1 is about to be rewritten past it: if it was offered to the cache its
  // hash is dropped, which requires that no other request holds it (a bug otherwise: offer only
  // accepted tokens). Window blocks that slid out stay kNoBlock; Allocate gives fresh ones if the
  // window later reaches back over them.
  void Truncate(RequestBlockTables& req, int64_t num_tokens);

  const PrefixCacheStats& stats() const { return stats_; }
  // The pool's consistency (BlockPool::CheckConsistency).
  Status CheckConsistency() const { return pool_.CheckConsistency(); }

 private:
  bool IsWindowGroup(int32_t group) const;
  // First logical block a step starting at num_computed still needs in a window group.
  int64_t FirstWindowBlock(int64_t num_computed) const;
  void EnsureTables(RequestBlockTables& req) const;

  CachePlan plan_;
  KvManagerOptions options_;
  BlockPool pool_;
  int32_t block_tokens_;
  int64_t window_tokens_;               // W
  std::vector<int32_t> window_groups_;  // SWA then draft group indexes
  PrefixCacheStats stats_;
  std::vector<uint32_t> scratch_;  // block ids in flight inside one call (capacity kept)
};

}  // namespace dsv41

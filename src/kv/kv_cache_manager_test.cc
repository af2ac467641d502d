#include "kv/kv_cache_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/layer_plan.h"
#include "kv/block_pool.h"
#include "kv/cache_plan.h"
#include "kv/kv_layout.h"

namespace dsv41 {
namespace {

using ::testing::ElementsAre;

constexpr uint32_t kNo = kNoBlock;

// checkpoint.md §8.2 "tiny-v41" (as in cache_plan_test.cc): 10 layers, ratios
// {0, 0, 2, 2, 2, 2, 1, 1, 1, 1}, kv sources {2, 4, 6} (3 slots), window W = 8, 3 DSpark stages.
ModelConfig TinyConfig() {
  ModelConfig config;
  config.num_hidden_layers = 10;
  config.num_nextn_predict_layers = 3;
  config.head_dim = 64;
  config.index_head_dim = 32;
  config.sliding_window = 8;
  config.compress_ratios = {0, 0, 2, 2, 2, 2, 1, 1, 1, 1};
  config.kv_source_layer_ids = {2, 4, 6};
  config.index_source_layer_ids = {2, 4, 6};
  config.max_position_embeddings = 1024;
  return config;
}

// B = 4 (a multiple of the ratios 1 and 2, W / 2): groups kv, ring, swa_0 .. swa_3 (+ draft_0).
CachePlan TinyPlan(bool dspark = false) {
  const ModelConfig config = TinyConfig();
  CachePlanOptions options;
  options.block_tokens = 4;
  options.dspark = dspark;
  Result<CachePlan> plan = PlanCache(config, PlanLayers(config), options);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? std::move(plan).value() : CachePlan{};
}

KvManagerOptions Caching(bool on) {
  KvManagerOptions options;
  options.enable_prefix_caching = on;
  options.identity = 0x5EED;
  return options;
}

std::vector<int32_t> Iota(int32_t n, int32_t start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

template <typename T>
std::vector<T> Prefix(const std::vector<T>& v, size_t n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)};
}

TEST(KvCacheManagerTest, TinyPlanHasTheExpectedGroups) {
  const CachePlan plan = TinyPlan();
  EXPECT_EQ(plan.kv_group_idx, 0);
  EXPECT_EQ(plan.ring_group_idx, 1);
  EXPECT_THAT(plan.swa_group_idx, ElementsAre(2, 3, 4, 5));
  EXPECT_EQ(plan.sliding_window, 8);
  EXPECT_EQ(TinyPlan(true).draft_group_idx, std::vector<int32_t>{6});
}

// B = 4, W = 8. A step over [c, e) needs G_KV blocks [0, ⌈e/4⌉) and, per SWA group, the blocks
// [max(0, c − 7) div 4, ⌈e/4⌉); lower SWA blocks are released first.
TEST(KvCacheManagerTest, AllocateTakesHandComputedCountsPerStep) {
  KvCacheManager kv(TinyPlan(), 64, Caching(false));
  RequestBlockTables req;
  // [0, 10): kv 3, ring 1, 4 × 3 SWA = 16.
  EXPECT_EQ(kv.NumBlocksNeeded(req, 0, 10), 16);
  ASSERT_TRUE(kv.Allocate(req, 0, 10));
  EXPECT_EQ(kv.pool().num_free(), 48u);
  EXPECT_EQ(req.tables[0].size(), 3u);
  EXPECT_EQ(req.tables[1].size(), 1u);
  EXPECT_EQ(req.tables[2].size(), 3u);
  // [10, 11): window from 3 → block 0 stays; nothing new.
  EXPECT_EQ(kv.NumBlocksNeeded(req, 10, 1), 0);
  ASSERT_TRUE(kv.Allocate(req, 10, 1));
  EXPECT_EQ(kv.pool().num_free(), 48u);
  // [11, 12): window from 4 → SWA block 0 slides out in 4 groups; nothing new.
  ASSERT_TRUE(kv.Allocate(req, 11, 1));
  EXPECT_EQ(kv.pool().num_free(), 52u);
  EXPECT_EQ(req.tables[2][0], kNo);
  EXPECT_EQ(req.tables[5][0], kNo);
  EXPECT_EQ(req.tables[0].size(), 3u);
  // [12, 13): block 3 in G_KV and in 4 SWA groups = 5.
  EXPECT_EQ(kv.NumBlocksNeeded(req, 12, 1), 5);
  ASSERT_TRUE(kv.Allocate(req, 12, 1));
  EXPECT_EQ(kv.pool().num_free(), 47u);
  // [13, 20): window from 6 (block 1); block 4 in 5 groups.
  EXPECT_EQ(kv.NumBlocksNeeded(req, 13, 7), 5);
  ASSERT_TRUE(kv.Allocate(req, 13, 7));
  EXPECT_EQ(kv.pool().num_free(), 42u);
  // A 12-token chunk [20, 32): window from 13 (block 3) → blocks 1, 2 slide out (8 released);
  // blocks 5..7 in 5 groups = 15 new.
  EXPECT_EQ(kv.NumBlocksNeeded(req, 20, 12), 15);
  ASSERT_TRUE(kv.Allocate(req, 20, 12));
  EXPECT_EQ(kv.pool().num_free(), 35u);  // kv 8 + ring 1 + 4 × 5 SWA = 29 held
  EXPECT_EQ(req.tables[0].size(), 8u);
  EXPECT_EQ(req.tables[1].size(), 1u);
  for (int32_t g = 2; g <= 5; ++g) {
    const std::vector<uint32_t>& table = req.tables[static_cast<size_t>(g)];
    ASSERT_EQ(table.size(), 8u);
    EXPECT_EQ(table[0], kNo);
    EXPECT_EQ(table[1], kNo);
    EXPECT_EQ(table[2], kNo);
    for (size_t i = 3; i < 8; ++i) EXPECT_NE(table[i], kNo) << "group " << g << " block " << i;
  }
  EXPECT_TRUE(kv.CheckConsistency().ok());
  kv.Free(req);
  EXPECT_EQ(kv.pool().num_free(), 64u);
  EXPECT_TRUE(req.tables.empty());
  EXPECT_TRUE(kv.CheckConsistency().ok());
}

// With DSpark the draft group slides like an SWA group: [0, 10) takes 3 + 1 + 5 × 3 = 19.
TEST(KvCacheManagerTest, DraftGroupAllocatesLikeSwa) {
  KvCacheManager kv(TinyPlan(true), 64, Caching(true));
  RequestBlockTables req;
  ASSERT_TRUE(kv.Allocate(req, 0, 10));
  EXPECT_EQ(kv.pool().num_free(), 64u - 19u);
  ASSERT_TRUE(kv.Allocate(req, 11, 1));
  EXPECT_EQ(kv.pool().num_free(), 64u - 19u + 5u);
  EXPECT_EQ(req.tables[6][0], kNo);
}

TEST(KvCacheManagerTest, AllocateIsAllOrNothing) {
  KvCacheManager kv(TinyPlan(), 10, Caching(true));
  RequestBlockTables req;
  EXPECT_EQ(kv.NumBlocksNeeded(req, 0, 8), 11);  // kv 2 + ring 1 + 4 × 2
  EXPECT_FALSE(kv.Allocate(req, 0, 8));
  EXPECT_EQ(kv.pool().num_free(), 10u);
  for (const auto& table : req.tables) EXPECT_TRUE(table.empty());
  ASSERT_TRUE(kv.Allocate(req, 0, 4));  // 1 + 1 + 4 = 6
  EXPECT_EQ(kv.pool().num_free(), 4u);
  EXPECT_FALSE(kv.Allocate(req, 4, 4));  // 1 + 4 = 5 > 4
  EXPECT_EQ(kv.pool().num_free(), 4u);
  EXPECT_EQ(req.tables[0].size(), 1u);
  EXPECT_EQ(req.tables[2].size(), 1u);
  EXPECT_TRUE(kv.CheckConsistency().ok());
  kv.Free(req);
  EXPECT_EQ(kv.pool().num_free(), 10u);
}

// Request A computes and caches 16 tokens (4 full blocks). A prompt of length L can hit at most
// floor((L − 1) / 4) · 4 tokens, and only as far as it agrees with A.
TEST(KvCacheManagerTest, HitLengthAtEveryBoundary) {
  KvCacheManager kv(TinyPlan(), 64, Caching(true));
  const std::vector<int32_t> tokens = Iota(30);
  RequestBlockTables a;
  EXPECT_EQ(kv.AcquirePrefix(Prefix(tokens, 16), a), 0);
  ASSERT_TRUE(kv.Allocate(a, 0, 16));
  kv.CacheFullBlocks(a, tokens, 16);
  EXPECT_EQ(a.num_cached_blocks, 4);
  EXPECT_EQ(a.block_hashes.size(), 4u);

  std::vector<int32_t> other_second_block = Prefix(tokens, 17);
  other_second_block[5] = 7;
  struct Case {
    std::vector<int32_t> prompt;
    int64_t want;
  };
  const std::vector<Case> cases = {
      {Prefix(tokens, 1), 0},   {Prefix(tokens, 4), 0},   {Prefix(tokens, 5), 4},
      {Prefix(tokens, 8), 4},   {Prefix(tokens, 9), 8},   {Prefix(tokens, 16), 12},
      {Prefix(tokens, 17), 16}, {Prefix(tokens, 30), 16}, {other_second_block, 4},
  };
  uint64_t queried = 16;  // A's own query
  uint64_t hit = 0;
  for (const Case& c : cases) {
    RequestBlockTables b;
    EXPECT_EQ(kv.AcquirePrefix(c.prompt, b), c.want) << "prompt length " << c.prompt.size();
    queried += c.prompt.size();
    hit += static_cast<uint64_t>(c.want);
    const size_t n = static_cast<size_t>(c.want / 4);
    EXPECT_EQ(b.tables[0], Prefix(a.tables[0], n));
    EXPECT_TRUE(b.tables[1].empty());  // the ring is never shared
    EXPECT_EQ(b.num_cached_blocks, static_cast<int64_t>(n));
    EXPECT_EQ(b.block_hashes,
              std::vector<BlockHash>(a.block_hashes.begin(), a.block_hashes.begin() + n));
    if (n > 0) {
      EXPECT_EQ(kv.pool().ref_count(a.tables[0][0]), 2u);
    }
    kv.Free(b);
  }
  EXPECT_EQ(queried, 16u + 1 + 4 + 5 + 8 + 9 + 16 + 17 + 30 + 17);
  EXPECT_EQ(kv.stats().queried_tokens, queried);
  EXPECT_EQ(kv.stats().hit_tokens, 0u + 4 + 4 + 8 + 12 + 16 + 16 + 4);
  EXPECT_EQ(kv.pool().ref_count(a.tables[0][0]), 1u);
  EXPECT_TRUE(kv.CheckConsistency().ok());
}

// At H = 16 with W = 8 an SWA group needs only blocks 2, 3 ([8, 16)); lower slots stay kNoBlock.
TEST(KvCacheManagerTest, SwaHitTakesOnlyTheWindowBlocks) {
  KvCacheManager kv(TinyPlan(), 64, Caching(true));
  const std::vector<int32_t> tokens = Iota(17);
  RequestBlockTables a;
  ASSERT_TRUE(kv.Allocate(a, 0, 16));
  kv.CacheFullBlocks(a, tokens, 16);
  RequestBlockTables b;
  ASSERT_EQ(kv.AcquirePrefix(tokens, b), 16);
  for (int32_t g = 2; g <= 5; ++g) {
    const auto& at = a.tables[static_cast<size_t>(g)];
    EXPECT_THAT(b.tables[static_cast<size_t>(g)], ElementsAre(kNo, kNo, at[2], at[3]));
    EXPECT_EQ(kv.pool().ref_count(at[1]), 1u);
    EXPECT_EQ(kv.pool().ref_count(at[2]), 2u);
  }
  // B computes its last token: one new block in G_KV and each SWA group, plus its own ring.
  EXPECT_EQ(kv.NumBlocksNeeded(b, 16, 1), 6);
  ASSERT_TRUE(kv.Allocate(b, 16, 1));
  EXPECT_NE(b.tables[1][0], a.tables[1][0]);
  kv.Free(a);
  kv.Free(b);
  EXPECT_EQ(kv.pool().num_free(), 64u);
}

// 63 ids. A computes 12 tokens (ids: kv 0-2, ring 3, swa_k 4+3k .. 6+3k) then 8 more: SWA block 0
// (ids 4, 7, 10, 13) slides to the queue tail behind 26..62, and blocks 3, 4 take 16..25. C then
// takes all 41 free ids, evicting the 4 slid blocks. A hit at 20 needs SWA blocks 3, 4 only and
// still hits; a hit at 8 (or 4) needs SWA block 0 and misses; at 12, blocks 1, 2 (A holds them).
TEST(KvCacheManagerTest, EvictedWindowBlocksLimitTheHit) {
  KvCacheManager kv(TinyPlan(), 63, Caching(true));
  const std::vector<int32_t> tokens = Iota(21);
  RequestBlockTables a;
  ASSERT_TRUE(kv.Allocate(a, 0, 12));
  EXPECT_THAT(a.tables[0], ElementsAre(0, 1, 2));
  EXPECT_THAT(a.tables[1], ElementsAre(3));
  EXPECT_THAT(a.tables[2], ElementsAre(4, 5, 6));
  EXPECT_THAT(a.tables[5], ElementsAre(13, 14, 15));
  kv.CacheFullBlocks(a, tokens, 12);
  ASSERT_TRUE(kv.Allocate(a, 12, 8));
  EXPECT_THAT(a.tables[0], ElementsAre(0, 1, 2, 16, 17));
  EXPECT_THAT(a.tables[2], ElementsAre(kNo, 5, 6, 18, 19));
  EXPECT_THAT(a.tables[5], ElementsAre(kNo, 14, 15, 24, 25));
  kv.CacheFullBlocks(a, tokens, 20);
  EXPECT_EQ(kv.pool().num_free(), 41u);
  EXPECT_EQ(kv.pool().num_cached_free(), 4u);
  EXPECT_TRUE(kv.pool().is_cached(4));

  RequestBlockTables c;
  EXPECT_EQ(kv.NumBlocksNeeded(c, 0, 32), 41);  // kv 8 + ring 1 + 4 × 8
  ASSERT_TRUE(kv.Allocate(c, 0, 32));
  EXPECT_EQ(kv.pool().num_free(), 0u);
  EXPECT_EQ(kv.pool().num_evictions(), 4u);
  EXPECT_FALSE(kv.pool().is_cached(4));
  EXPECT_EQ(kv.pool().Lookup(2, a.block_hashes[0]), std::nullopt);
  EXPECT_EQ(kv.pool().Lookup(0, a.block_hashes[0]), std::optional<uint32_t>(0));

  RequestBlockTables b;
  EXPECT_EQ(kv.AcquirePrefix(tokens, b), 20);
  EXPECT_THAT(b.tables[0], ElementsAre(0, 1, 2, 16, 17));
  EXPECT_THAT(b.tables[2], ElementsAre(kNo, kNo, kNo, 18, 19));
  kv.Free(b);
  EXPECT_EQ(kv.AcquirePrefix(Prefix(tokens, 9), b), 0);
  kv.Free(b);
  EXPECT_EQ(kv.AcquirePrefix(Prefix(tokens, 13), b), 12);
  EXPECT_THAT(b.tables[2], ElementsAre(kNo, 5, 6));
  kv.Free(b);
  EXPECT_TRUE(kv.CheckConsistency().ok());
}

// 12 ids; A holds kv 0, 1, ring 2, swa_k 3+2k, 4+2k. Free releases each group's last block first:
// queue 11, 1, 0, 2, 4, 3, 6, 5, ..., 10, 9. B's hit at 8 takes every block but the ring and 11
// and frees them again in the same order: queue 11, 2, 1, 0, 4, 3, ..., 10, 9. Another 8-token
// request takes the first 11, evicting the 9 cached ones among them; A's prompt then misses.
TEST(KvCacheManagerTest, EvictionThenNoHit) {
  KvCacheManager kv(TinyPlan(), 12, Caching(true));
  const std::vector<int32_t> tokens = Iota(9);
  RequestBlockTables a;
  ASSERT_TRUE(kv.Allocate(a, 0, 8));
  kv.CacheFullBlocks(a, tokens, 8);
  kv.Free(a);
  EXPECT_EQ(kv.pool().num_free(), 12u);
  EXPECT_EQ(kv.pool().num_cached_free(), 10u);
  RequestBlockTables b;
  EXPECT_EQ(kv.AcquirePrefix(tokens, b), 8);
  kv.Free(b);

  RequestBlockTables c;
  ASSERT_TRUE(kv.Allocate(c, 0, 8));
  EXPECT_THAT(c.tables[0], ElementsAre(11, 2));
  EXPECT_THAT(c.tables[1], ElementsAre(1));
  EXPECT_THAT(c.tables[2], ElementsAre(0, 4));
  EXPECT_THAT(c.tables[3], ElementsAre(3, 6));
  EXPECT_THAT(c.tables[5], ElementsAre(7, 10));
  EXPECT_EQ(kv.pool().num_evictions(), 9u);
  EXPECT_EQ(kv.pool().num_cached_free(), 1u);
  EXPECT_EQ(kv.AcquirePrefix(tokens, b), 0);
  kv.Free(b);
  kv.Free(c);
  EXPECT_TRUE(kv.CheckConsistency().ok());
}

TEST(KvCacheManagerTest, PrefixCachingOffNeverHits) {
  KvCacheManager kv(TinyPlan(), 64, Caching(false));
  const std::vector<int32_t> tokens = Iota(17);
  RequestBlockTables a;
  EXPECT_EQ(kv.AcquirePrefix(tokens, a), 0);
  ASSERT_TRUE(kv.Allocate(a, 0, 17));
  kv.CacheFullBlocks(a, tokens, 17);
  EXPECT_TRUE(a.block_hashes.empty());
  for (const auto& table : a.tables) {
    for (const uint32_t block : table) {
      if (block != kNo) {
        EXPECT_FALSE(kv.pool().is_cached(block)) << block;
      }
    }
  }
  RequestBlockTables b;
  EXPECT_EQ(kv.AcquirePrefix(tokens, b), 0);
  EXPECT_EQ(kv.stats().queried_tokens, 0u);
  EXPECT_EQ(kv.stats().hit_tokens, 0u);
  kv.Free(a);
  kv.Free(b);
  EXPECT_EQ(kv.pool().num_free(), 64u);
}

TEST(KvCacheManagerTest, RingBlockIsNeverCached) {
  KvCacheManager kv(TinyPlan(true), 64, Caching(true));
  const std::vector<int32_t> tokens = Iota(8);
  RequestBlockTables a;
  ASSERT_TRUE(kv.Allocate(a, 0, 8));
  kv.CacheFullBlocks(a, tokens, 8);
  ASSERT_EQ(a.tables[1].size(), 1u);
  EXPECT_FALSE(kv.pool().is_cached(a.tables[1][0]));
  for (int32_t g : {0, 2, 3, 4, 5, 6}) {
    for (const uint32_t block : a.tables[static_cast<size_t>(g)]) {
      EXPECT_TRUE(kv.pool().is_cached(block)) << "group " << g << " block " << block;
    }
  }
  kv.Free(a);
  EXPECT_EQ(kv.pool().num_free(), 64u);
  EXPECT_EQ(kv.pool().num_cached_free(), 2u * 6u);  // 2 blocks in 6 groups; not the ring
}

TEST(KvCacheManagerTest, BlockHashesChainThroughTheParent) {
  const std::vector<int32_t> block = {5, 6, 7, 8};
  const BlockHash root = HashBlockTokens(kRootBlockHash, block, 1);
  EXPECT_EQ(HashBlockTokens(kRootBlockHash, block, 1), root);
  EXPECT_NE(HashBlockTokens(kRootBlockHash, block, 2), root);
  EXPECT_NE(HashBlockTokens(root, block, 1), root);
  EXPECT_NE(HashBlockTokens(HashBlockTokens(kRootBlockHash, std::vector<int32_t>{1, 1, 1, 1}, 1),
                            block, 1),
            HashBlockTokens(HashBlockTokens(kRootBlockHash, std::vector<int32_t>{2, 2, 2, 2}, 1),
                            block, 1));
  EXPECT_NE(HashBlockTokens(kRootBlockHash, std::vector<int32_t>{5, 6, 8, 7}, 1), root);

  // Equal second blocks after different first blocks do not hit.
  KvCacheManager kv(TinyPlan(), 64, Caching(true));
  const std::vector<int32_t> x = {1, 1, 1, 1, 5, 6, 7, 8, 9};
  const std::vector<int32_t> y = {2, 2, 2, 2, 5, 6, 7, 8, 9};
  RequestBlockTables a;
  ASSERT_TRUE(kv.Allocate(a, 0, 8));
  kv.CacheFullBlocks(a, x, 8);
  RequestBlockTables b;
  EXPECT_EQ(kv.AcquirePrefix(y, b), 0);
  ASSERT_TRUE(kv.Allocate(b, 0, 8));
  kv.CacheFullBlocks(b, y, 8);
  EXPECT_NE(a.block_hashes[1], b.block_hashes[1]);
  EXPECT_TRUE(kv.pool().is_cached(b.tables[0][1]));
  kv.Free(a);
  kv.Free(b);
}

// 14 tokens computed and 3 blocks cached; truncating to 9 keeps blocks 0..2 (block 2 holds
// position 8) and drops block 2's hash, since positions 9.. of it will be rewritten.
TEST(KvCacheManagerTest, TruncateReleasesBlocksPastTheLastPosition) {
  KvCacheManager kv(TinyPlan(), 64, Caching(true));
  const std::vector<int32_t> tokens = Iota(14);
  RequestBlockTables a;
  ASSERT_TRUE(kv.Allocate(a, 0, 14));  // kv 4 + ring 1 + 4 × 4 = 21
  kv.CacheFullBlocks(a, tokens, 14);
  EXPECT_EQ(kv.pool().num_free(), 43u);
  EXPECT_EQ(a.num_cached_blocks, 3);
  const uint32_t ring = a.tables[1][0];

  kv.Truncate(a, 9);
  EXPECT_EQ(kv.pool().num_free(), 48u);  // block 3 of 5 groups
  for (int32_t g : {0, 2, 3, 4, 5}) {
    const auto& table = a.tables[static_cast<size_t>(g)];
    ASSERT_EQ(table.size(), 3u) << "group " << g;
    EXPECT_TRUE(kv.pool().is_cached(table[1]));
    EXPECT_FALSE(kv.pool().is_cached(table[2]));
  }
  EXPECT_THAT(a.tables[1], ElementsAre(ring));
  EXPECT_EQ(a.num_cached_blocks, 2);
  EXPECT_EQ(a.block_hashes.size(), 2u);
  EXPECT_EQ(kv.NumBlocksNeeded(a, 9, 5), 5);
  EXPECT_TRUE(kv.CheckConsistency().ok());

  kv.Truncate(a, 8);
  EXPECT_EQ(kv.pool().num_free(), 53u);
  EXPECT_EQ(a.tables[0].size(), 2u);
  EXPECT_TRUE(kv.pool().is_cached(a.tables[0][1]));
  EXPECT_EQ(a.num_cached_blocks, 2);
  kv.Truncate(a, 0);
  EXPECT_EQ(kv.pool().num_free(), 63u);
  EXPECT_THAT(a.tables[1], ElementsAre(ring));
  EXPECT_EQ(a.num_cached_blocks, 0);
  kv.Free(a);
  EXPECT_EQ(kv.pool().num_free(), 64u);
  EXPECT_TRUE(kv.CheckConsistency().ok());
}

TEST(KvCacheManagerDeathTest, TruncatingIntoASharedCachedBlockAborts) {
  KvCacheManager kv(TinyPlan(), 64, Caching(true));
  const std::vector<int32_t> tokens = Iota(9);
  RequestBlockTables a;
  ASSERT_TRUE(kv.Allocate(a, 0, 8));
  kv.CacheFullBlocks(a, tokens, 8);
  RequestBlockTables b;
  ASSERT_EQ(kv.AcquirePrefix(tokens, b), 8);
  EXPECT_DEATH(kv.Truncate(a, 6), "shared by 2");
}

// Random requests over a small pool: prefixes drawn from a few shared bases, chunked prefill,
// speculative decode steps with rejection, arbitrary rollbacks, preemption when the pool is full.
// After every operation the pool is consistent and each block's reference count equals the
// number of table slots naming it, all in one group.
struct SimRequest {
  RequestBlockTables blocks;
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  int64_t computed = 0;
};

void CheckRefs(const KvCacheManager& kv, const std::vector<SimRequest>& reqs, int op) {
  ASSERT_TRUE(kv.CheckConsistency().ok())
      << "op " << op << ": " << kv.CheckConsistency().ToString();
  std::map<uint32_t, uint32_t> refs;
  std::map<uint32_t, size_t> group_of;
  for (const SimRequest& r : reqs) {
    std::map<uint32_t, int> mine;
    for (size_t g = 0; g < r.blocks.tables.size(); ++g) {
      for (const uint32_t block : r.blocks.tables[g]) {
        if (block == kNo) continue;
        ASSERT_LT(block, kv.pool().num_blocks());
        ASSERT_EQ(++mine[block], 1) << "op " << op << ": block " << block << " twice in a request";
        ++refs[block];
        const auto [it, inserted] = group_of.emplace(block, g);
        ASSERT_EQ(it->second, g) << "op " << op << ": block " << block << " in two groups";
      }
    }
  }
  for (uint32_t b = 0; b < kv.pool().num_blocks(); ++b) {
    const auto it = refs.find(b);
    ASSERT_EQ(kv.pool().ref_count(b), it == refs.end() ? 0u : it->second)
        << "op " << op << " block " << b;
  }
  ASSERT_EQ(kv.pool().num_free(), kv.pool().num_blocks() - refs.size()) << "op " << op;
}

class KvCacheManagerRandomTest : public ::testing::TestWithParam<uint32_t> {
 protected:
  static constexpr uint32_t kNumBlocks = 90;

  KvCacheManagerRandomTest()
      : rng_(GetParam()),
        plan_(TinyPlan(GetParam() % 2 == 1)),
        num_groups_(static_cast<int32_t>(plan_.groups.size())),
        kv_(plan_, kNumBlocks, Caching(true)),
        b_(kv_.block_tokens()) {
    bases_.resize(3);
    for (auto& base : bases_) {
      for (int i = 0; i < 48; ++i) base.push_back(static_cast<int32_t>(Uniform(0, 2)));
    }
  }

  int64_t Uniform(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  SimRequest& AnyRequest() {
    return reqs_[static_cast<size_t>(Uniform(0, static_cast<int64_t>(reqs_.size()) - 1))];
  }
  // Frees `r` and drops it from the live requests.
  void Drop(SimRequest& r) {
    kv_.Free(r.blocks);
    r = std::move(reqs_.back());
    reqs_.pop_back();
  }
  int64_t HeldBlocks(const SimRequest& r) const {
    int64_t held = 0;
    for (const auto& table : r.blocks.tables) {
      for (const uint32_t block : table) held += block != kNo ? 1 : 0;
    }
    return held;
  }

  // A new request over a prefix of one of the bases, its cached prefix acquired.
  void Admit() {
    SimRequest r;
    const auto& base = bases_[static_cast<size_t>(Uniform(0, 2))];
    r.tokens.assign(base.begin(), base.begin() + Uniform(1, 48));
    for (int64_t i = Uniform(0, 8); i > 0; --i) {
      r.tokens.push_back(static_cast<int32_t>(Uniform(0, 2)));
    }
    r.prompt_len = static_cast<int64_t>(r.tokens.size());
    const int64_t hit = kv_.AcquirePrefix(r.tokens, r.blocks);
    ASSERT_EQ(hit % b_, 0);
    ASSERT_LE(hit, (r.prompt_len - 1) / b_ * b_);
    ASSERT_EQ(static_cast<int32_t>(r.blocks.tables.size()), num_groups_);
    total_hits_ += hit;
    r.computed = hit;
    reqs_.push_back(std::move(r));
  }

  // The tables after allocating for [computed, computed + n): every needed block present in the
  // full-attention and window groups, the window's slid-out blocks released, the state group one
  // block.
  void CheckAllocated(const SimRequest& r, int64_t n, int64_t first, int op) const {
    const int64_t end_blocks = (r.computed + n + b_ - 1) / b_;
    for (int32_t g = 0; g < num_groups_; ++g) {
      const auto& table = r.blocks.tables[static_cast<size_t>(g)];
      if (g == 1) {
        ASSERT_EQ(table.size(), 1u);
        continue;
      }
      ASSERT_GE(static_cast<int64_t>(table.size()), end_blocks);
      for (int64_t i = (g == 0 ? 0 : first); i < end_blocks; ++i) {
        ASSERT_NE(table[static_cast<size_t>(i)], kNo) << "op " << op << " group " << g;
      }
      if (g >= 2) {
        for (int64_t i = 0; i < std::min<int64_t>(first, static_cast<int64_t>(table.size())); ++i) {
          ASSERT_EQ(table[static_cast<size_t>(i)], kNo);
        }
      }
    }
  }

  // A prefill chunk or a speculative decode step (drafts, some rejected) of one request; a
  // request the pool cannot hold is preempted.
  void StepOne(int op) {
    SimRequest& r = AnyRequest();
    const bool prefill = r.computed < r.prompt_len;
    const int64_t drafts = prefill ? 0 : Uniform(0, 3);
    const int64_t n =
        prefill ? Uniform(1, std::min<int64_t>(13, r.prompt_len - r.computed)) : 1 + drafts;
    const int64_t held_before = HeldBlocks(r);
    int64_t slid = 0;
    const int64_t first = std::max<int64_t>(0, r.computed - plan_.sliding_window + 1) / b_;
    for (int32_t g = 2; g < num_groups_; ++g) {
      const auto& table = r.blocks.tables[static_cast<size_t>(g)];
      for (size_t i = 0; i < table.size() && static_cast<int64_t>(i) < first; ++i) {
        slid += table[i] != kNo ? 1 : 0;
      }
    }
    const int64_t need = kv_.NumBlocksNeeded(r.blocks, r.computed, n);
    if (!kv_.Allocate(r.blocks, r.computed, n)) {
      ASSERT_GT(need, static_cast<int64_t>(kv_.pool().num_free()));
      ++num_preempted_;
      Drop(r);
      return;
    }
    CheckAllocated(r, n, first, op);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(HeldBlocks(r) - held_before, need - slid) << "op " << op;
    if (prefill) {
      r.computed += n;
    } else {
      for (int64_t i = 0; i < n; ++i) r.tokens.push_back(static_cast<int32_t>(Uniform(0, 2)));
      const int64_t accepted = Uniform(0, drafts);
      r.computed += 1 + accepted;
      kv_.Truncate(r.blocks, r.computed);
      r.tokens.resize(static_cast<size_t>(r.computed));
    }
    kv_.CacheFullBlocks(r.blocks, r.tokens, r.computed);
    ASSERT_EQ(r.blocks.num_cached_blocks, r.computed / b_);
    if (r.computed > 60) Drop(r);
  }

  // A rollback of one request to any computed position.
  void RollBackOne() {
    SimRequest& r = AnyRequest();
    int64_t t = Uniform(0, r.computed);
    // Rewriting part of a cached block another request shares would be a bug: align down then.
    if (t % b_ != 0 && t / b_ < r.blocks.num_cached_blocks) {
      for (int32_t g = 0; g < num_groups_; ++g) {
        const auto& table = r.blocks.tables[static_cast<size_t>(g)];
        const size_t i = static_cast<size_t>(t / b_);
        if (g != 1 && i < table.size() && table[i] != kNo && kv_.pool().ref_count(table[i]) > 1) {
          t = t / b_ * b_;
          break;
        }
      }
    }
    if (t % b_ != 0 && t / b_ < r.blocks.num_cached_blocks) ++num_uncached_truncations_;
    kv_.Truncate(r.blocks, t);
    ASSERT_LE(r.blocks.num_cached_blocks, t / b_);
    ASSERT_EQ(static_cast<int64_t>(r.blocks.block_hashes.size()), r.blocks.num_cached_blocks);
    r.computed = t;
    r.tokens.resize(static_cast<size_t>(std::max(t, r.prompt_len)));
  }

  std::mt19937 rng_;
  const CachePlan plan_;
  const int32_t num_groups_;
  KvCacheManager kv_;
  const int64_t b_;
  std::vector<std::vector<int32_t>> bases_;
  std::vector<SimRequest> reqs_;
  int64_t total_hits_ = 0;
  int64_t num_preempted_ = 0;
  int64_t num_uncached_truncations_ = 0;
};

TEST_P(KvCacheManagerRandomTest, PoolStaysConsistent) {
  for (int op = 0; op < 3000; ++op) {
    const int64_t kind = Uniform(0, 9);
    if (reqs_.empty() || (kind <= 1 && reqs_.size() < 6)) {
      Admit();
    } else if (kind <= 7) {
      StepOne(op);
    } else if (kind == 8) {
      RollBackOne();
    } else {
      Drop(AnyRequest());
    }
    if (HasFatalFailure()) return;
    CheckRefs(kv_, reqs_, op);
    if (HasFatalFailure()) return;
  }
  for (SimRequest& r : reqs_) kv_.Free(r.blocks);
  reqs_.clear();
  CheckRefs(kv_, reqs_, -1);
  EXPECT_EQ(kv_.pool().num_free(), kNumBlocks);
  EXPECT_GT(total_hits_, 0);
  EXPECT_GT(num_preempted_, 0);
  EXPECT_GT(num_uncached_truncations_, 0);
  EXPECT_GT(kv_.pool().num_evictions(), 0u);
  EXPECT_EQ(kv_.stats().hit_tokens, static_cast<uint64_t>(total_hits_));
}

INSTANTIATE_TEST_SUITE_P(Seeds, KvCacheManagerRandomTest, ::testing::Values(1u, 2u, 3u, 4u, 5u, 6u),
                         [](const ::testing::TestParamInfo<uint32_t>& info) {
                           return "seed" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// vision.md §12: an image span's positions all hold the placeholder id, so a block overlapping a
// span hashes the image's key too; blocks before the span hash as text.
TEST(KvCacheManagerTest, ImageSpanBlocksAreKeyedByContent) {
  const std::vector<int32_t> block = {9, 9, 9, 9};
  const std::vector<ContentKeyRange> image_a = {{2, 9, 0xA}};
  const std::vector<ContentKeyRange> image_b = {{2, 9, 0xB}};
  // No overlap: the text hash.
  EXPECT_EQ(HashBlock(kRootBlockHash, block, 12, image_a, 1),
            HashBlockTokens(kRootBlockHash, block, 1));
  EXPECT_NE(HashBlock(kRootBlockHash, block, 0, image_a, 1),
            HashBlockTokens(kRootBlockHash, block, 1));
  EXPECT_NE(HashBlock(kRootBlockHash, block, 0, image_a, 1),
            HashBlock(kRootBlockHash, block, 0, image_b, 1));
  // The same image one position later is another prompt.
  EXPECT_NE(HashBlock(kRootBlockHash, block, 4, image_a, 1),
            HashBlock(kRootBlockHash, block, 4, std::vector<ContentKeyRange>{{3, 10, 0xA}}, 1));

  // Request A: [1, 2, span of 7 × 9 at 2 .. 8, 3, 4, ...] cached over 12 positions (3 blocks).
  KvCacheManager kv(TinyPlan(), 64, Caching(true));
  std::vector<int32_t> tokens = {1, 2, 9, 9, 9, 9, 9, 9, 9, 3, 4, 5, 6, 7};
  RequestBlockTables a;
  EXPECT_EQ(kv.AcquirePrefix(tokens, image_a, a), 0);
  ASSERT_TRUE(kv.Allocate(a, 0, 12));
  kv.CacheFullBlocks(a, tokens, image_a, 12);
  // The same image hits all three blocks; another image of the same size hits none (block 0
  // overlaps the span); text-only hashing of the same ids hits none either.
  RequestBlockTables same, other, text;
  EXPECT_EQ(kv.AcquirePrefix(tokens, image_a, same), 12);
  EXPECT_EQ(kv.AcquirePrefix(tokens, image_b, other), 0);
  EXPECT_EQ(kv.AcquirePrefix(tokens, text), 0);
  kv.Free(same);
  kv.Free(other);
  kv.Free(text);
  // A span starting in block 1: block 0 is text and is shared with an image-less prompt.
  const std::vector<ContentKeyRange> late = {{4, 9, 0xA}};
  std::vector<int32_t> late_tokens = {1, 2, 3, 4, 9, 9, 9, 9, 9, 5, 6};
  RequestBlockTables c, d;
  EXPECT_EQ(kv.AcquirePrefix(late_tokens, late, c), 0);
  ASSERT_TRUE(kv.Allocate(c, 0, 8));
  kv.CacheFullBlocks(c, late_tokens, late, 8);
  std::vector<int32_t> text_tokens = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(kv.AcquirePrefix(text_tokens, d), 4);
  kv.Free(a);
  kv.Free(c);
  kv.Free(d);
  EXPECT_TRUE(kv.CheckConsistency().ok());
}

}  // namespace
}  // namespace dsv41

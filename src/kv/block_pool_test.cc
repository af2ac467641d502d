#include "kv/block_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

namespace dsv41 {
namespace {

using ::testing::ElementsAre;

std::vector<uint32_t> Take(BlockPool& pool, uint32_t n) {
  std::optional<std::vector<uint32_t>> blocks = pool.Allocate(n);
  EXPECT_TRUE(blocks.has_value()) << n << " of " << pool.num_free() << " free";
  return blocks.value_or(std::vector<uint32_t>{});
}

TEST(BlockPoolTest, StartsAllFreeInIdOrder) {
  BlockPool pool(5, 2);
  EXPECT_EQ(pool.num_blocks(), 5u);
  EXPECT_EQ(pool.num_free(), 5u);
  EXPECT_EQ(pool.num_cached_free(), 0u);
  EXPECT_TRUE(pool.CheckConsistency().ok());
  EXPECT_THAT(Take(pool, 5), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(pool.num_free(), 0u);
  EXPECT_TRUE(pool.CheckConsistency().ok());
}

// Released blocks join the tail; allocation takes the head: 0..5 out, release 4, 1, 2 (in that
// order) → queue 6, 7, 4, 1, 2.
TEST(BlockPoolTest, ReleasedBlocksQueueAtTheTail) {
  BlockPool pool(8, 1);
  EXPECT_THAT(Take(pool, 6), ElementsAre(0, 1, 2, 3, 4, 5));
  const std::vector<uint32_t> released = {4, 1, 2};
  pool.Release(released);
  EXPECT_EQ(pool.num_free(), 5u);
  EXPECT_EQ(pool.ref_count(4), 0u);
  EXPECT_EQ(pool.ref_count(3), 1u);
  EXPECT_TRUE(pool.CheckConsistency().ok());
  EXPECT_THAT(Take(pool, 4), ElementsAre(6, 7, 4, 1));
  EXPECT_THAT(Take(pool, 1), ElementsAre(2));
  EXPECT_EQ(pool.num_free(), 0u);
}

TEST(BlockPoolTest, AllocateBeyondFreeChangesNothing) {
  BlockPool pool(4, 1);
  EXPECT_THAT(Take(pool, 3), ElementsAre(0, 1, 2));
  EXPECT_FALSE(pool.Allocate(2).has_value());
  EXPECT_EQ(pool.num_free(), 1u);
  EXPECT_THAT(Take(pool, 1), ElementsAre(3));
  EXPECT_FALSE(pool.Allocate(1).has_value());
  EXPECT_THAT(Take(pool, 0), ElementsAre());
}

TEST(BlockPoolTest, SharedBlockFreesAtLastRelease) {
  BlockPool pool(3, 1);
  EXPECT_THAT(Take(pool, 1), ElementsAre(0));
  pool.Touch(0);
  EXPECT_EQ(pool.ref_count(0), 2u);
  const std::vector<uint32_t> zero = {0};
  pool.Release(zero);
  EXPECT_EQ(pool.ref_count(0), 1u);
  EXPECT_EQ(pool.num_free(), 2u);
  pool.Release(zero);
  EXPECT_EQ(pool.num_free(), 3u);
  EXPECT_TRUE(pool.CheckConsistency().ok());
}

TEST(BlockPoolTest, FreedBlockStaysCached) {
  BlockPool pool(4, 2);
  EXPECT_THAT(Take(pool, 2), ElementsAre(0, 1));
  EXPECT_TRUE(pool.Cache(1, 0xABCu, 1));
  const std::vector<uint32_t> one = {1};
  pool.Release(one);
  EXPECT_TRUE(pool.is_cached(1));
  EXPECT_EQ(pool.num_free(), 3u);
  EXPECT_EQ(pool.num_cached_free(), 1u);
  EXPECT_EQ(pool.Lookup(1, 0xABCu), std::optional<uint32_t>(1));
  EXPECT_EQ(pool.Lookup(0, 0xABCu), std::nullopt);  // keys are per group
  EXPECT_TRUE(pool.CheckConsistency().ok());
}

// Queue 2, 3, 1 (1 cached, released last): touching 3 unlinks it from the middle, touching 1
// from the tail (it keeps its hash), leaving 2 alone.
TEST(BlockPoolTest, TouchRemovesAFreeBlockFromTheQueue) {
  BlockPool pool(4, 1);
  EXPECT_THAT(Take(pool, 2), ElementsAre(0, 1));
  EXPECT_TRUE(pool.Cache(0, 7u, 1));
  const std::vector<uint32_t> one = {1};
  pool.Release(one);
  EXPECT_EQ(pool.num_free(), 3u);
  EXPECT_EQ(pool.num_cached_free(), 1u);
  pool.Touch(3);
  EXPECT_EQ(pool.ref_count(3), 1u);
  EXPECT_TRUE(pool.CheckConsistency().ok());
  pool.Touch(1);
  EXPECT_EQ(pool.ref_count(1), 1u);
  EXPECT_EQ(pool.num_free(), 1u);
  EXPECT_EQ(pool.num_cached_free(), 0u);
  EXPECT_TRUE(pool.is_cached(1));
  EXPECT_EQ(pool.Lookup(0, 7u), std::optional<uint32_t>(1));
  EXPECT_TRUE(pool.CheckConsistency().ok());
  EXPECT_THAT(Take(pool, 1), ElementsAre(2));
  EXPECT_FALSE(pool.Allocate(1).has_value());
  EXPECT_EQ(pool.num_evictions(), 0u);
}

// 0, 1 cached and released (queue 2, 0, 1): allocating two takes 2 and 0, evicting 0 only.
TEST(BlockPoolTest, AllocationEvictsTheLeastRecentlyReleased) {
  BlockPool pool(3, 1);
  EXPECT_THAT(Take(pool, 2), ElementsAre(0, 1));
  EXPECT_TRUE(pool.Cache(0, 100u, 0));
  EXPECT_TRUE(pool.Cache(0, 101u, 1));
  const std::vector<uint32_t> both = {0, 1};
  pool.Release(both);
  EXPECT_EQ(pool.num_cached_free(), 2u);
  EXPECT_THAT(Take(pool, 2), ElementsAre(2, 0));
  EXPECT_EQ(pool.num_evictions(), 1u);
  EXPECT_FALSE(pool.is_cached(0));
  EXPECT_EQ(pool.Lookup(0, 100u), std::nullopt);
  EXPECT_EQ(pool.Lookup(0, 101u), std::optional<uint32_t>(1));
  EXPECT_EQ(pool.num_cached_free(), 1u);
  EXPECT_TRUE(pool.CheckConsistency().ok());
  // The evicted block can take a new key; its old one is free for another block.
  EXPECT_TRUE(pool.Cache(0, 100u, 2));
  EXPECT_EQ(pool.Lookup(0, 100u), std::optional<uint32_t>(2));
  EXPECT_TRUE(pool.CheckConsistency().ok());
}

TEST(BlockPoolTest, DuplicateCacheIsRefused) {
  BlockPool pool(3, 2);
  EXPECT_THAT(Take(pool, 3), ElementsAre(0, 1, 2));
  EXPECT_TRUE(pool.Cache(0, 5u, 0));
  EXPECT_FALSE(pool.Cache(0, 5u, 1));  // key taken
  EXPECT_FALSE(pool.is_cached(1));
  EXPECT_FALSE(pool.Cache(0, 6u, 0));  // block already holds a hash
  EXPECT_FALSE(pool.Cache(1, 5u, 0));  // ... in any group
  EXPECT_EQ(pool.Lookup(0, 6u), std::nullopt);
  EXPECT_EQ(pool.Lookup(1, 5u), std::nullopt);
  EXPECT_TRUE(pool.Cache(1, 5u, 1));  // the same hash in another group is another key
  EXPECT_EQ(pool.Lookup(0, 5u), std::optional<uint32_t>(0));
  EXPECT_EQ(pool.Lookup(1, 5u), std::optional<uint32_t>(1));
  EXPECT_TRUE(pool.CheckConsistency().ok());
}

TEST(BlockPoolTest, UncacheDropsTheKey) {
  BlockPool pool(2, 1);
  EXPECT_THAT(Take(pool, 1), ElementsAre(0));
  EXPECT_FALSE(pool.Uncache(0));
  EXPECT_TRUE(pool.Cache(0, 9u, 0));
  EXPECT_TRUE(pool.Uncache(0));
  EXPECT_FALSE(pool.is_cached(0));
  EXPECT_EQ(pool.Lookup(0, 9u), std::nullopt);
  EXPECT_TRUE(pool.CheckConsistency().ok());
}

// The flat prefix-cache map against std::map over random caching, uncaching and evictions: few
// distinct hashes in several groups collide in the probe runs, so deletions shift entries back.
TEST(BlockPoolTest, MapAgreesWithAReferenceUnderChurn) {
  std::mt19937 rng(5);
  for (const uint32_t num_blocks : {1u, 7u, 64u}) {
    BlockPool pool(num_blocks, 3);
    std::vector<uint32_t> held = Take(pool, num_blocks);  // every block referenced
    std::map<std::pair<int32_t, BlockHash>, uint32_t> want;
    std::map<uint32_t, std::pair<int32_t, BlockHash>> key_of;
    for (int op = 0; op < 4000; ++op) {
      const uint32_t block = held[rng() % num_blocks];
      const int32_t group = static_cast<int32_t>(rng() % 3);
      const BlockHash hash = rng() % 23;
      if (rng() % 3 == 0) {
        const bool had = key_of.count(block) > 0;
        EXPECT_EQ(pool.Uncache(block), had);
        if (had) {
          want.erase(key_of[block]);
          key_of.erase(block);
        }
      } else {
        const bool fresh = key_of.count(block) == 0 && want.count({group, hash}) == 0;
        EXPECT_EQ(pool.Cache(group, hash, block), fresh);
        if (fresh) {
          want[{group, hash}] = block;
          key_of[block] = {group, hash};
        }
      }
      for (int32_t g = 0; g < 3; ++g) {
        for (BlockHash h = 0; h < 23; ++h) {
          const auto it = want.find({g, h});
          const std::optional<uint32_t> got = pool.Lookup(g, h);
          ASSERT_EQ(got.has_value(), it != want.end())
              << "op " << op << " (" << g << ", " << h << ")";
          if (got.has_value()) {
            EXPECT_EQ(*got, it->second);
          }
        }
      }
      ASSERT_TRUE(pool.CheckConsistency().ok()) << pool.CheckConsistency().ToString();
    }
  }
}

TEST(BlockPoolDeathTest, MisuseAborts) {
  BlockPool pool(2, 1);
  const std::vector<uint32_t> zero = {0};
  EXPECT_DEATH(pool.Release(zero), "no reference");
  EXPECT_DEATH(pool.Touch(2), "block 2 of 2");
  EXPECT_DEATH((void)pool.Cache(0, 1u, 0), "unreferenced");
}

}  // namespace
}  // namespace dsv41

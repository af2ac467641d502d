#include "base/exec_context.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "base/mapped_file.h"

namespace dsv41 {
namespace {

TEST(StepArenaTest, SpansAreAlignedAndDisjoint) {
  StepArena arena(1024);
  std::span<float> a = arena.Alloc<float>(3);
  std::span<double> b = arena.Alloc<double>(5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_GE(reinterpret_cast<const std::byte*>(b.data()),
            reinterpret_cast<const std::byte*>(a.data() + a.size()));
  std::span<int32_t> z = arena.AllocZeroed<int32_t>(7);
  for (int32_t v : z) EXPECT_EQ(v, 0);
}

// A fresh arena's pages are faulted in by the step that first uses them; in 2 MiB pages instead
// of 4 KiB ones, a 512-token prefill's ~100 MiB of scratch costs ~50 faults instead of ~25 000.
TEST(StepArenaTest, BlocksAskForHugePages) {
  if (!KernelTakesHugePageAdvice()) GTEST_SKIP() << "this kernel takes no MADV_HUGEPAGE";
  StepArena arena(3 << 20);
  Result<std::string> first = MappingVmFlags(arena.Alloc<float>(1).data());
  if (!first.ok()) GTEST_SKIP() << first.status().ToString();
  EXPECT_NE(first->find(" hg"), std::string::npos) << *first;
  // A block added when a step needs more than the arena holds, and the merged one after Reset.
  Result<std::string> grown = MappingVmFlags(arena.Alloc<std::byte>(4 << 20).data());
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_NE(grown->find(" hg"), std::string::npos) << *grown;
  arena.Reset();
  Result<std::string> merged = MappingVmFlags(arena.Alloc<float>(1).data());
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  EXPECT_NE(merged->find(" hg"), std::string::npos) << *merged;
}

TEST(StepArenaTest, AScopeGivesItsMemoryBack) {
  StepArena arena(4096);
  float* first = nullptr;
  {
    ArenaScope scope(arena);
    first = arena.Alloc<float>(100).data();
  }
  ArenaScope scope(arena);
  EXPECT_EQ(arena.Alloc<float>(100).data(), first);
  EXPECT_EQ(arena.num_growths(), 0u);
}

TEST(StepArenaTest, GrowsWithinAStepThenMergesAtReset) {
  StepArena arena(256);
  std::span<float> a = arena.Alloc<float>(32);  // 128 B: fits
  a[0] = 1.0f;
  std::span<float> b = arena.Alloc<float>(1000);  // does not fit: a new block
  b[999] = 2.0f;
  EXPECT_EQ(arena.num_growths(), 1u);
  EXPECT_EQ(a[0], 1.0f) << "growing never moves what was handed out";
  arena.Reset();
  EXPECT_GE(arena.capacity_bytes(), arena.high_water_bytes());
  arena.Alloc<float>(32);
  arena.Alloc<float>(1000);
  EXPECT_EQ(arena.num_growths(), 1u) << "the same step again fits in the merged block";
}

TEST(StepArenaTest, OwnedContextHasAPoolOfTheAskedSize) {
  OwnedExecContext owned(3);
  EXPECT_EQ(owned.ctx.pool.num_threads(), 3);
  EXPECT_EQ(&owned.ctx.arena, &owned.arena);
}

}  // namespace
}  // namespace dsv41

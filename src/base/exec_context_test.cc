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
// That needs the memory advised, and each 2 MiB of it whole in one mapping: one range on a 2 MiB
// boundary, grown in place (it had been 1 MiB blocks, each too small for a single huge page).
TEST(StepArenaTest, OneMappingOnHugePageBoundariesAdvisedForHugePages) {
  StepArena arena(3 << 20);
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.base()) % kHugePage, 0u);
  std::byte* first = arena.Alloc<std::byte>(100).data();
  EXPECT_EQ(first, arena.base());
  // Growing (the step needs more than the arena holds) continues the same range.
  std::byte* grown = arena.Alloc<std::byte>(size_t{5} << 20).data();
  EXPECT_EQ(grown, first + 128) << "spans follow each other in one range";
  EXPECT_EQ(arena.num_growths(), 1u);
  grown[(size_t{5} << 20) - 1] = std::byte{7};  // the whole span is usable
  if (!KernelTakesHugePageAdvice()) GTEST_SKIP() << "this kernel takes no MADV_HUGEPAGE";
  Result<std::string> first_flags = MappingVmFlags(first);
  if (!first_flags.ok()) GTEST_SKIP() << first_flags.status().ToString();
  EXPECT_NE(first_flags->find(" hg"), std::string::npos) << *first_flags;
  Result<std::string> grown_flags = MappingVmFlags(grown + (size_t{5} << 20) - 1);
  ASSERT_TRUE(grown_flags.ok()) << grown_flags.status().ToString();
  EXPECT_NE(grown_flags->find(" hg"), std::string::npos) << *grown_flags;
}

TEST(StepArenaDeathTest, ARunPastWhatTheStepsReachedFaults) {
  StepArena arena(4096);
  std::span<std::byte> span = arena.Alloc<std::byte>(4096);
  span[4095] = std::byte{1};
  volatile std::byte* past = span.data() + arena.capacity_bytes();
  EXPECT_DEATH(*past = std::byte{2}, "");
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

TEST(StepArenaTest, GrowsWithinAStepInPlaceThenFitsTheSameStep) {
  StepArena arena(256);
  std::span<float> a = arena.Alloc<float>(32);  // 128 B: fits
  a[0] = 1.0f;
  std::span<float> b = arena.Alloc<float>(300000);  // does not fit: the arena grows
  b[299999] = 2.0f;
  EXPECT_EQ(arena.num_growths(), 1u);
  EXPECT_EQ(a[0], 1.0f) << "growing never moves what was handed out";
  EXPECT_EQ(reinterpret_cast<std::byte*>(b.data()), reinterpret_cast<std::byte*>(a.data()) + 128);
  arena.Reset();
  EXPECT_GE(arena.capacity_bytes(), arena.high_water_bytes());
  EXPECT_EQ(arena.Alloc<float>(32).data(), a.data());
  arena.Alloc<float>(300000);
  EXPECT_EQ(arena.num_growths(), 1u) << "the same step again fits";
  // Growth at least doubles what the arena holds: a first step reaches its size in a few calls.
  for (int i = 0; i < 100; ++i) arena.Alloc<std::byte>(1 << 20);
  EXPECT_LE(arena.num_growths(), 1u + 7u);
}

TEST(StepArenaTest, OwnedContextHasAPoolOfTheAskedSize) {
  OwnedExecContext owned(3);
  EXPECT_EQ(owned.ctx.pool.num_threads(), 3);
  EXPECT_EQ(&owned.ctx.arena, &owned.arena);
}

}  // namespace
}  // namespace dsv41

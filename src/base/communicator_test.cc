#include "base/communicator.h"

#include <vector>

#include "gtest/gtest.h"

namespace dsv41 {
namespace {

TEST(CommunicatorTest, SingleProcessIsRankZeroOfOneAndLeavesBytesAlone) {
  Communicator& comm = Communicator::SingleProcess();
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  std::vector<std::byte> buffer = {std::byte{1}, std::byte{2}, std::byte{3}};
  const std::vector<CommSegment> segments = {CommSegment{.offset = 1, .size = 2}};
  comm.AllGather(CommKind::kMoe, buffer, segments);
  EXPECT_EQ(buffer, (std::vector<std::byte>{std::byte{1}, std::byte{2}, std::byte{3}}));
  std::vector<std::byte> payload = {std::byte{7}};
  comm.Broadcast(CommKind::kHeader, 0, payload);
  EXPECT_EQ(payload, std::vector<std::byte>{std::byte{7}});
  EXPECT_EQ(comm.counters().of(CommKind::kMoe).calls, 0u);
}

TEST(CommunicatorTest, ContiguousSegmentsFollowEachOtherInRankOrder) {
  std::vector<CommSegment> segments;
  const std::vector<uint64_t> sizes = {3, 0, 5};
  EXPECT_EQ(ContiguousSegments(sizes, segments), 8u);
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].offset, 0u);
  EXPECT_EQ(segments[1].offset, 3u);
  EXPECT_EQ(segments[1].size, 0u);
  EXPECT_EQ(segments[2].offset, 3u);
  EXPECT_EQ(segments[2].size, 5u);
}

TEST(CommunicatorTest, KindsHaveNames) {
  EXPECT_EQ(CommKindName(CommKind::kHeader), "header");
  EXPECT_EQ(CommKindName(CommKind::kEngram), "engram");
  EXPECT_EQ(CommKindName(CommKind::kMoe), "moe");
  EXPECT_EQ(CommKindName(CommKind::kTokens), "tokens");
}

}  // namespace
}  // namespace dsv41

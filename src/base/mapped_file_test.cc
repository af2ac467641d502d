#include "base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace dsv41 {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("dsv41_base_" + name)).string();
}

TEST(MappedFileTest, MapsWrittenBytes) {
  const std::string path = TempPath("mapped.bin");
  ASSERT_TRUE(WriteStringToFile(path, "hello").ok());
  Result<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ(file->size(), 5u);
  EXPECT_EQ(static_cast<char>(file->bytes()[4]), 'o');
  MappedFile moved = std::move(file).value();
  EXPECT_EQ(moved.size(), 5u);
  EXPECT_EQ(moved.path(), path);
}

TEST(MappingVmFlagsTest, NamesTheFlagsOfTheMappingThatHoldsTheAddress) {
  const std::string path = TempPath("flags.bin");
  ASSERT_TRUE(WriteStringToFile(path, "flags").ok());
  Result<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Result<std::string> read_only = MappingVmFlags(file->bytes().data() + 3);
  if (!read_only.ok()) GTEST_SKIP() << read_only.status().ToString();
  EXPECT_EQ(read_only->rfind("rd ", 0), 0u) << *read_only;
  EXPECT_EQ(read_only->find(" wr"), std::string::npos) << *read_only;
  Result<AnonymousMemory> memory = AnonymousMemory::Allocate(1 << 20, "test");
  ASSERT_TRUE(memory.ok());
  Result<std::string> writable = MappingVmFlags(memory->bytes().data() + 4096);
  ASSERT_TRUE(writable.ok()) << writable.status().ToString();
  EXPECT_NE(writable->find(" wr"), std::string::npos) << *writable;
  EXPECT_EQ(MappingVmFlags(reinterpret_cast<const void*>(uintptr_t{16})).status().code(),
            StatusCode::kNotFound);
}

TEST(AnonymousMemoryDeathTest, ARunPastTheLastPageFaults) {
  Result<AnonymousMemory> memory = AnonymousMemory::Allocate(10000, "test");
  ASSERT_TRUE(memory.ok());
  std::span<std::byte> bytes = memory->bytes();
  std::fill(bytes.begin(), bytes.end(), std::byte{1});  // the whole span is writable
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  volatile std::byte* after_last_page = bytes.data() + (bytes.size() + page - 1) / page * page;
  EXPECT_DEATH(*after_last_page = std::byte{2}, "");
}

TEST(AnonymousMemoryTest, ReservedRoomGrowsInPlaceUpToItsCapacity) {
  Result<AnonymousMemory> memory = AnonymousMemory::Reserve(size_t{5} << 20, "test room");
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  EXPECT_TRUE(memory->bytes().empty());
  EXPECT_EQ(memory->capacity(), size_t{5} << 20);
  // From 2 MiB on, the start is a huge page's, so each whole 2 MiB of it can be one.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(memory->bytes().data()) % (uintptr_t{2} << 20), 0u);
  ASSERT_TRUE(memory->Grow(10000).ok());
  std::byte* start = memory->bytes().data();
  memory->bytes()[9999] = std::byte{3};
  ASSERT_TRUE(memory->Grow(size_t{5} << 20).ok());
  EXPECT_EQ(memory->bytes().data(), start) << "growing never moves the memory";
  EXPECT_EQ(memory->bytes()[9999], std::byte{3});
  memory->bytes().back() = std::byte{4};
  const Status too_much = memory->Grow((size_t{5} << 20) + 1);
  EXPECT_EQ(too_much.code(), StatusCode::kIoError);
  EXPECT_NE(too_much.ToString().find("test room"), std::string::npos) << too_much.ToString();
  Result<AnonymousMemory> big = AnonymousMemory::Allocate((size_t{4} << 20) + 123, "test");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big->bytes().data()) % (uintptr_t{2} << 20), 0u);
}

TEST(AnonymousMemoryDeathTest, ReservedRoomIsInaccessibleUntilGrown) {
  Result<AnonymousMemory> memory = AnonymousMemory::Reserve(size_t{1} << 20, "test");
  ASSERT_TRUE(memory.ok());
  ASSERT_TRUE(memory->Grow(4096).ok());
  volatile std::byte* ungrown = memory->bytes().data() + 4096;
  EXPECT_DEATH(*ungrown = std::byte{2}, "");
}

// The bytes of a file whose size is not a whole number of pages.
std::string PatternBytes(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 11);
  return bytes;
}

TEST(CopyToAnonymousPagesTest, KeepsTheBytesAndLeavesTheSharedEdgePagesMapped) {
  const std::string path = TempPath("copy.bin");
  const std::string content = PatternBytes((size_t{5} << 20) + 1234);
  ASSERT_TRUE(WriteStringToFile(path, content).ok());
  Result<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const std::span<const std::byte> all = file->bytes();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = 1000, end = all.size() - 3000;  // neither on a page boundary
  Result<size_t> copied = CopyToAnonymousPages(all.subspan(begin, end - begin));
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(*copied, end / page * page - page);
  // The edge pages hold bytes outside the range: other tensors, which another owner may release
  // (an Engram tier's MADV_DONTNEED). Released here, they must leave the copy as it is.
  ReleaseMappedPages(all.subspan(0, begin));
  ReleaseMappedPages(all.subspan(end));
  ASSERT_TRUE(
      std::equal(all.begin(), all.end(), reinterpret_cast<const std::byte*>(content.data())));
  Result<std::string> edge = MappingVmFlags(all.data() + begin);
  Result<std::string> inside = MappingVmFlags(all.data() + page);
  if (!edge.ok() || !inside.ok()) GTEST_SKIP() << "no /proc/self/smaps flags";
  EXPECT_NE(edge->find(" ms"), std::string::npos) << *edge;  // the file's shared mapping
  EXPECT_EQ(inside->find(" ms"), std::string::npos) << *inside;
  EXPECT_EQ(inside->find(" wr"), std::string::npos) << *inside;
  if (KernelTakesHugePageAdvice()) {
    EXPECT_NE(inside->find(" hg"), std::string::npos) << *inside;
  }
}

TEST(CopyToAnonymousPagesTest, ARangeWithoutAWholePageCopiesNothing) {
  const std::string path = TempPath("copy_small.bin");
  const std::string content = PatternBytes(3 * 4096);
  ASSERT_TRUE(WriteStringToFile(path, content).ok());
  Result<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (page != 4096) GTEST_SKIP() << "page size " << page;
  Result<size_t> copied = CopyToAnonymousPages(file->bytes().subspan(100, 4096));
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(*copied, 0u);
  EXPECT_EQ(*CopyToAnonymousPages({}), 0u);
}

TEST(HugePageModeTest, OnlyNeverRefusesAdvisedMemory) {
  EXPECT_TRUE(HugePageModeServesAdvice("always [madvise] never\n"));
  EXPECT_TRUE(HugePageModeServesAdvice("[always] madvise never"));
  EXPECT_FALSE(HugePageModeServesAdvice("always madvise [never]\n"));
  EXPECT_TRUE(HugePageModeServesAdvice(""));
}

TEST(MappedFileTest, MissingFileNamesPath) {
  Result<MappedFile> file = MappedFile::Open("/nonexistent/dsv41/x.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find("/nonexistent/dsv41/x.safetensors"), std::string::npos);
}

TEST(MappedFileTest, DirectoryIsRejected) {
  Result<MappedFile> file = MappedFile::Open(std::filesystem::path(::testing::TempDir()).string());
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
}

TEST(MappedFileTest, EmptyFileMapsToEmptySpan) {
  const std::string path = TempPath("empty.bin");
  ASSERT_TRUE(WriteStringToFile(path, "").ok());
  Result<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(file->bytes().empty());
}

}  // namespace
}  // namespace dsv41

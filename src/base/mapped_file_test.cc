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

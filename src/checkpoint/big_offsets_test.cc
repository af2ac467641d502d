// 64-bit offsets in the safetensors reader (real-weight-traps.md L6): data offsets past 2^32, 2^36
// and near 1e11 parse exactly and read back the bytes stored there, through the mapping and through
// pread at Checkpoint::Locate's offset. The files are sparse: only the probed bytes use disk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/sparse_safetensors_testing.h"

namespace dsv41 {
namespace {

// An odd offset near 1e11: exact as a double (< 2^53), not as a float (whose spacing there is
// 8192), and far above int32 / uint32.
constexpr uint64_t kNear1e11 = 100'000'000'001;
static_assert(static_cast<uint64_t>(static_cast<float>(kNear1e11)) != kNear1e11);
static_assert(static_cast<uint64_t>(static_cast<double>(kNear1e11)) == kNear1e11);

class BigOffsetsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("dsv41_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(std::string_view name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

// `n` bytes that differ from zero (a hole), from each other and from every other seed's.
std::vector<std::byte> Pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::byte>(1 + (seed * 37 + i * 11 + i / 251) % 255);
  }
  return out;
}

std::vector<std::byte> Copy(std::span<const std::byte> bytes) {
  return std::vector<std::byte>(bytes.begin(), bytes.end());
}

TEST_F(BigOffsetsTest, HeaderOffsetsNear1e11ParseExactly) {
  // A pad tensor of kNear1e11 bytes puts `probe` at data offset kNear1e11.
  const std::string path = Path("near1e11.safetensors");
  Result<SparseSafetensorsLayout> layout = CreateSparseSafetensors(
      path, {{"pad", DType::kU8, {static_cast<int64_t>(kNear1e11)}}, {"probe", DType::kF32, {3}}});
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  Result<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ(file->size(), layout->data_start + kNear1e11 + 12);

  Result<SafetensorsHeader> header = ParseSafetensorsHeader(file->bytes(), path);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  ASSERT_EQ(header->tensors.size(), 2u);
  EXPECT_EQ(header->data_start, layout->data_start);
  const TensorInfo& pad = header->tensors[0];
  EXPECT_EQ(pad.name, "pad");
  EXPECT_EQ(pad.shape, Shape({int64_t{100'000'000'001}}));
  EXPECT_EQ(pad.begin, 0u);
  EXPECT_EQ(pad.end, uint64_t{100'000'000'001});
  const TensorInfo& probe = header->tensors[1];
  EXPECT_EQ(probe.name, "probe");
  EXPECT_EQ(probe.begin, uint64_t{100'000'000'001});
  EXPECT_EQ(probe.end, uint64_t{100'000'000'013});
}

TEST_F(BigOffsetsTest, TensorsPast2To32And2To36ReadBackThroughMappingAndPread) {
  // Probes at data offsets 2^32 + 12345, 2^36 + 777 and kNear1e11, dummy pads in between; the
  // last probe's data ends the file (~100 GB apparent size).
  const uint64_t past32 = (uint64_t{1} << 32) + 12345;
  const uint64_t past36 = (uint64_t{1} << 36) + 777;
  const uint64_t head_bytes = 64, probe_bytes = 4096;
  const std::vector<SparseTensorSpec> specs = {
      {"head", DType::kU8, {static_cast<int64_t>(head_bytes)}},
      {"pad.a", DType::kU8, {static_cast<int64_t>(past32 - head_bytes)}},
      {"past_2_32", DType::kU8, {static_cast<int64_t>(probe_bytes)}},
      {"pad.b", DType::kU8, {static_cast<int64_t>(past36 - past32 - probe_bytes)}},
      {"past_2_36", DType::kBF16, {static_cast<int64_t>(probe_bytes / 2)}},
      {"pad.c", DType::kU8, {static_cast<int64_t>(kNear1e11 - past36 - probe_bytes)}},
      {"near_1e11", DType::kU8, {static_cast<int64_t>(probe_bytes)}},
  };
  const std::string path = Path(std::string(kSingleFileCheckpoint));
  Result<SparseSafetensorsLayout> layout = CreateSparseSafetensors(path, specs);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->begin[2], past32);
  ASSERT_EQ(layout->begin[4], past36);
  ASSERT_EQ(layout->begin[6], kNear1e11);

  // Every tensor's bytes: a pattern for the head and probes; first and last byte for the pads.
  std::vector<std::vector<std::byte>> want(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t size =
        (i + 1 < specs.size() ? layout->begin[i + 1] : layout->file_bytes - layout->data_start) -
        layout->begin[i];
    if (specs[i].name.rfind("pad", 0) == 0) {
      const std::vector<std::byte> ends = Pattern(2, static_cast<uint32_t>(i));
      ASSERT_TRUE(WriteBytesAt(path, layout->file_begin[i], {ends.data(), 1}).ok());
      ASSERT_TRUE(WriteBytesAt(path, layout->file_begin[i] + size - 1, {ends.data() + 1, 1}).ok());
      want[i] = ends;
    } else {
      want[i] = Pattern(static_cast<size_t>(size), static_cast<uint32_t>(i));
      ASSERT_TRUE(WriteBytesAt(path, layout->file_begin[i], want[i]).ok());
    }
  }
  const auto ends_of = [](std::span<const std::byte> bytes) {
    return std::vector<std::byte>{bytes.front(), bytes.back()};
  };

  // The safetensors reader: offsets, sizes and bytes through the mapping.
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_EQ(file->tensors().size(), specs.size());
  EXPECT_EQ(file->data_start(), layout->data_start);
  EXPECT_EQ(file->file_bytes(), layout->file_bytes);
  const std::byte* data_section = file->View(0).bytes.data();  // "head" begins at offset 0
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].name);
    const TensorInfo& info = file->tensors()[i];
    EXPECT_EQ(info.name, specs[i].name);
    EXPECT_EQ(info.begin, layout->begin[i]);
    const TensorView view = file->View(i);
    EXPECT_EQ(static_cast<uint64_t>(view.bytes.data() - data_section), layout->begin[i]);
    EXPECT_EQ(view.bytes.size(), info.end - info.begin);
    if (want[i].size() == 2) {
      EXPECT_EQ(ends_of(view.bytes), want[i]);
    } else {
      EXPECT_EQ(Copy(view.bytes), want[i]);
    }
  }

  // The checkpoint: Find through the mapping, Locate's file range read with pread.
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  for (size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].name);
    Result<TensorView> view = checkpoint->Get(specs[i].name);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    Result<TensorFileRange> range = checkpoint->Locate(specs[i].name);
    ASSERT_TRUE(range.ok()) << range.status().ToString();
    EXPECT_EQ(range->path, path);
    EXPECT_EQ(range->offset, layout->file_begin[i]);
    EXPECT_EQ(range->size, view->bytes.size());
    if (want[i].size() == 2) {
      EXPECT_EQ(ends_of(view->bytes), want[i]);
      Result<std::vector<std::byte>> first = PreadBytes(range->path, range->offset, 1);
      Result<std::vector<std::byte>> last =
          PreadBytes(range->path, range->offset + range->size - 1, 1);
      ASSERT_TRUE(first.ok() && last.ok());
      EXPECT_EQ((std::vector<std::byte>{(*first)[0], (*last)[0]}), want[i]);
    } else {
      EXPECT_EQ(Copy(view->bytes), want[i]);
      Result<std::vector<std::byte>> read =
          PreadBytes(range->path, range->offset, static_cast<size_t>(range->size));
      ASSERT_TRUE(read.ok()) << read.status().ToString();
      EXPECT_EQ(*read, want[i]);
    }
  }
}

}  // namespace
}  // namespace dsv41

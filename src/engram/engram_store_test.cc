// Engram tables at the released row counts (real-weight-traps.md L6): rows whose byte offsets pass
// 2^31, 2^32 and 2^36 come back exactly from every tier. The full-size tables are sparse files
// (~101 GB apparent each, a few pages on disk). The resident tier copies a whole table, which does
// not fit this machine at full size; it shares the mapped tier's gather (CopyEngramRows) and every
// tier's row addressing (EngramRowLayout), which are tested at the released counts here, and the
// tier itself is tested on a small table.
#include "engram/engram_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/sparse_safetensors_testing.h"
#include "config/layer_plan.h"
#include "engram/engram_rows.h"

namespace dsv41 {
namespace {

// The release (checkpoint.md §6.7): Engram layers 1 and 14, rows of 256 e4m3 + 8 ue8m0 bytes.
constexpr int32_t kReleasedLayers[2] = {1, 14};
constexpr int64_t kReleasedRows[2] = {384'006'168, 384'016'682};
constexpr int32_t kReleasedRowDim = 256;

// Rows around the int32 (2^23 · 256 = 2^31) and uint32 (2^24 · 256 = 2^32) limits of row × 256,
// one past 2^36 / 256, and the last row.
std::vector<int64_t> ProbeRows(int64_t num_rows) {
  return {0,           (int64_t{1} << 23) - 1, int64_t{1} << 23, int64_t{1} << 24, int64_t{1} << 28,
          num_rows - 1};
}

// The bytes stored for `row` of table `table`: non-zero (holes read as zeros) and different for
// every probed row, table and byte position.
std::vector<std::byte> RowBytes(int32_t table, int64_t row, size_t n, uint32_t salt) {
  std::vector<std::byte> out(n);
  const uint64_t seed = static_cast<uint64_t>(row) * 2654435761u + table * 97u + salt * 131u;
  for (size_t j = 0; j < n; ++j) out[j] = static_cast<std::byte>(1 + (seed + j * 13) % 255);
  return out;
}

class EngramStoreTest : public ::testing::Test {
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

  // A checkpoint of one shard per Engram table, as the release keeps them in shards of their own,
  // as sparse files. The first table has its tensors in name order (`scale` [rows, d/32], then
  // `weight` [rows, d]); the others the other way round, so a scale tensor starts past 2^36 in
  // its file. Writes RowBytes at each of `rows` of each table.
  void WriteTables(std::span<const int32_t> layers, std::span<const int64_t> num_rows,
                   int32_t row_dim, const std::vector<std::vector<int64_t>>& rows) {
    const size_t n = layers.size();
    OrderedJson weight_map = OrderedJson::object();
    for (size_t t = 0; t < n; ++t) {
      const std::string shard = ShardedCheckpointWriter::ShardFileName(t, n);
      const std::string prefix = "layers." + std::to_string(layers[t]) + ".engram.embed";
      const std::string path = (dir_ / shard).string();
      std::vector<SparseTensorSpec> specs = {
          {prefix + ".scale", DType::kF8E8M0, {num_rows[t], row_dim / 32}},
          {prefix + ".weight", DType::kF8E4M3, {num_rows[t], row_dim}}};
      const bool scale_first = t == 0;
      if (!scale_first) std::swap(specs[0], specs[1]);
      Result<SparseSafetensorsLayout> layout = CreateSparseSafetensors(path, specs);
      ASSERT_TRUE(layout.ok()) << layout.status().ToString();
      weight_map[prefix + ".scale"] = shard;
      weight_map[prefix + ".weight"] = shard;
      const uint64_t scale_at = layout->file_begin[scale_first ? 0 : 1];
      const uint64_t value_at = layout->file_begin[scale_first ? 1 : 0];
      const uint64_t value_bytes = static_cast<uint64_t>(row_dim), scale_bytes = value_bytes / 32;
      for (int64_t row : rows[t]) {
        const uint64_t r = static_cast<uint64_t>(row);
        ASSERT_TRUE(WriteBytesAt(path, value_at + r * value_bytes, Values(t, row, row_dim)).ok());
        ASSERT_TRUE(WriteBytesAt(path, scale_at + r * scale_bytes, Scales(t, row, row_dim)).ok());
      }
    }
    OrderedJson index = OrderedJson::object();
    index["metadata"] = OrderedJson::object();
    index["weight_map"] = weight_map;
    ASSERT_TRUE(
        WriteStringToFile((dir_ / std::string(kCheckpointIndexFile)).string(), index.dump()).ok());
  }

  static std::vector<std::byte> Values(size_t table, int64_t row, int32_t row_dim) {
    return RowBytes(static_cast<int32_t>(table), row, static_cast<size_t>(row_dim), 0);
  }
  static std::vector<std::byte> Scales(size_t table, int64_t row, int32_t row_dim) {
    return RowBytes(static_cast<int32_t>(table), row, static_cast<size_t>(row_dim / 32), 1);
  }

  // FillRows of `rows` on `source` returns what WriteTables stored for them (`table` its index).
  static void ExpectRows(const EngramRowSource& source, size_t table,
                         const std::vector<int64_t>& rows) {
    const int32_t d = source.row_dim();
    std::vector<std::byte> values(rows.size() * static_cast<size_t>(d));
    std::vector<std::byte> scales(rows.size() * static_cast<size_t>(d / 32));
    const Status status = source.FillRows(rows, values, scales);
    ASSERT_TRUE(status.ok()) << status.ToString();
    for (size_t i = 0; i < rows.size(); ++i) {
      SCOPED_TRACE("table " + std::to_string(table) + " row " + std::to_string(rows[i]));
      const auto value_begin = values.begin() + static_cast<std::ptrdiff_t>(i * d);
      const auto scale_begin = scales.begin() + static_cast<std::ptrdiff_t>(i * (d / 32));
      EXPECT_TRUE(std::vector<std::byte>(value_begin, value_begin + d) ==
                  Values(table, rows[i], d));
      EXPECT_TRUE(std::vector<std::byte>(scale_begin, scale_begin + d / 32) ==
                  Scales(table, rows[i], d));
    }
  }

  // The plan of `layers` as Engram slots 0, 1, ... (only what EngramStorage reads).
  static LayerPlan EngramPlan(std::span<const int32_t> layers) {
    LayerPlan plan;
    for (size_t slot = 0; slot < layers.size(); ++slot) {
      LayerRole role;
      role.layer = layers[slot];
      role.engram_slot = static_cast<int32_t>(slot);
      plan.layers.push_back(role);
    }
    return plan;
  }

  std::filesystem::path dir_;
};

TEST(EngramRowLayoutTest, ReleasedRowCountsAddressPast4GiB) {
  const EngramRowLayout layout(kReleasedRowDim);
  EXPECT_EQ(layout.value_bytes, 256u);
  EXPECT_EQ(layout.scale_bytes, 8u);
  // Hand-computed byte offsets (row × 256, row × 8).
  EXPECT_EQ(layout.ValueOffset((int64_t{1} << 23) - 1), uint64_t{2'147'483'392});
  EXPECT_EQ(layout.ValueOffset(int64_t{1} << 23), uint64_t{2'147'483'648});
  EXPECT_EQ(layout.ValueOffset(int64_t{1} << 24), uint64_t{4'294'967'296});
  EXPECT_EQ(layout.ValueOffset(int64_t{1} << 28), uint64_t{68'719'476'736});
  EXPECT_EQ(layout.ScaleOffset(int64_t{1} << 28), uint64_t{2'147'483'648});
  // The end of each table is its tensor's byte size (checkpoint.md §6.7).
  EXPECT_EQ(layout.ValueOffset(kReleasedRows[0]), uint64_t{98'305'579'008});
  EXPECT_EQ(layout.ValueOffset(kReleasedRows[1]), uint64_t{98'308'270'592});
  EXPECT_EQ(layout.ScaleOffset(kReleasedRows[0]), uint64_t{3'072'049'344});
  EXPECT_EQ(layout.ScaleOffset(kReleasedRows[1]), uint64_t{3'072'133'456});
}

TEST_F(EngramStoreTest, ReleasedSizeTablesReturnProbedRowsOnMappedAndDiskTiers) {
  const std::vector<std::vector<int64_t>> probes = {ProbeRows(kReleasedRows[0]),
                                                    ProbeRows(kReleasedRows[1])};
  ASSERT_NO_FATAL_FAILURE(WriteTables(kReleasedLayers, kReleasedRows, kReleasedRowDim, probes));
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  // Layer 1's weight starts past 3 GB of scales, so row 2^28's values sit past 2^36 in the file;
  // layer 14's scales start past its 98 GB of values.
  Result<TensorFileRange> weight = checkpoint->Locate("layers.1.engram.embed.weight");
  Result<TensorFileRange> scale = checkpoint->Locate("layers.14.engram.embed.scale");
  ASSERT_TRUE(weight.ok() && scale.ok());
  ASSERT_GT(weight->offset, uint64_t{3'000'000'000});
  ASSERT_GT(scale->offset, uint64_t{1} << 36);

  const LayerPlan plan = EngramPlan(kReleasedLayers);
  ThreadPool pool(1);
  struct TierCase {
    const char* name;
    EngramStoreOptions options;
  };
  EngramStoreOptions mapped{.tier = EngramTier::kMapped};
  // A hot-row cache of a few rows per table: the second pass serves some rows from it.
  EngramStoreOptions disk{.tier = EngramTier::kDisk, .cache_bytes = 2 * 4 * 264, .io_threads = 2};
  EngramStoreOptions direct = disk;
  direct.direct_io = true;
  for (const TierCase& tier :
       {TierCase{"mapped", mapped}, TierCase{"disk", disk}, TierCase{"disk O_DIRECT", direct}}) {
    SCOPED_TRACE(tier.name);
    Result<std::unique_ptr<EngramStorage>> storage =
        EngramStorage::Open(*checkpoint, plan, tier.options, pool);
    if (!storage.ok() && tier.options.direct_io &&
        storage.status().code() == StatusCode::kIoError) {
      std::printf("O_DIRECT case skipped (the test directory's filesystem refuses it): %s\n",
                  storage.status().ToString().c_str());
      continue;
    }
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    ASSERT_EQ((*storage)->num_tables(), 2);
    EXPECT_EQ((*storage)->table_bytes(), uint64_t{202'758'032'400});  // checkpoint.md §6.7
    for (int32_t slot = 0; slot < 2; ++slot) {
      const EngramRowSource& table = (*storage)->table(slot);
      const size_t t = static_cast<size_t>(slot);
      EXPECT_EQ(table.num_rows(), kReleasedRows[t]);
      EXPECT_EQ(table.row_dim(), kReleasedRowDim);
      // Out of order, with repeats; twice (the disk tier's cache then holds some of them).
      const std::vector<int64_t>& p = probes[t];
      const std::vector<int64_t> rows = {p[5], p[3], p[0], p[4], p[1], p[2], p[3], p[5]};
      ASSERT_NO_FATAL_FAILURE(ExpectRows(table, t, rows));
      ASSERT_TRUE(table.WarmRows(p).ok());
      ASSERT_NO_FATAL_FAILURE(ExpectRows(table, t, rows));
    }
  }
}

TEST_F(EngramStoreTest, ReleasedSizeGatherMatchesMappingAtProbedRows) {
  // CopyEngramRows is the resident tier's gather too: run it at the released counts over the
  // mapping (the resident copy would need 98 GB of memory).
  const std::vector<std::vector<int64_t>> probes = {ProbeRows(kReleasedRows[0]),
                                                    ProbeRows(kReleasedRows[1])};
  ASSERT_NO_FATAL_FAILURE(WriteTables(kReleasedLayers, kReleasedRows, kReleasedRowDim, probes));
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  for (size_t t = 0; t < 2; ++t) {
    const std::string prefix = "layers." + std::to_string(kReleasedLayers[t]) + ".engram.embed";
    Result<TensorView> values = checkpoint->Get(prefix + ".weight");
    Result<TensorView> scales = checkpoint->Get(prefix + ".scale");
    ASSERT_TRUE(values.ok() && scales.ok());
    const std::vector<int64_t>& rows = probes[t];
    std::vector<std::byte> got_values(rows.size() * kReleasedRowDim);
    std::vector<std::byte> got_scales(rows.size() * kReleasedRowDim / 32);
    ASSERT_TRUE(CopyEngramRows(prefix, kReleasedRows[t], EngramRowLayout(kReleasedRowDim),
                               values->bytes, scales->bytes, rows, got_values, got_scales)
                    .ok());
    for (size_t i = 0; i < rows.size(); ++i) {
      SCOPED_TRACE("row " + std::to_string(rows[i]));
      EXPECT_TRUE(std::vector<std::byte>(got_values.begin() + i * kReleasedRowDim,
                                         got_values.begin() + (i + 1) * kReleasedRowDim) ==
                  Values(t, rows[i], kReleasedRowDim));
      EXPECT_TRUE(
          std::vector<std::byte>(got_scales.begin() + i * 8, got_scales.begin() + (i + 1) * 8) ==
          Scales(t, rows[i], kReleasedRowDim));
    }
    const std::vector<int64_t> past_end = {kReleasedRows[t]};
    EXPECT_EQ(
        CopyEngramRows(prefix, kReleasedRows[t], EngramRowLayout(kReleasedRowDim), values->bytes,
                       scales->bytes, past_end, std::span(got_values).first(kReleasedRowDim),
                       std::span(got_scales).first(8))
            .code(),
        StatusCode::kOutOfRange);
  }
}

TEST_F(EngramStoreTest, EveryTierReturnsTheStoredRowsOfSmallTables) {
  // Two small tables (row_dim 64: two scales a row); every row written, so a wrong stride or a
  // row read from the other table shows.
  const int32_t layers[2] = {3, 7};
  const int64_t num_rows[2] = {1000, 1531};
  const int32_t row_dim = 64;
  std::vector<std::vector<int64_t>> all(2);
  for (size_t t = 0; t < 2; ++t) {
    for (int64_t r = 0; r < num_rows[t]; ++r) all[t].push_back(r);
  }
  ASSERT_NO_FATAL_FAILURE(WriteTables(layers, num_rows, row_dim, all));
  Result<Checkpoint> checkpoint = Checkpoint::Open(dir_.string());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  const LayerPlan plan = EngramPlan(layers);
  ThreadPool pool(2);
  for (EngramTier tier : {EngramTier::kResident, EngramTier::kMapped, EngramTier::kDisk}) {
    SCOPED_TRACE(std::string(EngramTierName(tier)));
    EngramStoreOptions options{.tier = tier, .cache_bytes = 64 * 66, .io_threads = 2};
    Result<std::unique_ptr<EngramStorage>> storage =
        EngramStorage::Open(*checkpoint, plan, options, pool);
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    for (int32_t slot = 0; slot < 2; ++slot) {
      const size_t t = static_cast<size_t>(slot);
      const std::vector<int64_t> reversed(all[t].rbegin(), all[t].rend());
      ASSERT_NO_FATAL_FAILURE(ExpectRows((*storage)->table(slot), t, reversed));
      ASSERT_NO_FATAL_FAILURE(ExpectRows((*storage)->table(slot), t, all[t]));
    }
  }
}

}  // namespace
}  // namespace dsv41

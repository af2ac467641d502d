// Engram rows split over the ranks (EngramLayerRows::Fill with a communicator), run under mpirun
// with 2, 3 and 4 ranks (src/engram/CMakeLists.txt): every distinct row of a step is read exactly
// once, by the rank that owns it, including the rows at the edges of the ranks' parts and rows
// the step repeats; every rank ends with every row's bytes; a read error or a row outside the
// table on one rank fails the fill on every rank, naming that rank.

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <vector>

#include "base/mpi_testing.h"
#include "config/rank_shard.h"
#include "engram/step_rows.h"

namespace dsv41 {
namespace {

DSV41_MPI_TEST_ENVIRONMENT();

Communicator& Comm() { return MpiTestEnvironment::Comm(); }

constexpr int32_t kRowDim = 64;
constexpr int64_t kTableRows = 1001;  // no rank count from 2 to 4 divides it

std::byte ValueByte(int64_t row, int32_t j) { return static_cast<std::byte>((row * 7 + j) & 0xff); }
std::byte ScaleByte(int64_t row, int32_t j) {
  return static_cast<std::byte>((row * 13 + j * 5 + 1) & 0xff);
}

// A table whose row r holds ValueByte / ScaleByte of r, recording every row it is asked for.
class RecordingTable final : public EngramRowSource {
 public:
  int64_t num_rows() const override { return kTableRows; }
  int32_t row_dim() const override { return kRowDim; }
  Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                  std::span<std::byte> scales) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail) return DataLossError("table: a disk fault");
    for (size_t i = 0; i < row_ids.size(); ++i) {
      const int64_t row = row_ids[i];
      if (row < 0 || row >= kTableRows) {
        return OutOfRangeError("table: row %lld outside the table of %lld rows",
                               static_cast<long long>(row), static_cast<long long>(kTableRows));
      }
      reads.push_back(row);
      for (int32_t j = 0; j < kRowDim; ++j) values[i * kRowDim + j] = ValueByte(row, j);
      for (int32_t j = 0; j < kRowDim / 32; ++j) scales[i * (kRowDim / 32) + j] = ScaleByte(row, j);
    }
    return OkStatus();
  }

  bool fail = false;
  mutable std::vector<int64_t> reads;

 private:
  mutable std::mutex mutex_;
};

// The rows of a step: both edges of every rank's part (and their neighbours), the table's ends,
// repeats, and a spread of others; `cols` per token.
std::vector<int64_t> StepRows(int32_t num_ranks, size_t cols) {
  std::vector<int64_t> rows = {0, 1, kTableRows - 1, kTableRows - 2, 500, 500, 0, 17, 17, 17};
  for (int32_t r = 1; r < num_ranks; ++r) {
    const int64_t edge = ShardEngramRows(kTableRows, RankShard{r, num_ranks}).begin;
    rows.insert(rows.end(), {edge - 1, edge, edge + 1, edge, edge - 1});
  }
  for (int64_t i = 0; i < 40; ++i) rows.push_back((i * 389 + 11) % kTableRows);
  while (rows.size() % cols != 0) rows.push_back(rows[rows.size() % 7]);
  return rows;
}

// Every rank's reads, gathered: [rank] -> rows.
std::vector<std::vector<int64_t>> GatherReads(const std::vector<int64_t>& mine) {
  Communicator& comm = Comm();
  const size_t n = static_cast<size_t>(comm.size());
  std::vector<uint64_t> counts(n, 0);
  counts[static_cast<size_t>(comm.rank())] = mine.size();
  std::vector<CommSegment> segments;
  std::vector<uint64_t> eight(n, sizeof(uint64_t));
  ContiguousSegments(eight, segments);
  comm.AllGather(CommKind::kSetup, std::as_writable_bytes(std::span<uint64_t>(counts)), segments);
  std::vector<uint64_t> sizes(n);
  for (size_t r = 0; r < n; ++r) sizes[r] = counts[r] * sizeof(int64_t);
  std::vector<int64_t> all(ContiguousSegments(sizes, segments) / sizeof(int64_t));
  std::copy(mine.begin(), mine.end(),
            all.begin() + static_cast<std::ptrdiff_t>(segments[comm.rank()].offset / 8));
  comm.AllGather(CommKind::kSetup, std::as_writable_bytes(std::span<int64_t>(all)), segments);
  std::vector<std::vector<int64_t>> out(n);
  for (size_t r = 0; r < n; ++r) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(segments[r].offset / 8);
    out[r].assign(first, first + static_cast<std::ptrdiff_t>(counts[r]));
  }
  return out;
}

TEST(EngramShardTest, EveryRowIsReadOnceByItsOwnerAndEveryRankGetsAll) {
  Communicator& comm = Comm();
  const int32_t n = comm.size();
  constexpr size_t kCols = 3;
  const std::vector<int64_t> rows = StepRows(n, kCols);
  const int64_t tokens = static_cast<int64_t>(rows.size() / kCols);
  RecordingTable table;
  EngramLayerRows layer(kRowDim, rows.size());
  layer.Dedupe(rows, tokens, /*slot=*/0, /*num_tables=*/1, kCols);
  const Status filled = layer.Fill(table, comm);
  ASSERT_TRUE(filled.ok()) << filled.ToString();

  // Every (token, column) reads its row's bytes, whichever rank read it.
  const EngramFetchedRows fetched = layer.fetched();
  for (size_t slot = 0; slot < rows.size(); ++slot) {
    const size_t u = static_cast<size_t>(fetched.index[slot]);
    for (int32_t j = 0; j < kRowDim; ++j) {
      ASSERT_EQ(fetched.values[u * kRowDim + j], ValueByte(rows[slot], j)) << "slot " << slot;
    }
    for (int32_t j = 0; j < kRowDim / 32; ++j) {
      ASSERT_EQ(fetched.scales[u * (kRowDim / 32) + j], ScaleByte(rows[slot], j));
    }
  }
  // Each distinct row read once over all ranks, by its owner.
  const std::vector<std::vector<int64_t>> reads = GatherReads(table.reads);
  const std::set<int64_t> distinct(rows.begin(), rows.end());
  std::multiset<int64_t> all_reads;
  for (int32_t r = 0; r < n; ++r) {
    const IndexRange owned = ShardEngramRows(kTableRows, RankShard{r, n});
    for (int64_t row : reads[static_cast<size_t>(r)]) {
      EXPECT_TRUE(owned.contains(row)) << "rank " << r << " read row " << row << ", owned by "
                                       << "another rank";
      all_reads.insert(row);
    }
  }
  EXPECT_EQ(all_reads.size(), distinct.size()) << "a row was read twice or not at all";
  EXPECT_EQ(std::set<int64_t>(all_reads.begin(), all_reads.end()), distinct);
}

TEST(EngramShardTest, AReadErrorOnOneRankFailsEveryRankNamingIt) {
  Communicator& comm = Comm();
  const int32_t failing = comm.size() - 1;
  RecordingTable table;
  table.fail = comm.rank() == failing;
  const std::vector<int64_t> rows = StepRows(comm.size(), 1);
  EngramLayerRows layer(kRowDim, rows.size());
  layer.Dedupe(rows, static_cast<int64_t>(rows.size()), 0, 1, 1);
  const Status filled = layer.Fill(table, comm);
  ASSERT_FALSE(filled.ok());
  EXPECT_EQ(filled.code(), StatusCode::kDataLoss);
  EXPECT_NE(filled.message().find("rank " + std::to_string(failing)), std::string::npos)
      << filled.ToString();
  EXPECT_NE(filled.message().find("a disk fault"), std::string::npos) << filled.ToString();
}

TEST(EngramShardTest, ARowOutsideTheTableIsRefusedByTheLastRankForAll) {
  Communicator& comm = Comm();
  RecordingTable table;
  const std::vector<int64_t> rows = {5, kTableRows + 3, 800};
  EngramLayerRows layer(kRowDim, rows.size());
  layer.Dedupe(rows, static_cast<int64_t>(rows.size()), 0, 1, 1);
  const Status filled = layer.Fill(table, comm);
  ASSERT_FALSE(filled.ok());
  EXPECT_EQ(filled.code(), StatusCode::kOutOfRange);
  EXPECT_NE(filled.message().find("rank " + std::to_string(comm.size() - 1)), std::string::npos)
      << filled.ToString();
}

}  // namespace
}  // namespace dsv41

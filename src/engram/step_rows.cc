#include "engram/step_rows.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "base/check.h"

namespace dsv41 {
namespace {

// A rank's fetch status as it travels: the code, then the message (cut to fit), zero-padded.
constexpr size_t kStatusFrameBytes = 512;

void EncodeStatus(const Status& status, std::span<std::byte> frame) {
  std::fill(frame.begin(), frame.end(), std::byte{0});
  frame[0] = static_cast<std::byte>(status.code());
  const size_t n = std::min(status.message().size(), frame.size() - 1);
  std::memcpy(frame.data() + 1, status.message().data(), n);
}

Status DecodeStatus(std::span<const std::byte> frame) {
  const auto code = static_cast<StatusCode>(frame[0]);
  if (code == StatusCode::kOk) return OkStatus();
  const char* text = reinterpret_cast<const char*>(frame.data() + 1);
  return Status(code, std::string(text, strnlen(text, frame.size() - 1)));
}

}  // namespace

EngramLayerRows::EngramLayerRows(int32_t row_dim, size_t capacity)
    : row_dim_(static_cast<size_t>(row_dim)) {
  Reserve(capacity);
}

void EngramLayerRows::Reserve(size_t capacity) {
  if (capacity <= index_.size()) return;
  sorted_.resize(capacity);
  unique_.resize(capacity);
  index_.resize(capacity);
  values_.resize(capacity * row_dim_);
  scales_.resize(capacity * row_dim_ / 32);
}

void EngramLayerRows::Dedupe(std::span<const int64_t> rows, int64_t num_tokens, size_t slot,
                             size_t num_tables, size_t num_cols) {
  const size_t tokens = static_cast<size_t>(num_tokens);
  const size_t n = tokens * num_cols;
  DSV41_CHECK(n <= capacity(), "Engram rows: %zu slots, capacity %zu", n, capacity());
  for (size_t t = 0; t < tokens; ++t) {
    std::copy_n(rows.data() + (t * num_tables + slot) * num_cols, num_cols,
                sorted_.data() + t * num_cols);
  }
  const auto sorted_end = sorted_.begin() + static_cast<std::ptrdiff_t>(n);
  std::sort(sorted_.begin(), sorted_end);
  const auto end = std::unique_copy(sorted_.begin(), sorted_end, unique_.begin());
  unique_count_ = static_cast<size_t>(end - unique_.begin());
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t c = 0; c < num_cols; ++c) {
      const int64_t row = rows[(t * num_tables + slot) * num_cols + c];
      index_[t * num_cols + c] =
          static_cast<int32_t>(std::lower_bound(unique_.begin(), end, row) - unique_.begin());
    }
  }
  num_slots_ = n;
}

Status EngramLayerRows::Fill(const EngramRowSource& table) {
  return table.FillRows(unique(), std::span<std::byte>(values_.data(), unique_count_ * row_dim_),
                        std::span<std::byte>(scales_.data(), unique_count_ * row_dim_ / 32));
}

IndexRange EngramLayerRows::RowsOfRank(int64_t table_rows, RankShard shard) const {
  const IndexRange owned = ShardEngramRows(table_rows, shard);
  // Ids outside the table go to the ends, whose reads refuse them with the table's error.
  const int64_t lo = shard.rank == 0 ? std::numeric_limits<int64_t>::min() : owned.begin;
  const int64_t hi =
      shard.rank == shard.num_ranks - 1 ? std::numeric_limits<int64_t>::max() : owned.end;
  const auto end = unique_.begin() + static_cast<std::ptrdiff_t>(unique_count_);
  const auto first = std::lower_bound(unique_.begin(), end, lo);
  const auto last = std::lower_bound(first, end, hi);
  return IndexRange{.begin = first - unique_.begin(), .end = last - unique_.begin()};
}

Status EngramLayerRows::Fill(const EngramRowSource& table, Communicator& comm) {
  if (comm.size() == 1) return Fill(table);
  const int32_t num_ranks = comm.size();
  const size_t ranks = static_cast<size_t>(num_ranks);
  const size_t scale_bytes = row_dim_ / 32;
  const IndexRange mine = RowsOfRank(table.num_rows(), RankShard{comm.rank(), num_ranks});
  const auto count = static_cast<size_t>(mine.size());
  const auto at = static_cast<size_t>(mine.begin);
  const Status read =
      table.FillRows(std::span<const int64_t>(unique_.data() + at, count),
                     std::span<std::byte>(values_.data() + at * row_dim_, count * row_dim_),
                     std::span<std::byte>(scales_.data() + at * scale_bytes, count * scale_bytes));
  // Every rank learns every rank's outcome, so all fail or go on together.
  status_frames_.resize(ranks * kStatusFrameBytes);
  EncodeStatus(
      read, std::span<std::byte>(status_frames_)
                .subspan(static_cast<size_t>(comm.rank()) * kStatusFrameBytes, kStatusFrameBytes));
  std::vector<uint64_t> frame_sizes(ranks, kStatusFrameBytes);
  ContiguousSegments(frame_sizes, segments_);
  comm.AllGather(CommKind::kEngram, status_frames_, segments_);
  for (int32_t r = 0; r < num_ranks; ++r) {
    const Status status =
        DecodeStatus(std::span<const std::byte>(status_frames_)
                         .subspan(static_cast<size_t>(r) * kStatusFrameBytes, kStatusFrameBytes));
    if (!status.ok()) return status.WithPrefix(StrFormat("rank %d", r));
  }
  // The distinct rows are sorted and the ranks own increasing row ranges: rank r's rows are one
  // run of the buffers, at its place among them.
  const auto gather = [&](std::vector<std::byte>& buffer, size_t bytes_per_row) {
    segments_.resize(ranks);
    for (int32_t r = 0; r < num_ranks; ++r) {
      const IndexRange rows = RowsOfRank(table.num_rows(), RankShard{r, num_ranks});
      segments_[static_cast<size_t>(r)] =
          CommSegment{.offset = static_cast<uint64_t>(rows.begin) * bytes_per_row,
                      .size = static_cast<uint64_t>(rows.size()) * bytes_per_row};
    }
    comm.AllGather(CommKind::kEngram,
                   std::span<std::byte>(buffer.data(), unique_count_ * bytes_per_row), segments_);
  };
  gather(values_, row_dim_);
  gather(scales_, scale_bytes);
  return OkStatus();
}

EngramFetchedRows EngramLayerRows::fetched() const {
  return EngramFetchedRows{
      .values = std::span<const std::byte>(values_.data(), unique_count_ * row_dim_),
      .scales = std::span<const std::byte>(scales_.data(), unique_count_ * row_dim_ / 32),
      .index = std::span<const int32_t>(index_.data(), num_slots_)};
}

SyncEngramStepRows::SyncEngramStepRows(std::vector<const EngramRowSource*> tables, int32_t num_cols)
    : tables_(std::move(tables)), num_cols_(static_cast<size_t>(num_cols)) {
  for (const EngramRowSource* table : tables_) layers_.emplace_back(table->row_dim(), 0);
}

void SyncEngramStepRows::StartStep(std::span<const int64_t> rows, int64_t num_tokens) {
  rows_ = rows;
  num_tokens_ = num_tokens;
}

Result<EngramFetchedRows> SyncEngramStepRows::WaitForLayer(int32_t engram_slot) {
  DSV41_CHECK(engram_slot >= 0 && static_cast<size_t>(engram_slot) < layers_.size(),
              "WaitForLayer: slot %d of %zu", engram_slot, layers_.size());
  const size_t slot = static_cast<size_t>(engram_slot);
  DSV41_CHECK(rows_.size() == static_cast<size_t>(num_tokens_) * tables_.size() * num_cols_,
              "Engram rows: %zu row ids for %lld tokens", rows_.size(),
              static_cast<long long>(num_tokens_));
  EngramLayerRows& layer = layers_[slot];
  layer.Reserve(static_cast<size_t>(num_tokens_) * num_cols_);
  layer.Dedupe(rows_, num_tokens_, slot, tables_.size(), num_cols_);
  const Status status = layer.Fill(*tables_[slot]);
  if (!status.ok()) {
    return status.WithPrefix(StrFormat("reading the Engram rows of slot %d", engram_slot));
  }
  return layer.fetched();
}

}  // namespace dsv41

#pragma once

// A step's Engram rows, de-duplicated per layer (serving.md §8.4), and the synchronous
// EngramStepRows that reads them when each layer asks. The prefetcher (engine/engram_prefetch.h)
// fetches the same buffers ahead on its own thread; both fill them through EngramLayerRows, so
// the forward sees the same rows whichever fetched them.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/communicator.h"
#include "base/status.h"
#include "config/rank_shard.h"
#include "engram/engram_rows.h"

namespace dsv41 {

// One Engram layer's rows of one step: the distinct row ids in ascending order, which of them
// each (token, column) reads, and, once filled, their stored bytes. The buffers are persistent:
// they grow to the largest step and are kept, so a steady workload stops allocating.
class EngramLayerRows {
 public:
  // Buffers for `capacity` (token, column) slots of rows `row_dim` e4m3 values wide.
  EngramLayerRows(int32_t row_dim, size_t capacity);

  // Grows the buffers to at least `capacity` slots (never shrinks them).
  void Reserve(size_t capacity);
  size_t capacity() const { return index_.size(); }

  // Takes Engram slot `slot`'s ids out of `rows` [num_tokens, num_tables, num_cols]
  // (Batch::engram_rows) and de-duplicates them. num_tokens · num_cols must fit the capacity
  // (checked). The rows filled before are stale afterwards.
  void Dedupe(std::span<const int64_t> rows, int64_t num_tokens, size_t slot, size_t num_tables,
              size_t num_cols);
  // Reads the distinct rows from `table` into the buffers: the table's error when its storage
  // fails, and then the rows must not be used.
  Status Fill(const EngramRowSource& table);
  // The same in a multi-process run (comm of N > 1 ranks; Fill when N = 1): this rank reads only
  // the distinct rows it owns (ShardEngramRows; rows outside the table belong to the first or
  // last rank, whose read refuses them), then one all-gather of every rank's status and two of
  // the rows (values, scales) complete the buffers: each row is read once, by its owner, and
  // every rank ends with all of them. Every rank returns the same: ok, or the error of the first
  // rank whose read failed, naming that rank. All ranks must call it for the same step and
  // table, in the same order.
  Status Fill(const EngramRowSource& table, Communicator& comm);
  // Which of the distinct rows (indices into unique()) rank `shard.rank` reads.
  IndexRange RowsOfRank(int64_t table_rows, RankShard shard) const;

  // The distinct row ids of the last Dedupe, ascending.
  std::span<const int64_t> unique() const { return {unique_.data(), unique_count_}; }
  // The (token, column) slots of the last Dedupe.
  size_t num_slots() const { return num_slots_; }
  // Views of the filled rows, valid until the next Dedupe.
  EngramFetchedRows fetched() const;

 private:
  size_t row_dim_;
  std::vector<int64_t> sorted_;           // scratch for the de-duplication
  std::vector<int64_t> unique_;           // the distinct rows, ascending (unique_count_ of them)
  std::vector<int32_t> index_;            // per (token, column): its row's position in unique_
  std::vector<std::byte> values_;         // unique × row_dim
  std::vector<std::byte> scales_;         // unique × row_dim/32
  std::vector<std::byte> status_frames_;  // Fill(table, comm): one frame per rank
  std::vector<CommSegment> segments_;     // Fill(table, comm)
  size_t unique_count_ = 0;
  size_t num_slots_ = 0;
};

// The step's rows read synchronously, each Engram layer's when the forward asks for it, from
// `tables` (in Engram slot order; not owned, they outlive this): the rows of a forward that
// nothing fetched ahead (TextModel::MappedEngramRows, the tests, one-off tools). The same bits as
// the prefetcher's. Engine thread only.
class SyncEngramStepRows final : public EngramStepRows {
 public:
  // Steps with `num_cols` rows per token and layer.
  SyncEngramStepRows(std::vector<const EngramRowSource*> tables, int32_t num_cols);

  // Starts a step over `rows` [num_tokens, num_tables, num_cols] (Batch::engram_rows; a view
  // that must live until the step's last WaitForLayer). Nothing is read or checked yet: the
  // forward checks the batch first, and the buffers grow to the step (then are kept).
  void StartStep(std::span<const int64_t> rows, int64_t num_tokens);
  // De-duplicates and reads the rows of `engram_slot` now; the table's error when that fails.
  Result<EngramFetchedRows> WaitForLayer(int32_t engram_slot) override;

 private:
  std::vector<const EngramRowSource*> tables_;
  size_t num_cols_;
  std::vector<EngramLayerRows> layers_;
  std::span<const int64_t> rows_;
  int64_t num_tokens_ = 0;
};

}  // namespace dsv41

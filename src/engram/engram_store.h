#pragma once

// Engram host offload (serving.md §8.2): the tiers an Engram table's rows can live in, behind the
// one EngramRowSource interface (model/engram_fusion.h), and the storage that opens every table of
// a model in the tier asked for. Every tier returns the stored bytes unchanged.
//   resident: the rows copied into anonymous memory at load (transparent huge pages asked for);
//   mapped:   the checkpoint mapping read in place (MADV_RANDOM, no copy; processes on one machine
//             share the page cache);
//   disk:     only the needed rows read with pread (optionally O_DIRECT) on an I/O thread pool,
//             de-duplicated by 4 KiB page, in batches of bounded size, into a bounded CLOCK
//             hot-row cache that serves repeats; the tables may be larger than memory.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "checkpoint/checkpoint.h"
#include "config/layer_plan.h"
#include "config/rank_shard.h"
#include "engram/engram_rows.h"

namespace dsv41 {

enum class EngramTier { kResident, kMapped, kDisk };

// "resident", "mapped", "disk".
std::string_view EngramTierName(EngramTier tier);
// InvalidArgument naming --engram-storage for anything else.
Result<EngramTier> ParseEngramTier(std::string_view name);

struct EngramStoreOptions {
  EngramTier tier = EngramTier::kMapped;
  // disk: the hot-row cache over all tables, split between them by row count (0: no cache).
  uint64_t cache_bytes = uint64_t{1} << 30;
  // disk: reads in flight (the I/O threads of each table).
  int32_t io_threads = 16;
  // disk: open the table files with O_DIRECT (4 KiB-aligned page reads, no page cache).
  bool direct_io = false;
  // disk: the most 4 KiB pages one batch of reads stages (its buffer is this × 4 KiB, allocated
  // once per table); a fetch with more misses runs in several batches.
  int32_t max_pages_per_batch = 8192;
  // A multi-process run: resident copies only this rank's rows (ShardEngramRows) and refuses
  // the others; the mapped and disk tiers read only what they are asked for anyway.
  RankShard shard = {};
};

// The disk tier of one table: `<prefix>.engram.embed.{weight,scale}` read from their shard files.
// Thread-safe: fetches of one table run one at a time (a mutex); each spreads its reads over the
// I/O threads.
class DiskEngramRowSource final : public EngramRowSource {
 public:
  // Opens the files of the tensors (paths and ranges from the checkpoint) and checks that they
  // hold them: a file shorter than its tensor is refused with DataLoss naming file and tensor.
  static Result<std::unique_ptr<DiskEngramRowSource>> Open(const Checkpoint& checkpoint,
                                                           int32_t layer,
                                                           const EngramStoreOptions& options,
                                                           uint64_t cache_bytes);
  ~DiskEngramRowSource() override;

  int64_t num_rows() const override { return num_rows_; }
  int32_t row_dim() const override { return row_dim_; }
  Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                  std::span<std::byte> scales) const override;
  Status WarmRows(std::span<const int64_t> row_ids) const override;
  Status DropCaches() override;
  uint64_t resident_bytes() const override;
  EngramStoreCounters counters() const override;

  // Rows the hot-row cache holds at most.
  int64_t cache_capacity_rows() const;

 private:
  struct State;
  DiskEngramRowSource() = default;
  // FillRows (values/scales non-empty) or WarmRows (empty: misses go to the cache only).
  Status Fetch(std::span<const int64_t> row_ids, std::span<std::byte> values,
               std::span<std::byte> scales) const;

  std::string name_;  // "layers.N.engram.embed"
  int64_t num_rows_ = 0;
  int32_t row_dim_ = 0;
  std::unique_ptr<State> state_;
};

// Every Engram table of a model in slot order (engram_slot 0, 1, ...), in one tier.
class EngramStorage {
 public:
  // Opens the tables of the Engram layers of `plan` in `checkpoint` as options.tier says. resident
  // copies them over `pool` and reports progress (stage "copying Engram tables", unit "bytes"; may
  // cancel). Errors name the file and tensor.
  static Result<std::unique_ptr<EngramStorage>> Open(const Checkpoint& checkpoint,
                                                     const LayerPlan& plan,
                                                     const EngramStoreOptions& options,
                                                     ThreadPool& pool,
                                                     const ProgressFn& progress = {});
  // Tables given directly (tests: slow or fault-injecting stores). `paths`: files DropCaches
  // drops from the page cache.
  EngramStorage(EngramStoreOptions options, std::vector<std::unique_ptr<EngramRowSource>> tables,
                std::vector<std::string> paths = {});

  const EngramStoreOptions& options() const { return options_; }
  int32_t num_tables() const { return static_cast<int32_t>(tables_.size()); }
  const EngramRowSource& table(int32_t slot) const { return *tables_[static_cast<size_t>(slot)]; }
  EngramRowSource& mutable_table(int32_t slot) { return *tables_[static_cast<size_t>(slot)]; }
  // The tables' stored bytes (values and scales).
  uint64_t table_bytes() const;
  // Bytes held in memory of the storage's own (resident copies, hot-row caches).
  uint64_t resident_bytes() const;
  EngramStoreCounters counters() const;  // summed over the tables
  // Empties the hot-row caches and drops the table files from the page cache (posix_fadvise
  // DONTNEED; the mapped tier first releases its own page-table references). Not while a fetch
  // runs. Errors name the file.
  Status DropCaches();

 private:
  EngramStoreOptions options_;
  std::vector<std::unique_ptr<EngramRowSource>> tables_;
  std::vector<std::string> paths_;
};

}  // namespace dsv41

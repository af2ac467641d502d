#pragma once

// Where the Engram tables' rows come from (serving.md §8.2): the store interface every tier
// implements, the mapped tier, and the per-step view of rows fetched ahead of the forward. The
// model reads rows only through these; the tiers and the prefetcher live above or beside them.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "checkpoint/checkpoint.h"

namespace dsv41 {

// What an Engram row store did since it was opened (cumulative; thread-safe snapshots).
struct EngramStoreCounters {
  uint64_t rows_fetched = 0;  // rows asked for (by FillRows and WarmRows)
  uint64_t cache_hits = 0;    // of those, served from the hot-row cache (disk tier)
  uint64_t rows_read = 0;     // of those, read from the file (disk tier)
  uint64_t pages_read = 0;    // distinct 4 KiB pages read (disk tier)
  uint64_t bytes_read = 0;    // bytes read from the file (disk tier)
  uint64_t read_errors = 0;   // fetches that failed (a read error or a short read)
};

// The store of one Engram layer's table (serving.md §8.2): where its rows come from — a copy in
// anonymous memory (resident), the checkpoint mapping (mapped), or the file through pread and a
// hot-row cache (disk; engram/engram_store.h). A row is `row_dim` e4m3 values and row_dim/32
// ue8m0 scales (one per 32 values), exactly as `engram.embed.weight` / `engram.embed.scale`
// store it: every tier returns the stored bytes unchanged, and the dequantisation is shared code
// after the fetch (DequantizeEngramRows). Implementations are thread-safe.
class EngramRowSource {
 public:
  virtual ~EngramRowSource() = default;

  virtual int64_t num_rows() const = 0;
  virtual int32_t row_dim() const = 0;

  // For each i, copies row row_ids[i] into values[i·row_dim ..] (e4m3 bytes) and
  // scales[i·row_dim/32 ..] (ue8m0 bytes). OutOfRange naming the table and the row when a row id
  // is outside [0, num_rows); DataLoss or IoError naming the file and tensor when the storage
  // fails (a read error, a short read), in which case the outputs must not be used.
  // values.size() = n·row_dim, scales.size() = n·row_dim/32 (checked).
  virtual Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                          std::span<std::byte> scales) const = 0;

  // A hint that these rows are wanted soon (the next prefill chunk): the disk tier reads the
  // missing ones into its hot-row cache. No output; errors only count.
  virtual Status WarmRows(std::span<const int64_t> row_ids) const {
    (void)row_ids;
    return OkStatus();
  }
  // Forgets what is cached (hot rows; the table files' pages in the page cache), for cold-start
  // measurements. Not while a fetch runs.
  virtual Status DropCaches() { return OkStatus(); }
  // Bytes this store holds in memory of its own (the resident copy, the hot-row cache).
  virtual uint64_t resident_bytes() const { return 0; }
  virtual EngramStoreCounters counters() const { return {}; }
};

// Where row `row` of an Engram table sits in its two tensors (checkpoint.md §4.3): its values at
// byte row·row_dim of `engram.embed.weight`, its scales at row·(row_dim/32) of
// `engram.embed.scale`. Every tier computes row addresses only through this, in 64 bits: the
// released tables (384,006,168 and 384,016,682 rows × 256 B) pass 2^31 bytes at row 2^23 and
// 2^32 at row 2^24 (real-weight-traps.md L6).
struct EngramRowLayout {
  explicit EngramRowLayout(int32_t row_dim)
      : value_bytes(static_cast<uint64_t>(row_dim)), scale_bytes(value_bytes / 32) {}

  uint64_t ValueOffset(int64_t row) const { return static_cast<uint64_t>(row) * value_bytes; }
  uint64_t ScaleOffset(int64_t row) const { return static_cast<uint64_t>(row) * scale_bytes; }

  uint64_t value_bytes;  // per row: row_dim e4m3 bytes
  uint64_t scale_bytes;  // per row: row_dim / 32 ue8m0 bytes
};

// The gather of the tiers that hold a table in memory (resident copy, checkpoint mapping): copies
// rows row_ids of `table_values` [num_rows, row_dim] / `table_scales` [num_rows, row_dim/32] into
// values / scales as EngramRowSource::FillRows defines (sizes checked). OutOfRange naming `table`
// and the row for a row outside [0, num_rows).
Status CopyEngramRows(std::string_view table, int64_t num_rows, EngramRowLayout layout,
                      std::span<const std::byte> table_values,
                      std::span<const std::byte> table_scales, std::span<const int64_t> row_ids,
                      std::span<std::byte> values, std::span<std::byte> scales);
// The same over a part of the table: `held_values` / `held_scales` hold rows [held_begin,
// held_end) only (one rank's rows in a multi-process run). OutOfRange naming the table, the row
// and the rows held for a row outside them.
Status CopyHeldEngramRows(std::string_view table, int64_t num_rows, int64_t held_begin,
                          int64_t held_end, EngramRowLayout layout,
                          std::span<const std::byte> held_values,
                          std::span<const std::byte> held_scales, std::span<const int64_t> row_ids,
                          std::span<std::byte> values, std::span<std::byte> scales);

// The rows of one Engram layer for one step, fetched ahead of the forward: `values` [U, row_dim]
// and `scales` [U, row_dim/32] hold the U distinct rows, `index` [T·num_cols] says which of them
// each (token, column) reads. Views into the fetcher's persistent buffers.
struct EngramFetchedRows {
  std::span<const std::byte> values;
  std::span<const std::byte> scales;
  std::span<const int32_t> index;
};

// Where the forward waits for a step's Engram rows (engine/engram_prefetch.h): the fetch was
// submitted before the forward began; WaitForLayer blocks until that Engram slot's rows are in
// (a per-layer completion) and returns them, or the storage's error.
class EngramStepRows {
 public:
  virtual ~EngramStepRows() = default;
  virtual Result<EngramFetchedRows> WaitForLayer(int32_t engram_slot) = 0;
};

// The rows read straight from the checkpoint mapping of `<prefix>.engram.embed.{weight,scale}`.
// A view: the Checkpoint must outlive it.
class MappedEngramRowSource final : public EngramRowSource {
 public:
  // Errors name the tensor: missing, wrong dtype (F8_E4M3 / F8_E8M0), wrong rank or shape, a row
  // width that is not a multiple of 32.
  static Result<MappedEngramRowSource> Open(const Checkpoint& checkpoint, int32_t layer);

  int64_t num_rows() const override { return num_rows_; }
  int32_t row_dim() const override { return row_dim_; }
  Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                  std::span<std::byte> scales) const override;

 private:
  MappedEngramRowSource() = default;

  std::string name_;  // "layers.N.engram.embed" for messages
  std::span<const std::byte> values_;
  std::span<const std::byte> scales_;
  int64_t num_rows_ = 0;
  int32_t row_dim_ = 0;
};

}  // namespace dsv41

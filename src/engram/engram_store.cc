#include "engram/engram_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "base/mapped_file.h"

namespace dsv41 {
namespace {

constexpr uint64_t kPageBytes = 4096;
// Adjacent pages coalesce into one read of at most this many pages.
constexpr uint64_t kMaxRunPages = 32;

std::string TableName(int32_t layer) { return "layers." + std::to_string(layer) + ".engram.embed"; }

// The Engram layers of `plan` in slot order.
std::vector<int32_t> EngramLayersBySlot(const LayerPlan& plan) {
  std::vector<std::pair<int32_t, int32_t>> slots;
  for (const LayerRole& role : plan.layers) {
    if (role.has_engram()) slots.emplace_back(*role.engram_slot, role.layer);
  }
  std::sort(slots.begin(), slots.end());
  std::vector<int32_t> layers;
  for (const auto& [slot, layer] : slots) layers.push_back(layer);
  return layers;
}

Status CheckRow(const std::string& name, int64_t row, int64_t num_rows) {
  if (row < 0 || row >= num_rows) {
    return OutOfRangeError("'%s': row %lld outside the table of %lld rows", name.c_str(),
                           static_cast<long long>(row), static_cast<long long>(num_rows));
  }
  return OkStatus();
}

void CheckFillSizes(size_t n, int32_t row_dim, std::span<std::byte> values,
                    std::span<std::byte> scales) {
  const size_t value_bytes = static_cast<size_t>(row_dim);
  DSV41_CHECK(values.size() == n * value_bytes && scales.size() == n * (value_bytes / 32),
              "FillRows: %zu rows into %zu value and %zu scale bytes", n, values.size(),
              scales.size());
}

// ---- resident -----------------------------------------------------------------------------

class ResidentEngramRowSource final : public EngramRowSource {
 public:
  // `values` / `scales` hold rows `held` of the table's `num_rows`.
  ResidentEngramRowSource(std::string name, int64_t num_rows, IndexRange held, int32_t row_dim,
                          AnonymousMemory values, AnonymousMemory scales)
      : name_(std::move(name)),
        num_rows_(num_rows),
        held_(held),
        row_dim_(row_dim),
        values_(std::move(values)),
        scales_(std::move(scales)) {}

  int64_t num_rows() const override { return num_rows_; }
  int32_t row_dim() const override { return row_dim_; }
  uint64_t resident_bytes() const override {
    return values_.bytes().size() + scales_.bytes().size();
  }
  EngramStoreCounters counters() const override {
    EngramStoreCounters c;
    c.rows_fetched = rows_fetched_.load(std::memory_order_relaxed);
    return c;
  }

  Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                  std::span<std::byte> scales) const override {
    DSV41_RETURN_IF_ERROR(CopyHeldEngramRows(name_, num_rows_, held_.begin, held_.end,
                                             EngramRowLayout(row_dim_), values_.bytes(),
                                             scales_.bytes(), row_ids, values, scales));
    rows_fetched_.fetch_add(row_ids.size(), std::memory_order_relaxed);
    return OkStatus();
  }

 private:
  std::string name_;
  int64_t num_rows_;
  IndexRange held_;
  int32_t row_dim_;
  AnonymousMemory values_;
  AnonymousMemory scales_;
  mutable std::atomic<uint64_t> rows_fetched_{0};
};

// Copies `from` into `to` over the pool in 64 MiB pieces, reporting progress after each.
Status CopyWithProgress(std::span<const std::byte> from, std::span<std::byte> to, ThreadPool& pool,
                        const ProgressFn& progress, uint64_t& done, uint64_t total) {
  constexpr size_t kPiece = size_t{64} << 20;
  for (size_t at = 0; at < from.size(); at += kPiece) {
    const size_t n = std::min(kPiece, from.size() - at);
    pool.ParallelFor(static_cast<int64_t>(n), int64_t{1} << 16, [&](int64_t b, int64_t e, int) {
      std::memcpy(to.data() + at + static_cast<size_t>(b),
                  from.data() + at + static_cast<size_t>(b), static_cast<size_t>(e - b));
    });
    done += n;
    if (progress &&
        !progress(Progress{
            .stage = "copying Engram tables", .done = done, .total = total, .unit = "bytes"})) {
      return CancelledError("copying the Engram tables was cancelled");
    }
  }
  return OkStatus();
}

// ---- mapped -------------------------------------------------------------------------------

class MappedTierRowSource final : public EngramRowSource {
 public:
  MappedTierRowSource(MappedEngramRowSource rows, std::span<const std::byte> values,
                      std::span<const std::byte> scales)
      : rows_(std::move(rows)), values_(values), scales_(scales) {
    AdviseRandomAccess(values_);
    AdviseRandomAccess(scales_);
  }

  int64_t num_rows() const override { return rows_.num_rows(); }
  int32_t row_dim() const override { return rows_.row_dim(); }
  Status FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                  std::span<std::byte> scales) const override {
    DSV41_RETURN_IF_ERROR(rows_.FillRows(row_ids, values, scales));
    rows_fetched_.fetch_add(row_ids.size(), std::memory_order_relaxed);
    return OkStatus();
  }
  Status WarmRows(std::span<const int64_t> row_ids) const override {
    // Touch the pages, so the faults happen here and not inside the layer.
    const EngramRowLayout layout(row_dim());
    uint64_t sum = 0;
    for (int64_t row : row_ids) {
      if (row < 0 || row >= num_rows()) continue;
      const std::byte* value = values_.data() + layout.ValueOffset(row);
      sum += static_cast<uint8_t>(*reinterpret_cast<const volatile std::byte*>(value));
      sum += static_cast<uint8_t>(
          *reinterpret_cast<const volatile std::byte*>(value + layout.value_bytes - 1));
      sum += static_cast<uint8_t>(
          *reinterpret_cast<const volatile std::byte*>(scales_.data() + layout.ScaleOffset(row)));
    }
    warm_sink_.fetch_add(sum, std::memory_order_relaxed);
    rows_fetched_.fetch_add(row_ids.size(), std::memory_order_relaxed);
    return OkStatus();
  }
  Status DropCaches() override {
    ReleaseMappedPages(values_);
    ReleaseMappedPages(scales_);
    return OkStatus();
  }
  EngramStoreCounters counters() const override {
    EngramStoreCounters c;
    c.rows_fetched = rows_fetched_.load(std::memory_order_relaxed);
    return c;
  }

 private:
  MappedEngramRowSource rows_;
  std::span<const std::byte> values_;
  std::span<const std::byte> scales_;
  mutable std::atomic<uint64_t> rows_fetched_{0};
  mutable std::atomic<uint64_t> warm_sink_{0};
};

}  // namespace

std::string_view EngramTierName(EngramTier tier) {
  switch (tier) {
    case EngramTier::kResident:
      return "resident";
    case EngramTier::kMapped:
      return "mapped";
    case EngramTier::kDisk:
      return "disk";
  }
  return "";
}

Result<EngramTier> ParseEngramTier(std::string_view name) {
  if (name == "resident") return EngramTier::kResident;
  if (name == "mapped") return EngramTier::kMapped;
  if (name == "disk") return EngramTier::kDisk;
  return InvalidArgumentError("--engram-storage '%.*s': want resident, mapped or disk",
                              static_cast<int>(name.size()), name.data());
}

// ---- disk ---------------------------------------------------------------------------------

struct DiskEngramRowSource::State {
  struct File {
    int fd = -1;
    std::string path;
    std::string tensor;  // the tensor it holds, for messages
    uint64_t size = 0;
    uint64_t offset = 0;  // of the tensor's first byte
  };
  // One read: `count` adjacent pages of file `file` from `first_page`, into the staging buffer
  // at page `staging_page`.
  struct Run {
    int32_t file = 0;
    uint64_t first_page = 0;
    uint64_t count = 0;
    uint64_t staging_page = 0;
  };

  File files[2];              // values, scales
  EngramRowLayout layout{0};  // row offsets inside the two tensors
  size_t value_bytes = 0;
  size_t scale_bytes = 0;
  size_t row_bytes = 0;
  bool direct_io = false;

  std::mutex mutex;  // one fetch at a time; guards everything below
  // The CLOCK hot-row cache: slot s holds row slot_row[s] (values then scales).
  AnonymousMemory cache_memory;
  int64_t capacity = 0;
  int64_t used = 0;
  int64_t hand = 0;
  std::unordered_map<int64_t, int64_t> slot_of;
  std::vector<int64_t> slot_row;
  std::vector<uint8_t> referenced;
  // Reads of one batch.
  AnonymousMemory staging;
  uint64_t max_pages = 0;
  std::unique_ptr<ThreadPool> io_pool;
  std::vector<int64_t> misses;     // rows not in the cache
  std::vector<size_t> miss_index;  // their output index
  std::vector<uint64_t> pages;     // (file << 56) | page, sorted, unique
  std::vector<Run> runs;
  std::vector<Status> thread_status;
  std::vector<uint64_t> thread_bytes;

  std::atomic<uint64_t> rows_fetched{0}, cache_hits{0}, rows_read{0}, pages_read{0}, bytes_read{0},
      read_errors{0};

  ~State() {
    for (File& f : files) {
      if (f.fd >= 0) ::close(f.fd);
    }
  }

  static uint64_t Key(int32_t file, uint64_t page) {
    return (static_cast<uint64_t>(file) << 56) | page;
  }

  std::byte* Slot(int64_t slot) {
    return cache_memory.bytes().data() + static_cast<size_t>(slot) * row_bytes;
  }

  void Insert(int64_t row, const std::byte* value, const std::byte* scale) {
    if (capacity == 0 || slot_of.count(row) != 0) return;
    int64_t slot;
    if (used < capacity) {
      slot = used++;
    } else {
      while (referenced[static_cast<size_t>(hand)] != 0) {
        referenced[static_cast<size_t>(hand)] = 0;
        hand = (hand + 1) % capacity;
      }
      slot = hand;
      hand = (hand + 1) % capacity;
      slot_of.erase(slot_row[static_cast<size_t>(slot)]);
    }
    std::memcpy(Slot(slot), value, value_bytes);
    std::memcpy(Slot(slot) + value_bytes, scale, scale_bytes);
    slot_row[static_cast<size_t>(slot)] = row;
    referenced[static_cast<size_t>(slot)] = 0;
    slot_of.emplace(row, slot);
  }

  // Adds the pages holding `bytes` bytes at `offset` of file `file`.
  void AddPages(int32_t file, uint64_t offset, size_t bytes) {
    const uint64_t at = files[file].offset + offset;
    for (uint64_t p = at / kPageBytes; p <= (at + bytes - 1) / kPageBytes; ++p) {
      pages.push_back(Key(file, p));
    }
  }

  // The staging bytes of `bytes` bytes at `offset` of file `file` (all their pages were read).
  const std::byte* Staged(int32_t file, uint64_t offset) const {
    const uint64_t at = files[file].offset + offset;
    const auto it = std::lower_bound(pages.begin(), pages.end(), Key(file, at / kPageBytes));
    DSV41_CHECK(it != pages.end() && *it == Key(file, at / kPageBytes), "page not staged");
    const size_t staged = static_cast<size_t>(it - pages.begin());
    return staging.bytes().data() + staged * kPageBytes + at % kPageBytes;
  }

  // Reads run `r` into the staging buffer; the bytes it got into *got.
  Status ReadRun(const Run& r, uint64_t* got) {
    const File& f = files[r.file];
    const uint64_t offset = r.first_page * kPageBytes;
    const uint64_t want = r.count * kPageBytes;
    // A page past the end of the file is short: only the bytes before the end must come.
    const uint64_t expected = offset >= f.size ? 0 : std::min(want, f.size - offset);
    std::byte* dst = staging.bytes().data() + r.staging_page * kPageBytes;
    uint64_t done = 0;
    while (done < expected) {
      const ssize_t n = ::pread(f.fd, dst + done, static_cast<size_t>(want - done),
                                static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return IoError("%s: reading '%s' (%llu bytes at offset %llu): %s", f.path.c_str(),
                       f.tensor.c_str(), static_cast<unsigned long long>(want - done),
                       static_cast<unsigned long long>(offset + done), std::strerror(errno));
      }
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    *got = done;
    if (done < expected) {
      return DataLossError(
          "%s: short read of '%s': %llu of %llu bytes at offset %llu (was the file truncated?)",
          f.path.c_str(), f.tensor.c_str(), static_cast<unsigned long long>(done),
          static_cast<unsigned long long>(expected), static_cast<unsigned long long>(offset));
    }
    return OkStatus();
  }

  // The pages one row's values and scales touch at most (each may straddle a page boundary).
  uint64_t MaxPagesPerRow() const {
    return (value_bytes + kPageBytes - 1) / kPageBytes + 1 +
           (scale_bytes + kPageBytes - 1) / kPageBytes + 1;
  }

  // Copies the cached rows of `row_ids` out (when `fill`) and lists the others in misses and
  // miss_index. A row outside the table fails the fetch before any hit is counted.
  Status ServeCachedRows(const std::string& name, int64_t num_rows,
                         std::span<const int64_t> row_ids, bool fill, std::span<std::byte> values,
                         std::span<std::byte> scales) {
    misses.clear();
    miss_index.clear();
    uint64_t hits = 0;
    for (size_t i = 0; i < row_ids.size(); ++i) {
      const int64_t row = row_ids[i];
      DSV41_RETURN_IF_ERROR(CheckRow(name, row, num_rows));
      const auto it = capacity > 0 ? slot_of.find(row) : slot_of.end();
      if (it != slot_of.end()) {
        ++hits;
        referenced[static_cast<size_t>(it->second)] = 1;
        if (fill) {
          const std::byte* slot = Slot(it->second);
          std::memcpy(values.data() + i * value_bytes, slot, value_bytes);
          std::memcpy(scales.data() + i * scale_bytes, slot + value_bytes, scale_bytes);
        }
        continue;
      }
      misses.push_back(row);
      miss_index.push_back(i);
    }
    cache_hits.fetch_add(hits, std::memory_order_relaxed);
    return OkStatus();
  }

  // Collects the pages of misses from `begin` on, as many rows as the staging buffer holds,
  // de-duplicated, and coalesces adjacent ones into runs. Returns the end of the batch.
  size_t PlanBatch(size_t begin) {
    const uint64_t row_pages = MaxPagesPerRow();
    pages.clear();
    size_t end = begin;
    while (end < misses.size() && pages.size() + row_pages <= max_pages) {
      AddPages(0, layout.ValueOffset(misses[end]), value_bytes);
      AddPages(1, layout.ScaleOffset(misses[end]), scale_bytes);
      ++end;
    }
    std::sort(pages.begin(), pages.end());
    pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
    runs.clear();
    for (size_t i = 0; i < pages.size(); ++i) {
      const int32_t file = static_cast<int32_t>(pages[i] >> 56);
      const uint64_t page = pages[i] & ((uint64_t{1} << 56) - 1);
      if (!runs.empty()) {
        Run& last = runs.back();
        if (last.file == file && last.first_page + last.count == page &&
            last.count < kMaxRunPages) {
          ++last.count;
          continue;
        }
      }
      runs.push_back(Run{
          .file = file, .first_page = page, .count = 1, .staging_page = static_cast<uint64_t>(i)});
    }
    return end;
  }

  // Reads the planned runs into the staging buffer on the I/O threads and counts them.
  Status ReadBatch() {
    if (!direct_io) {
      // Queue every read with the kernel first (asynchronous read-ahead of exactly these pages),
      // so the reads are in flight at once even when the I/O threads are slow to be scheduled.
      for (const Run& r : runs) {
        (void)::posix_fadvise(files[r.file].fd, static_cast<off_t>(r.first_page * kPageBytes),
                              static_cast<off_t>(r.count * kPageBytes), POSIX_FADV_WILLNEED);
      }
    }
    std::fill(thread_status.begin(), thread_status.end(), OkStatus());
    std::fill(thread_bytes.begin(), thread_bytes.end(), 0);
    io_pool->ParallelFor(static_cast<int64_t>(runs.size()), 1,
                         [this](int64_t b, int64_t e, int thread_idx) {
                           const size_t t = static_cast<size_t>(thread_idx);
                           for (int64_t i = b; i < e && thread_status[t].ok(); ++i) {
                             uint64_t got = 0;
                             thread_status[t] = ReadRun(runs[static_cast<size_t>(i)], &got);
                             thread_bytes[t] += got;
                           }
                         });
    uint64_t bytes = 0;
    for (uint64_t b : thread_bytes) bytes += b;
    bytes_read.fetch_add(bytes, std::memory_order_relaxed);
    pages_read.fetch_add(pages.size(), std::memory_order_relaxed);
    for (const Status& status : thread_status) {
      if (!status.ok()) {
        read_errors.fetch_add(1, std::memory_order_relaxed);
        return status;
      }
    }
    return OkStatus();
  }

  // Copies the staged rows of misses [begin, end) out (when `fill`) and into the hot-row cache.
  void DeliverBatch(size_t begin, size_t end, bool fill, std::span<std::byte> values,
                    std::span<std::byte> scales) {
    for (size_t m = begin; m < end; ++m) {
      const int64_t row = misses[m];
      const std::byte* value = Staged(0, layout.ValueOffset(row));
      const std::byte* scale = Staged(1, layout.ScaleOffset(row));
      if (fill) {
        const size_t i = miss_index[m];
        std::memcpy(values.data() + i * value_bytes, value, value_bytes);
        std::memcpy(scales.data() + i * scale_bytes, scale, scale_bytes);
      }
      Insert(row, value, scale);
    }
    rows_read.fetch_add(end - begin, std::memory_order_relaxed);
  }
};

Result<std::unique_ptr<DiskEngramRowSource>> DiskEngramRowSource::Open(
    const Checkpoint& checkpoint, int32_t layer, const EngramStoreOptions& options,
    uint64_t cache_bytes) {
  DSV41_ASSIGN_OR_RETURN(MappedEngramRowSource checked,
                         MappedEngramRowSource::Open(checkpoint, layer));
  std::unique_ptr<DiskEngramRowSource> source(new DiskEngramRowSource());
  source->name_ = TableName(layer);
  source->num_rows_ = checked.num_rows();
  source->row_dim_ = checked.row_dim();
  source->state_ = std::make_unique<State>();
  State& s = *source->state_;
  s.layout = EngramRowLayout(source->row_dim_);
  s.value_bytes = static_cast<size_t>(s.layout.value_bytes);
  s.scale_bytes = static_cast<size_t>(s.layout.scale_bytes);
  s.row_bytes = s.value_bytes + s.scale_bytes;
  s.direct_io = options.direct_io;
  const char* suffixes[2] = {".weight", ".scale"};
  for (int32_t f = 0; f < 2; ++f) {
    State::File& file = s.files[f];
    file.tensor = source->name_ + suffixes[f];
    DSV41_ASSIGN_OR_RETURN(TensorFileRange range, checkpoint.Locate(file.tensor));
    file.path = range.path;
    file.offset = range.offset;
    const int flags = O_RDONLY | O_CLOEXEC | (options.direct_io ? O_DIRECT : 0);
    file.fd = ::open(file.path.c_str(), flags);
    if (file.fd < 0) {
      return IoError("%s: cannot open for '%s'%s: %s", file.path.c_str(), file.tensor.c_str(),
                     options.direct_io ? " with O_DIRECT" : "", std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(file.fd, &st) != 0) {
      return IoError("%s: cannot stat: %s", file.path.c_str(), std::strerror(errno));
    }
    file.size = static_cast<uint64_t>(st.st_size);
    if (file.size < range.offset + range.size) {
      return DataLossError("%s: %llu bytes, but '%s' ends at byte %llu (truncated file)",
                           file.path.c_str(), static_cast<unsigned long long>(file.size),
                           file.tensor.c_str(),
                           static_cast<unsigned long long>(range.offset + range.size));
    }
  }
  s.capacity = static_cast<int64_t>(
      std::min<uint64_t>(cache_bytes / s.row_bytes, static_cast<uint64_t>(source->num_rows_)));
  if (s.capacity > 0) {
    DSV41_ASSIGN_OR_RETURN(s.cache_memory,
                           AnonymousMemory::Allocate(static_cast<size_t>(s.capacity) * s.row_bytes,
                                                     "the hot-row cache of " + source->name_));
    s.slot_row.assign(static_cast<size_t>(s.capacity), -1);
    s.referenced.assign(static_cast<size_t>(s.capacity), 0);
    s.slot_of.reserve(static_cast<size_t>(s.capacity));
  }
  // A batch must hold at least one row's pages.
  s.max_pages = std::max<uint64_t>(static_cast<uint64_t>(std::max(options.max_pages_per_batch, 1)),
                                   s.MaxPagesPerRow());
  DSV41_ASSIGN_OR_RETURN(s.staging,
                         AnonymousMemory::Allocate(static_cast<size_t>(s.max_pages * kPageBytes),
                                                   "the read buffer of " + source->name_));
  const int threads = std::max(1, options.io_threads);
  s.io_pool = std::make_unique<ThreadPool>(threads, std::chrono::microseconds{0});
  s.thread_status.resize(static_cast<size_t>(threads));
  s.thread_bytes.resize(static_cast<size_t>(threads));
  return source;
}

DiskEngramRowSource::~DiskEngramRowSource() = default;

Status DiskEngramRowSource::Fetch(std::span<const int64_t> row_ids, std::span<std::byte> values,
                                  std::span<std::byte> scales) const {
  State& s = *state_;
  const bool fill = !values.empty();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.rows_fetched.fetch_add(row_ids.size(), std::memory_order_relaxed);
  DSV41_RETURN_IF_ERROR(s.ServeCachedRows(name_, num_rows_, row_ids, fill, values, scales));
  size_t begin = 0;
  while (begin < s.misses.size()) {
    const size_t end = s.PlanBatch(begin);
    DSV41_RETURN_IF_ERROR(s.ReadBatch());
    s.DeliverBatch(begin, end, fill, values, scales);
    begin = end;
  }
  return OkStatus();
}

Status DiskEngramRowSource::FillRows(std::span<const int64_t> row_ids, std::span<std::byte> values,
                                     std::span<std::byte> scales) const {
  CheckFillSizes(row_ids.size(), row_dim_, values, scales);
  if (row_ids.empty()) return OkStatus();
  return Fetch(row_ids, values, scales);
}

Status DiskEngramRowSource::WarmRows(std::span<const int64_t> row_ids) const {
  if (state_->capacity == 0 || row_ids.empty()) return OkStatus();
  return Fetch(row_ids, {}, {});
}

Status DiskEngramRowSource::DropCaches() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.slot_of.clear();
  std::fill(s.slot_row.begin(), s.slot_row.end(), -1);
  std::fill(s.referenced.begin(), s.referenced.end(), 0);
  s.used = 0;
  s.hand = 0;
  return OkStatus();
}

uint64_t DiskEngramRowSource::resident_bytes() const {
  return state_->cache_memory.bytes().size() + state_->staging.bytes().size();
}

int64_t DiskEngramRowSource::cache_capacity_rows() const { return state_->capacity; }

EngramStoreCounters DiskEngramRowSource::counters() const {
  const State& s = *state_;
  EngramStoreCounters c;
  c.rows_fetched = s.rows_fetched.load(std::memory_order_relaxed);
  c.cache_hits = s.cache_hits.load(std::memory_order_relaxed);
  c.rows_read = s.rows_read.load(std::memory_order_relaxed);
  c.pages_read = s.pages_read.load(std::memory_order_relaxed);
  c.bytes_read = s.bytes_read.load(std::memory_order_relaxed);
  c.read_errors = s.read_errors.load(std::memory_order_relaxed);
  return c;
}

// ---- EngramStorage ------------------------------------------------------------------------

EngramStorage::EngramStorage(EngramStoreOptions options,
                             std::vector<std::unique_ptr<EngramRowSource>> tables,
                             std::vector<std::string> paths)
    : options_(options), tables_(std::move(tables)), paths_(std::move(paths)) {}

Result<std::unique_ptr<EngramStorage>> EngramStorage::Open(const Checkpoint& checkpoint,
                                                           const LayerPlan& plan,
                                                           const EngramStoreOptions& options,
                                                           ThreadPool& pool,
                                                           const ProgressFn& progress) {
  const std::vector<int32_t> layers = EngramLayersBySlot(plan);
  std::vector<std::unique_ptr<EngramRowSource>> tables;
  std::set<std::string> paths;
  uint64_t total_rows = 0;
  uint64_t total_bytes = 0;
  for (int32_t layer : layers) {
    DSV41_ASSIGN_OR_RETURN(MappedEngramRowSource rows,
                           MappedEngramRowSource::Open(checkpoint, layer));
    total_rows += static_cast<uint64_t>(rows.num_rows());
    // The resident copy takes this rank's rows only.
    total_bytes += static_cast<uint64_t>(ShardEngramRows(rows.num_rows(), options.shard).size()) *
                   (rows.row_dim() + rows.row_dim() / 32);
    for (const char* suffix : {".weight", ".scale"}) {
      DSV41_ASSIGN_OR_RETURN(TensorFileRange range, checkpoint.Locate(TableName(layer) + suffix));
      paths.insert(range.path);
    }
  }
  uint64_t copied = 0;
  for (int32_t layer : layers) {
    const std::string name = TableName(layer);
    DSV41_ASSIGN_OR_RETURN(MappedEngramRowSource rows,
                           MappedEngramRowSource::Open(checkpoint, layer));
    DSV41_ASSIGN_OR_RETURN(TensorView values, checkpoint.Get(name + ".weight"));
    DSV41_ASSIGN_OR_RETURN(TensorView scales, checkpoint.Get(name + ".scale"));
    switch (options.tier) {
      case EngramTier::kResident: {
        const IndexRange held = ShardEngramRows(rows.num_rows(), options.shard);
        const EngramRowLayout layout(rows.row_dim());
        const std::span<const std::byte> held_values =
            values.bytes.subspan(layout.ValueOffset(held.begin),
                                 layout.ValueOffset(held.end) - layout.ValueOffset(held.begin));
        const std::span<const std::byte> held_scales =
            scales.bytes.subspan(layout.ScaleOffset(held.begin),
                                 layout.ScaleOffset(held.end) - layout.ScaleOffset(held.begin));
        DSV41_ASSIGN_OR_RETURN(AnonymousMemory value_copy,
                               AnonymousMemory::Allocate(held_values.size(), name + ".weight"));
        DSV41_ASSIGN_OR_RETURN(AnonymousMemory scale_copy,
                               AnonymousMemory::Allocate(held_scales.size(), name + ".scale"));
        DSV41_RETURN_IF_ERROR(
            CopyWithProgress(held_values, value_copy.bytes(), pool, progress, copied, total_bytes));
        DSV41_RETURN_IF_ERROR(
            CopyWithProgress(held_scales, scale_copy.bytes(), pool, progress, copied, total_bytes));
        // The mapping's pages are not needed any more.
        ReleaseMappedPages(values.bytes);
        ReleaseMappedPages(scales.bytes);
        tables.push_back(std::make_unique<ResidentEngramRowSource>(
            name, rows.num_rows(), held, rows.row_dim(), std::move(value_copy),
            std::move(scale_copy)));
        break;
      }
      case EngramTier::kMapped:
        tables.push_back(
            std::make_unique<MappedTierRowSource>(std::move(rows), values.bytes, scales.bytes));
        break;
      case EngramTier::kDisk: {
        // The cache is shared out by row count.
        const uint64_t share =
            total_rows == 0 ? 0
                            : static_cast<uint64_t>(static_cast<long double>(options.cache_bytes) *
                                                    static_cast<long double>(rows.num_rows()) /
                                                    static_cast<long double>(total_rows));
        DSV41_ASSIGN_OR_RETURN(std::unique_ptr<DiskEngramRowSource> disk,
                               DiskEngramRowSource::Open(checkpoint, layer, options, share));
        tables.push_back(std::move(disk));
        break;
      }
    }
  }
  return std::make_unique<EngramStorage>(options, std::move(tables),
                                         std::vector<std::string>(paths.begin(), paths.end()));
}

uint64_t EngramStorage::table_bytes() const {
  uint64_t bytes = 0;
  for (const auto& t : tables_) {
    bytes += static_cast<uint64_t>(t->num_rows()) * (t->row_dim() + t->row_dim() / 32);
  }
  return bytes;
}

uint64_t EngramStorage::resident_bytes() const {
  uint64_t bytes = 0;
  for (const auto& t : tables_) bytes += t->resident_bytes();
  return bytes;
}

EngramStoreCounters EngramStorage::counters() const {
  EngramStoreCounters sum;
  for (const auto& t : tables_) {
    const EngramStoreCounters c = t->counters();
    sum.rows_fetched += c.rows_fetched;
    sum.cache_hits += c.cache_hits;
    sum.rows_read += c.rows_read;
    sum.pages_read += c.pages_read;
    sum.bytes_read += c.bytes_read;
    sum.read_errors += c.read_errors;
  }
  return sum;
}

Status EngramStorage::DropCaches() {
  for (auto& t : tables_) DSV41_RETURN_IF_ERROR(t->DropCaches());
  if (options_.tier == EngramTier::kResident) return OkStatus();
  for (const std::string& path : paths_) DSV41_RETURN_IF_ERROR(DropFileFromPageCache(path));
  return OkStatus();
}

}  // namespace dsv41

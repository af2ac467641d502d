#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv41 {

// A read-only memory mapping of a whole file. Move-only; unmaps on destruction. Thread-safe to
// read.
class MappedFile {
 public:
  // Maps `path` read-only. An empty file gives an empty span. Errors name the path.
  static Result<MappedFile> Open(const std::string& path);

  MappedFile(MappedFile&&) noexcept;
  MappedFile& operator=(MappedFile&&) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const;
  size_t size() const { return bytes().size(); }
  const std::string& path() const;

 private:
  struct Impl;  // hides <sys/mman.h>
  explicit MappedFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Bytes of memory the kernel reports as available for new data (MemAvailable in /proc/meminfo);
// 0 when unknown.
uint64_t AvailableMemoryBytes();

// Makes every page of `bytes` (inside a mapping) resident: asks the kernel to read them ahead
// (MADV_WILLNEED), then touches one byte per page. Thread-safe; returns the sum of the bytes
// touched (so the reads cannot be elided).
uint64_t PrefaultPages(std::span<const std::byte> bytes);

// Tells the kernel that `bytes` (inside a mapping) are read at random (MADV_RANDOM): no
// read-ahead around a faulting page. Best effort.
void AdviseRandomAccess(std::span<const std::byte> bytes);

// Replaces the whole pages inside `bytes` (part of a read-only mapping) with private anonymous
// memory holding the same bytes, in transparent huge pages where the kernel takes them
// (MADV_HUGEPAGE), read-only. Pointers into the range stay valid and read what they read before;
// the pages at its edges that it shares with bytes outside it stay as they were. A decode step
// streams GBs of weights: in 4 KiB file pages each of them costs a TLB walk (in a VM a
// two-level one); in 2 MiB pages one per 512. The copy is made beside the range and moved over
// it at once (mremap), so on an error nothing has changed. Returns the bytes replaced (whole
// pages; 0 for a range within one or two pages). No other thread may map or unmap inside the
// range meanwhile; readers may read it.
Result<size_t> CopyToAnonymousPages(std::span<const std::byte> bytes);

// Releases this process's page-table references to `bytes` (inside a read-only file mapping;
// MADV_DONTNEED): later reads fault the pages in again, from the page cache or the file.
void ReleaseMappedPages(std::span<const std::byte> bytes);

// Drops the clean pages of `path` from the page cache (posix_fadvise POSIX_FADV_DONTNEED), for
// cold-start measurements. Errors name the path.
Status DropFileFromPageCache(const std::string& path);

// Anonymous, page-aligned, read-write memory (mmap), with transparent huge pages asked for
// (MADV_HUGEPAGE; best effort) and an inaccessible page after its last page, so a run past the
// end faults. A mapping of 2 MiB or more starts on a 2 MiB boundary, so every whole 2 MiB of it can
// be one huge page. Reserve takes address space only; Grow makes more of it usable in place, so
// what was handed out never moves. Move-only; unmaps on destruction.
class AnonymousMemory {
 public:
  // `size` usable bytes. IoError naming `what` and the size when the mapping fails.
  static Result<AnonymousMemory> Allocate(size_t size, const std::string& what);
  // Room for up to `capacity` bytes, none usable yet (PROT_NONE: the overcommit accounting
  // counts what Grow makes usable, and only touched pages take memory).
  static Result<AnonymousMemory> Reserve(size_t capacity, const std::string& what);
  AnonymousMemory() = default;
  AnonymousMemory(AnonymousMemory&& other) noexcept;
  AnonymousMemory& operator=(AnonymousMemory&& other) noexcept;
  AnonymousMemory(const AnonymousMemory&) = delete;
  AnonymousMemory& operator=(const AnonymousMemory&) = delete;
  ~AnonymousMemory();

  // Makes the first `size` bytes usable (whole pages; never shrinks). IoError naming the mapping
  // when `size` exceeds capacity() or the kernel refuses.
  Status Grow(size_t size);

  std::span<std::byte> bytes() const { return {data_, size_}; }
  size_t capacity() const { return capacity_; }
  bool huge_pages_advised() const { return huge_pages_advised_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;      // usable bytes
  size_t capacity_ = 0;  // reserved bytes (the guard page not counted)
  size_t mapped_ = 0;    // the mapping's length, from data_
  bool huge_pages_advised_ = false;
  std::string what_;
};

// The kernel's flags of this process's mapping that holds `address` (its "VmFlags" line in
// /proc/self/smaps, e.g. "rd wr mr mw me ac hg"; "hg": huge pages asked for). NotFoundError when no
// mapping holds it or the kernel shows no flags.
Result<std::string> MappingVmFlags(const void* address);

// Whether this kernel takes MADV_HUGEPAGE (transparent huge pages built in), by a probe mapping.
bool KernelTakesHugePageAdvice();

// Whether memory advised MADV_HUGEPAGE gets huge pages: the kernel takes the advice and its
// transparent huge page mode (/sys/kernel/mm/transparent_hugepage/enabled) is not "never".
bool AdvisedMemoryGetsHugePages();
// The mode line's answer: false when "[never]" is the one selected, true otherwise (also for an
// empty or unknown line: the advice is then all there is to go by).
bool HugePageModeServesAdvice(std::string_view enabled_line);

// Reads a whole file into a string. Errors name the path.
Result<std::string> ReadFileToString(const std::string& path);

// Writes `data` to `path` through a temporary file and a rename, so readers never see half a file.
Status WriteStringToFile(const std::string& path, std::string_view data);

}  // namespace dsv41

#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

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

// Reads a whole file into a string. Errors name the path.
Result<std::string> ReadFileToString(const std::string& path);

// Writes `data` to `path` through a temporary file and a rename, so readers never see half a file.
Status WriteStringToFile(const std::string& path, std::string_view data);

}  // namespace dsv41

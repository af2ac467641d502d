#pragma once

// Test support (not linked into the engine): safetensors files of real-checkpoint size written as
// sparse files. Only the header and the bytes a test writes occupy disk; the rest of the data
// section is a hole that reads as zeros. For the 64-bit offset tests (real-weight-traps.md L6).

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "checkpoint/dtype.h"
#include "checkpoint/safetensors.h"

namespace dsv41 {

struct SparseTensorSpec {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
};

// Where CreateSparseSafetensors put things: file offsets, independent of the reader under test.
struct SparseSafetensorsLayout {
  uint64_t data_start = 0;           // 8 + header length
  std::vector<uint64_t> begin;       // per tensor, relative to data_start (the header's value)
  std::vector<uint64_t> file_begin;  // per tensor: data_start + begin
  uint64_t file_bytes = 0;
};

// Writes `path`: the 8-byte length and a JSON header listing `tensors` packed back to back in the
// given order (header padded with spaces to a multiple of 8, as SafetensorsWriter does), then
// extends the file to its full length with ftruncate, writing no data bytes.
inline Result<SparseSafetensorsLayout> CreateSparseSafetensors(
    const std::string& path, const std::vector<SparseTensorSpec>& tensors) {
  SparseSafetensorsLayout layout;
  OrderedJson header = OrderedJson::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const SparseTensorSpec& t : tensors) {
    const std::optional<uint64_t> bytes = TensorBytes(t.dtype, t.shape);
    if (!bytes) return InvalidArgumentError("%s: bad shape", t.name.c_str());
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = std::string(DTypeName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + *bytes};
    header[t.name] = std::move(entry);
    layout.begin.push_back(offset);
    offset += *bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i)
    prefix[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xFF);
  prefix += text;
  layout.data_start = prefix.size();
  for (uint64_t b : layout.begin) layout.file_begin.push_back(layout.data_start + b);
  layout.file_bytes = layout.data_start + offset;

  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("%s: cannot create: %s", path.c_str(), std::strerror(errno));
  const bool wrote =
      ::pwrite(fd, prefix.data(), prefix.size(), 0) == static_cast<ssize_t>(prefix.size());
  const bool sized = wrote && ::ftruncate(fd, static_cast<off_t>(layout.file_bytes)) == 0;
  const int err = errno;
  ::close(fd);
  if (!sized) {
    return IoError("%s: cannot write a %llu-byte sparse file: %s", path.c_str(),
                   static_cast<unsigned long long>(layout.file_bytes), std::strerror(err));
  }
  return layout;
}

// Writes `bytes` at file offset `offset` of `path` (an existing file; its size does not change
// when the bytes fall inside it).
inline Status WriteBytesAt(const std::string& path, uint64_t offset,
                           std::span<const std::byte> bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return IoError("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  const bool ok = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)) ==
                  static_cast<ssize_t>(bytes.size());
  const int err = errno;
  ::close(fd);
  if (!ok)
    return IoError("%s: pwrite at %llu: %s", path.c_str(), static_cast<unsigned long long>(offset),
                   std::strerror(err));
  return OkStatus();
}

// Reads `n` bytes at file offset `offset` of `path` with pread (a path that bypasses any mapping).
inline Result<std::vector<std::byte>> PreadBytes(const std::string& path, uint64_t offset,
                                                 size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  std::vector<std::byte> out(n);
  const ssize_t got = ::pread(fd, out.data(), n, static_cast<off_t>(offset));
  const int err = errno;
  ::close(fd);
  if (got != static_cast<ssize_t>(n)) {
    return IoError("%s: pread of %zu at %llu got %zd: %s", path.c_str(), n,
                   static_cast<unsigned long long>(offset), got, std::strerror(err));
  }
  return out;
}

}  // namespace dsv41

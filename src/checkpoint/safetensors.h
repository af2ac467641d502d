#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "checkpoint/dtype.h"

namespace dsv41 {

// One tensor entry of a safetensors header (checkpoint.md §3).
struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section; end - begin is
  uint64_t end = 0;    // exactly NumElements(shape) * DTypeSize(dtype)
};

// A header larger than this is rejected as corrupt (the real shards' headers are < 1 MiB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;

// A parsed header: what ParseSafetensorsHeader returns on success.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // in data order (ascending begin, then end)
  uint64_t data_start = 0;          // 8 + N, the file offset of the data section
  std::vector<std::pair<std::string, std::string>> metadata;  // `__metadata__`, in key order
};

// Parses and validates the header of a safetensors file held in `file_bytes` (the whole file, or
// at least the 8-byte length, the header and the data section it describes). Pure: reads only
// `file_bytes`. `file_name` only names the file in errors.
//
// Checks: 8-byte little-endian header length N with N <= min(file size - 8, 100 MiB); the header
// is a UTF-8 JSON object without repeated keys; every entry other than `__metadata__` has a known
// `dtype`, a `shape` of non-negative integers and `data_offsets` [begin, end] with begin <= end,
// end - begin == elements x element size (overflow-safe), end <= data section size; no two tensors
// overlap; `__metadata__`, when present, is an object of strings. Errors are DataLoss with a
// message naming the file and, where one is at fault, the tensor.
//
// On success returns the tensors, the data section's offset and the metadata (SafetensorsHeader).
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const std::byte> file_bytes,
                                                 std::string_view file_name);

// A zero-copy view of one tensor inside a mapping; valid while the owning SafetensorsFile (or
// Checkpoint) lives. The bytes are C-contiguous little-endian elements with NO alignment
// guarantee beyond 1 byte (checkpoint.md §3): read elements with unaligned-safe loads (memcpy into
// a local, or Highway's LoadU), never by casting `bytes.data()` to `const float*`.
struct TensorView {
  std::string_view name;
  DType dtype = DType::kU8;
  Shape shape;
  std::span<const std::byte> bytes;
};

// A memory-mapped, validated safetensors file. Move-only. Thread-safe to read.
class SafetensorsFile {
 public:
  // Maps `path` read-only and validates its header (ParseSafetensorsHeader). Errors name the path.
  static Result<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Tensors in data order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // `__metadata__` pairs in key order (empty if the header has none).
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  // File offset of the data section (8 + header length).
  uint64_t data_start() const { return data_start_; }
  // Size of the whole file in bytes.
  size_t file_bytes() const { return file_.size(); }

  // The tensor called `name`, or nullopt.
  std::optional<TensorView> Find(std::string_view name) const;
  // The view of tensors()[tensor_idx]. Precondition: tensor_idx < tensors().size().
  TensorView View(size_t tensor_idx) const;

 private:
  SafetensorsFile(MappedFile file, std::vector<TensorInfo> tensors,
                  std::vector<std::pair<std::string, std::string>> metadata, uint64_t data_start);

  MappedFile file_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  uint64_t data_start_ = 0;
  std::unordered_map<std::string, size_t> index_by_name_;
};

// Receives the next chunk of a tensor's bytes while a file is written.
using ByteSink = std::function<Status(std::span<const std::byte>)>;
// Streams one tensor's bytes into `sink`, in order, in chunks of any size; must deliver exactly
// the tensor's byte size. Lets a large tensor be generated while writing instead of held twice.
using TensorBytesFn = std::function<Status(const ByteSink& sink)>;

// Writes one safetensors file: tensors in insertion order, packed back to back, header padded with
// spaces so the data section starts at a multiple of 8. Not thread-safe.
class SafetensorsWriter {
 public:
  // Adds a tensor whose bytes are copied now. Errors (InvalidArgument) name the tensor: empty or
  // repeated name, `__metadata__`, negative/overflowing shape, bytes.size() != shape x dtype size.
  Status Add(std::string name, DType dtype, Shape shape, std::span<const std::byte> bytes);
  // Adds a tensor whose bytes `write` streams when Write() runs (called exactly once).
  Status Add(std::string name, DType dtype, Shape shape, TensorBytesFn write);
  // Sets a `__metadata__` string (e.g. "format" -> "pt"); a later value replaces an earlier one.
  void SetMetadata(std::string key, std::string value);

  size_t num_tensors() const { return tensors_.size(); }
  // Sum of the tensors' byte sizes added so far.
  uint64_t data_bytes() const { return data_bytes_; }

  // Writes the file to `path` through `path.tmp` and a rename, so readers never see half a file;
  // the temporary is removed on failure. Consumes the streamed tensors: call once. Errors name the
  // path and, for a streaming fault, the tensor.
  Status Write(const std::string& path);

 private:
  struct Pending {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t num_bytes;
    TensorBytesFn write;
  };
  std::vector<Pending> tensors_;
  std::unordered_map<std::string, size_t> index_by_name_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  uint64_t data_bytes_ = 0;
};

// Ok when `name` can name a tensor in a safetensors header: non-empty UTF-8, not `__metadata__`;
// else InvalidArgument naming it.
Status CheckTensorName(std::string_view name);

// Byte size of a tensor of `shape` and `dtype`; nullopt when a dimension is negative or the size
// overflows uint64_t.
std::optional<uint64_t> TensorBytes(DType dtype, const Shape& shape);

}  // namespace dsv41

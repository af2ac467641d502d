#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/progress.h"
#include "base/status.h"
#include "checkpoint/dtype.h"
#include "checkpoint/safetensors.h"

namespace dsv41 {

inline constexpr std::string_view kCheckpointIndexFile = "model.safetensors.index.json";
inline constexpr std::string_view kSingleFileCheckpoint = "model.safetensors";

// Where a tensor's bytes sit on disk: for readers that bypass the mapping (pread, O_DIRECT).
struct TensorFileRange {
  std::string path;     // the shard file
  uint64_t offset = 0;  // file offset of the tensor's first byte
  uint64_t size = 0;    // the tensor's byte size
};

// All tensors of a checkpoint directory (checkpoint.md §1–§2), memory-mapped. Move-only; every
// TensorView it returns stays valid while it lives. Thread-safe to read.
class Checkpoint {
 public:
  // Opens `dir`: with `model.safetensors.index.json`, every shard its weight_map names (each mapped
  // once); without it, `model.safetensors`. Checks that every index entry exists in the shard the
  // index names, that no tensor name appears in two shards and that shard names are plain file
  // names. Tensors a shard holds but the index omits are kept (with a warning). `progress` (stage
  // "mapping shards", unit "shards") may cancel. Errors name the file and, where relevant, the
  // tensor.
  static Result<Checkpoint> Open(const std::string& dir, const ProgressFn& progress = {});

  const std::string& dir() const { return dir_; }
  // The shard files in index order (sorted names), or the single file.
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  // Tensor names in shard order, then data order within a shard.
  const std::vector<std::string>& tensor_names() const { return tensor_names_; }
  size_t num_tensors() const { return tensor_names_.size(); }
  // Sum of the tensors' byte sizes (headers excluded), as the index's metadata.total_size counts.
  uint64_t total_bytes() const { return total_bytes_; }
  // The index's metadata.total_size, if the directory has an index that states one.
  std::optional<uint64_t> index_total_size() const { return index_total_size_; }

  // The tensor called `name`, or nullopt.
  std::optional<TensorView> Find(std::string_view name) const;
  // The tensor called `name`, or NotFound naming the directory and the tensor.
  Result<TensorView> Get(std::string_view name) const;
  // Get, and InvalidArgument naming the tensor unless it is `dtype` of `shape`.
  Result<TensorView> GetChecked(std::string_view name, DType dtype, const Shape& shape) const;
  // The shard file and byte range of the tensor called `name`, or NotFound as Get.
  Result<TensorFileRange> Locate(std::string_view name) const;

 private:
  struct Location {
    size_t shard_idx;
    size_t tensor_idx;
  };
  Checkpoint() = default;

  std::string dir_;
  std::vector<SafetensorsFile> shards_;
  std::vector<std::string> tensor_names_;
  std::unordered_map<std::string, Location> locations_;
  uint64_t total_bytes_ = 0;
  std::optional<uint64_t> index_total_size_;
};

// How ShardedCheckpointWriter splits tensors into shards. With neither limit set, one shard.
struct ShardingOptions {
  // Start a new shard before a tensor that would take the current one past this many tensor bytes
  // (0 = no budget). A tensor larger than the budget gets a shard of its own.
  uint64_t max_shard_bytes = 0;
  // Split into this many shards of about equal tensor bytes (0 = not set). Fewer shards result
  // when there are fewer tensors. Takes precedence over max_shard_bytes.
  size_t num_shards = 0;
};

// Writes a sharded checkpoint: tensors in the order added, shards
// `model-00001-of-0000N.safetensors` (5-digit numbers) and `model.safetensors.index.json` with
// metadata.total_size (tensor bytes only) and the weight_map. Used by the tiny-checkpoint
// generator. Not thread-safe.
class ShardedCheckpointWriter {
 public:
  // `dir` is created if missing when Finish() runs.
  ShardedCheckpointWriter(std::string dir, ShardingOptions options);

  // As SafetensorsWriter::Add: the span's bytes are copied now, the function streams them later.
  Status Add(std::string name, DType dtype, Shape shape, std::span<const std::byte> bytes);
  Status Add(std::string name, DType dtype, Shape shape, TensorBytesFn write);
  // A `__metadata__` string written into every shard (e.g. "format" -> "pt").
  void SetShardMetadata(std::string key, std::string value);

  // Writes the shards then the index (each atomically). `progress` (stage "writing shards", unit
  // "bytes") may cancel. Call once. Errors name the file and tensor.
  Status Finish(const ProgressFn& progress = {});

  // Shard file name for 0-based `shard_idx` of `num_shards`: "model-00001-of-00003.safetensors".
  static std::string ShardFileName(size_t shard_idx, size_t num_shards);

 private:
  struct Pending {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t num_bytes;
    TensorBytesFn write;
  };
  std::string dir_;
  ShardingOptions options_;
  std::vector<Pending> tensors_;
  std::unordered_map<std::string, size_t> index_by_name_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  uint64_t total_bytes_ = 0;
};

}  // namespace dsv41

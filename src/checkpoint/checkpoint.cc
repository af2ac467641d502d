#include "checkpoint/checkpoint.h"

#include <cinttypes>
#include <filesystem>
#include <map>
#include <system_error>

#include "base/json.h"
#include "base/log.h"
#include "base/mapped_file.h"

namespace dsv41 {
namespace {

std::string JoinPath(const std::string& dir, std::string_view file) {
  if (dir.empty()) return std::string(file);
  if (dir.back() == '/') return dir + std::string(file);
  return dir + "/" + std::string(file);
}

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// The parsed `model.safetensors.index.json`.
struct CheckpointIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::optional<uint64_t> total_size;
};

Result<CheckpointIndex> ReadIndex(const std::string& path) {
  DSV41_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  Result<Json> parsed = ParseJsonRejectingDuplicateKeys(text, path);
  if (!parsed.ok()) return Status(StatusCode::kDataLoss, parsed.status().message());
  const Json& json = *parsed;
  const char* p = path.c_str();
  if (!json.is_object()) return DataLossError("%s: not a JSON object", p);
  const auto map_it = json.find("weight_map");
  if (map_it == json.end() || !map_it->is_object()) {
    return DataLossError("%s: missing object 'weight_map'", p);
  }
  CheckpointIndex index;
  for (const auto& [name, shard] : map_it->items()) {
    if (!shard.is_string() || !IsPlainFileName(shard.get<std::string>())) {
      return DataLossError("%s: weight_map['%s'] is not a shard file name in the directory", p,
                           name.c_str());
    }
    index.weight_map.emplace(name, shard.get<std::string>());
  }
  const auto meta_it = json.find("metadata");
  if (meta_it != json.end() && meta_it->is_object()) {
    const auto size_it = meta_it->find("total_size");
    if (size_it != meta_it->end()) {
      if (!size_it->is_number_unsigned()) {
        return DataLossError("%s: metadata.total_size is not a non-negative integer", p);
      }
      index.total_size = size_it->get<uint64_t>();
    }
  }
  return index;
}

Status Cancelled(const std::string& what) {
  return Status(StatusCode::kInternal, what + ": cancelled");
}

}  // namespace

Result<Checkpoint> Checkpoint::Open(const std::string& dir, const ProgressFn& progress) {
  Checkpoint checkpoint;
  checkpoint.dir_ = dir;
  const std::string index_path = JoinPath(dir, kCheckpointIndexFile);
  std::error_code ec;
  const bool has_index = std::filesystem::exists(index_path, ec);

  std::optional<CheckpointIndex> index;
  std::vector<std::string> shard_names;
  if (has_index) {
    DSV41_ASSIGN_OR_RETURN(CheckpointIndex read, ReadIndex(index_path));
    std::map<std::string, std::string> first_tensor_of_shard;
    for (const auto& [name, shard] : read.weight_map) first_tensor_of_shard.emplace(shard, name);
    for (const auto& [shard, name] : first_tensor_of_shard) shard_names.push_back(shard);
    checkpoint.index_total_size_ = read.total_size;
    index = std::move(read);
  } else {
    const std::string single = JoinPath(dir, kSingleFileCheckpoint);
    if (!std::filesystem::exists(single, ec)) {
      return NotFoundError("%s: neither %s nor %s exists", dir.c_str(),
                           std::string(kCheckpointIndexFile).c_str(),
                           std::string(kSingleFileCheckpoint).c_str());
    }
    shard_names.emplace_back(kSingleFileCheckpoint);
  }

  const std::string mapping_stage = "mapping shards";
  for (size_t shard_idx = 0; shard_idx < shard_names.size(); ++shard_idx) {
    if (progress && !progress(Progress{mapping_stage, shard_idx, shard_names.size(), "shards"})) {
      return Cancelled(dir + ": opening checkpoint");
    }
    const std::string shard_path = JoinPath(dir, shard_names[shard_idx]);
    Result<SafetensorsFile> shard = SafetensorsFile::Open(shard_path);
    if (!shard.ok()) {
      if (!index) return shard.status();
      std::string named_by;
      for (const auto& [name, file] : index->weight_map) {
        if (file == shard_names[shard_idx]) {
          named_by = name;
          break;
        }
      }
      return shard.status().WithPrefix(index_path + ": shard '" + shard_names[shard_idx] +
                                       "' (of tensor '" + named_by + "')");
    }
    const std::vector<TensorInfo>& tensors = shard->tensors();
    for (size_t tensor_idx = 0; tensor_idx < tensors.size(); ++tensor_idx) {
      const std::string& name = tensors[tensor_idx].name;
      const auto [it, inserted] =
          checkpoint.locations_.emplace(name, Location{shard_idx, tensor_idx});
      if (!inserted) {
        return DataLossError("%s: tensor '%s' appears in both %s and %s", dir.c_str(), name.c_str(),
                             shard_names[it->second.shard_idx].c_str(),
                             shard_names[shard_idx].c_str());
      }
      checkpoint.tensor_names_.push_back(name);
      checkpoint.total_bytes_ += tensors[tensor_idx].end - tensors[tensor_idx].begin;
    }
    checkpoint.shards_.push_back(std::move(shard).value());
  }
  if (progress &&
      !progress(Progress{mapping_stage, shard_names.size(), shard_names.size(), "shards"})) {
    return Cancelled(dir + ": opening checkpoint");
  }

  if (index) {
    for (const auto& [name, shard] : index->weight_map) {
      const auto it = checkpoint.locations_.find(name);
      if (it == checkpoint.locations_.end()) {
        return NotFoundError("%s: tensor '%s' is missing from its shard %s", index_path.c_str(),
                             name.c_str(), shard.c_str());
      }
      const std::string& actual = shard_names[it->second.shard_idx];
      if (actual != shard) {
        return DataLossError("%s: tensor '%s' is listed in %s but stored in %s", index_path.c_str(),
                             name.c_str(), shard.c_str(), actual.c_str());
      }
    }
    if (index->weight_map.size() != checkpoint.locations_.size()) {
      DSV41_LOG_WARN("%s: %zu tensors in the shards are not listed in the index (kept)",
                     index_path.c_str(), checkpoint.locations_.size() - index->weight_map.size());
    }
    if (index->total_size && *index->total_size != checkpoint.total_bytes_) {
      DSV41_LOG_WARN("%s: metadata.total_size %" PRIu64 " B, tensors hold %" PRIu64 " B",
                     index_path.c_str(), *index->total_size, checkpoint.total_bytes_);
    }
  }
  return checkpoint;
}

std::optional<TensorView> Checkpoint::Find(std::string_view name) const {
  const auto it = locations_.find(std::string(name));
  if (it == locations_.end()) return std::nullopt;
  return shards_[it->second.shard_idx].View(it->second.tensor_idx);
}

Result<TensorView> Checkpoint::Get(std::string_view name) const {
  std::optional<TensorView> view = Find(name);
  if (!view) {
    return NotFoundError("%s: no tensor '%.*s'", dir_.c_str(), static_cast<int>(name.size()),
                         name.data());
  }
  return *std::move(view);
}

Result<TensorView> Checkpoint::GetChecked(std::string_view name, DType dtype,
                                          const Shape& shape) const {
  DSV41_ASSIGN_OR_RETURN(TensorView view, Get(name));
  if (view.dtype != dtype || view.shape != shape) {
    const std::string_view got = DTypeName(view.dtype);
    const std::string_view want = DTypeName(dtype);
    return InvalidArgumentError("'%.*s': want %.*s %s, got %.*s %s", static_cast<int>(name.size()),
                                name.data(), static_cast<int>(want.size()), want.data(),
                                ShapeString(shape).c_str(), static_cast<int>(got.size()),
                                got.data(), ShapeString(view.shape).c_str());
  }
  return view;
}

Result<TensorFileRange> Checkpoint::Locate(std::string_view name) const {
  const auto it = locations_.find(std::string(name));
  if (it == locations_.end()) {
    return NotFoundError("%s: no tensor '%.*s'", dir_.c_str(), static_cast<int>(name.size()),
                         name.data());
  }
  const SafetensorsFile& shard = shards_[it->second.shard_idx];
  const TensorInfo& info = shard.tensors()[it->second.tensor_idx];
  return TensorFileRange{.path = shard.path(),
                         .offset = shard.data_start() + info.begin,
                         .size = info.end - info.begin};
}

ShardedCheckpointWriter::ShardedCheckpointWriter(std::string dir, ShardingOptions options)
    : dir_(std::move(dir)), options_(options) {}

Status ShardedCheckpointWriter::Add(std::string name, DType dtype, Shape shape,
                                    std::span<const std::byte> bytes) {
  const std::optional<uint64_t> num_bytes = TensorBytes(dtype, shape);
  if (num_bytes && *num_bytes != bytes.size()) {
    return InvalidArgumentError("tensor '%s': shape × %zu B = %" PRIu64 " B, got %zu B",
                                name.c_str(), DTypeSize(dtype), *num_bytes, bytes.size());
  }
  std::vector<std::byte> copy(bytes.begin(), bytes.end());
  return Add(std::move(name), dtype, std::move(shape),
             [data = std::move(copy)](const ByteSink& sink) { return sink(data); });
}

Status ShardedCheckpointWriter::Add(std::string name, DType dtype, Shape shape,
                                    TensorBytesFn write) {
  DSV41_RETURN_IF_ERROR(CheckTensorName(name));
  if (index_by_name_.count(name) != 0) {
    return InvalidArgumentError("tensor '%s' added twice", name.c_str());
  }
  if (!write) return InvalidArgumentError("tensor '%s': no byte source", name.c_str());
  const std::optional<uint64_t> num_bytes = TensorBytes(dtype, shape);
  if (!num_bytes || *num_bytes > UINT64_MAX - total_bytes_) {
    return InvalidArgumentError("tensor '%s': shape has a negative dimension or is too large",
                                name.c_str());
  }
  index_by_name_.emplace(name, tensors_.size());
  total_bytes_ += *num_bytes;
  tensors_.push_back(
      Pending{std::move(name), dtype, std::move(shape), *num_bytes, std::move(write)});
  return OkStatus();
}

void ShardedCheckpointWriter::SetShardMetadata(std::string key, std::string value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

std::string ShardedCheckpointWriter::ShardFileName(size_t shard_idx, size_t num_shards) {
  return StrFormat("model-%05zu-of-%05zu.safetensors", shard_idx + 1, num_shards);
}

Status ShardedCheckpointWriter::Finish(const ProgressFn& progress) {
  // shard_of[i] = shard of tensor i.
  std::vector<size_t> shard_of(tensors_.size(), 0);
  size_t shard_idx = 0;
  uint64_t shard_bytes = 0;
  uint64_t done_bytes = 0;
  const size_t want_shards = options_.num_shards;
  const uint64_t target =
      want_shards > 0 ? (total_bytes_ + want_shards - 1) / want_shards : 0;  // ceil
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const uint64_t bytes = tensors_[i].num_bytes;
    bool new_shard = false;
    if (i > 0) {
      if (want_shards > 0) {
        const size_t shards_after = want_shards - 1 - shard_idx;
        const size_t tensors_left = tensors_.size() - i;
        new_shard = shards_after > 0 &&
                    (done_bytes >= target * (shard_idx + 1) || tensors_left <= shards_after);
      } else if (options_.max_shard_bytes > 0) {
        new_shard = shard_bytes + bytes > options_.max_shard_bytes;
      }
    }
    if (new_shard) {
      ++shard_idx;
      shard_bytes = 0;
    }
    shard_of[i] = shard_idx;
    shard_bytes += bytes;
    done_bytes += bytes;
  }
  const size_t num_shards = shard_idx + 1;

  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return IoError("%s: cannot create directory: %s", dir_.c_str(), ec.message().c_str());

  const std::string writing_stage = "writing shards";
  uint64_t written_bytes = 0;
  bool cancelled = false;
  std::map<std::string, std::string> weight_map;  // sorted by name, as HF writes it
  size_t next = 0;
  for (size_t s = 0; s < num_shards; ++s) {
    const std::string shard_name = ShardFileName(s, num_shards);
    SafetensorsWriter writer;
    for (const auto& [key, value] : metadata_) writer.SetMetadata(key, value);
    for (; next < tensors_.size() && shard_of[next] == s; ++next) {
      Pending& t = tensors_[next];
      weight_map[t.name] = shard_name;
      const uint64_t num_bytes = t.num_bytes;
      TensorBytesFn counted = [&, inner = std::move(t.write), num_bytes](const ByteSink& sink) {
        DSV41_RETURN_IF_ERROR(inner(sink));
        written_bytes += num_bytes;
        if (progress && !progress(Progress{writing_stage, written_bytes, total_bytes_, "bytes"})) {
          cancelled = true;
          return Cancelled(dir_ + ": writing checkpoint");
        }
        return OkStatus();
      };
      DSV41_RETURN_IF_ERROR(writer.Add(t.name, t.dtype, t.shape, std::move(counted)));
    }
    const std::string shard_path = JoinPath(dir_, shard_name);
    Status status = writer.Write(shard_path);
    if (!status.ok()) return cancelled ? Cancelled(dir_ + ": writing checkpoint") : status;
  }
  tensors_.clear();

  // Json's keys are sorted ("metadata" before "weight_map", tensors by name, as HF writes them)
  // and inserted in O(log n); ordered_json would search linearly per tensor.
  Json index = Json::object();
  index["metadata"] = {{"total_size", total_bytes_}};
  index["weight_map"] = weight_map;
  return WriteStringToFile(JoinPath(dir_, kCheckpointIndexFile), index.dump(2) + "\n");
}

}  // namespace dsv41

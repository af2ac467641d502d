#include "checkpoint/checkpoint_rewrite.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace dsv41 {
namespace {

bool IsSafetensorsFile(const std::filesystem::path& path) {
  return path.extension() == ".safetensors" || path.filename() == kCheckpointIndexFile;
}

// Copies every file of `src` but the checkpoint's own into `dst`, subdirectories included.
Status CopyOtherFiles(const std::filesystem::path& src, const std::filesystem::path& dst) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(src, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::filesystem::path rel = std::filesystem::relative(it->path(), src, ec);
    if (ec) break;
    if (it->is_directory()) {
      std::filesystem::create_directories(dst / rel, ec);
    } else if (!IsSafetensorsFile(it->path())) {
      std::filesystem::copy_file(it->path(), dst / rel,
                                 std::filesystem::copy_options::overwrite_existing, ec);
    }
    if (ec) {
      return IoError("%s: cannot copy to %s: %s", it->path().c_str(), (dst / rel).c_str(),
                     ec.message().c_str());
    }
  }
  if (ec) return IoError("%s: cannot list: %s", src.c_str(), ec.message().c_str());
  return OkStatus();
}

template <typename Writer>
Status AddAll(const Checkpoint& checkpoint, const std::vector<std::string>& names,
              const RewriteOptions& options, Writer& writer) {
  for (const std::string& name : names) {
    DSV41_ASSIGN_OR_RETURN(TensorView view, checkpoint.Get(name));
    DType dtype = view.dtype;
    const bool is_scale = name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0;
    if (options.scale_dtype && is_scale && IsE8m0ScaleDType(dtype)) dtype = *options.scale_dtype;
    const std::span<const std::byte> bytes = view.bytes;
    DSV41_RETURN_IF_ERROR(
        writer.Add(name, dtype, view.shape, [bytes](const ByteSink& sink) { return sink(bytes); }));
  }
  return OkStatus();
}

}  // namespace

Status RewriteCheckpoint(const std::string& src_dir, const std::string& dst_dir,
                         const RewriteOptions& options) {
  if (options.scale_dtype && !IsE8m0ScaleDType(*options.scale_dtype)) {
    return InvalidArgumentError("rewrite %s: scale dtype %s, want F8_E8M0 or U8", src_dir.c_str(),
                                std::string(DTypeName(*options.scale_dtype)).c_str());
  }
  DSV41_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(src_dir));
  std::vector<std::string> names = checkpoint.tensor_names();
  if (options.place_last) {
    std::stable_partition(names.begin(), names.end(),
                          [&](const std::string& n) { return !options.place_last(n); });
  }
  std::error_code ec;
  std::filesystem::create_directories(dst_dir, ec);
  if (ec) return IoError("%s: cannot create directory: %s", dst_dir.c_str(), ec.message().c_str());
  DSV41_RETURN_IF_ERROR(CopyOtherFiles(src_dir, dst_dir));
  if (options.num_shards <= 1) {
    SafetensorsWriter writer;
    writer.SetMetadata("format", "pt");
    DSV41_RETURN_IF_ERROR(AddAll(checkpoint, names, options, writer));
    return writer.Write((std::filesystem::path(dst_dir) / kSingleFileCheckpoint).string());
  }
  ShardedCheckpointWriter writer(dst_dir, ShardingOptions{.num_shards = options.num_shards});
  writer.SetShardMetadata("format", "pt");
  DSV41_RETURN_IF_ERROR(AddAll(checkpoint, names, options, writer));
  return writer.Finish();
}

}  // namespace dsv41

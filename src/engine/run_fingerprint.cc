#include "engine/run_fingerprint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "kernels/linear.h"
#include "kernels/simd_cap.h"

namespace dsv41 {
namespace {

// FNV-1a, bytewise: start-up only.
uint64_t Mix(uint64_t h, std::span<const std::byte> bytes) {
  for (std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 0x100000001b3ull;
  return h;
}
template <typename T>
uint64_t MixValue(uint64_t h, const T& value) {
  return Mix(h, std::as_bytes(std::span<const T>(&value, 1)));
}
uint64_t MixString(uint64_t h, std::string_view s) {
  return Mix(h, std::as_bytes(std::span<const char>(s.data(), s.size())));
}

constexpr uint64_t kSeed = 0xcbf29ce484222325ull;
// Every this many tensors of a shard, the first and last kSampleBytes of one are hashed.
constexpr size_t kSampleEvery = 64;
constexpr size_t kSampleBytes = 64;

uint64_t HashCheckpoint(const Checkpoint& checkpoint) {
  uint64_t h = kSeed;
  for (const SafetensorsFile& shard : checkpoint.shards()) {
    h = MixString(h, std::filesystem::path(shard.path()).filename().string());
    h = MixValue(h, static_cast<uint64_t>(shard.file_bytes()));
    const std::vector<TensorInfo>& tensors = shard.tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorInfo& t = tensors[i];
      h = MixString(h, t.name);
      h = MixValue(h, t.dtype);
      for (int64_t d : t.shape) h = MixValue(h, d);
      h = MixValue(h, t.begin);
      h = MixValue(h, t.end);
      if (i % kSampleEvery != 0) continue;
      const std::span<const std::byte> data = shard.View(i).bytes;
      const size_t n = std::min(kSampleBytes, data.size());
      h = Mix(h, data.first(n));
      h = Mix(h, data.last(n));
    }
  }
  return h;
}

void CopyText(char* out, size_t size, const std::string& text) {
  const size_t n = std::min(text.size(), size - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

}  // namespace

Result<RunFingerprint> ComputeRunFingerprint(const LoadedTextModel& model, Numerics numerics,
                                             int32_t num_ranks) {
  RunFingerprint f;
  f.num_ranks = num_ranks;
  const std::string dir = model.weights->checkpoint().dir();
  DSV41_ASSIGN_OR_RETURN(const std::string config, ReadFileToString(dir + "/config.json"));
  f.config_hash = MixString(kSeed, config);
  f.checkpoint_hash = HashCheckpoint(model.weights->checkpoint());
  CopyText(f.kernels, sizeof(f.kernels),
           StrFormat("%s, fast kernel %s, bf16 dot %s, numerics %d", ActiveSimdTargetName().c_str(),
                     FastKernelName(CurrentFastKernel()), CpuHasBf16Dot() ? "yes" : "no",
                     static_cast<int>(numerics)));
  CopyText(f.model_dir, sizeof(f.model_dir), dir);
  return f;
}

Status CheckRunFingerprints(Communicator& comm, const RunFingerprint& mine) {
  const std::vector<RunFingerprint> all = AllGatherValue(comm, CommKind::kSetup, mine);
  const RunFingerprint& zero = all[0];
  for (size_t r = 1; r < all.size(); ++r) {
    const RunFingerprint& f = all[r];
    if (f.num_ranks != zero.num_ranks) {
      return InvalidArgumentError("rank %zu sees %d ranks, rank 0 %d", r, f.num_ranks,
                                  zero.num_ranks);
    }
    if (f.config_hash != zero.config_hash) {
      return InvalidArgumentError(
          "rank %zu's config.json (%s) differs from rank 0's (%s): every rank must load the same "
          "checkpoint",
          r, f.model_dir, zero.model_dir);
    }
    if (f.checkpoint_hash != zero.checkpoint_hash) {
      return InvalidArgumentError(
          "rank %zu's checkpoint (%s) differs from rank 0's (%s): other shards, tensors or "
          "values; every rank must load the same checkpoint",
          r, f.model_dir, zero.model_dir);
    }
    if (std::strcmp(f.kernels, zero.kernels) != 0) {
      return InvalidArgumentError(
          "rank %zu runs other kernels (%s) than rank 0 (%s), which would give other bits: cap "
          "them alike (--simd, --numerics)",
          r, f.kernels, zero.kernels);
    }
  }
  return OkStatus();
}

}  // namespace dsv41

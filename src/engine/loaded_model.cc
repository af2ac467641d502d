#include "engine/loaded_model.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "base/mapped_file.h"
#include "config/weight_summary.h"
#include "text/special_tokens.h"

namespace dsv41 {

Result<LoadedTextModel> LoadedTextModel::Load(const std::string& dir, const ProgressFn& progress,
                                              bool with_dspark, RankShard shard) {
  LoadedTextModel m;
  DSV41_ASSIGN_OR_RETURN(
      ModelWeights weights,
      ModelWeights::Load(dir, LoadOptions{.include_dspark = with_dspark, .shard = shard},
                         progress));
  m.weights = std::make_unique<ModelWeights>(std::move(weights));
  DSV41_ASSIGN_OR_RETURN(m.model, TextModel::Load(*m.weights));
  if (with_dspark) {
    DSV41_ASSIGN_OR_RETURN(m.dspark, DsparkModel::Load(*m.weights));
  }
  if (m.weights->config().vision.has_tower()) {
    DSV41_ASSIGN_OR_RETURN(m.vision, VisionTower::Load(*m.weights));
  }
  DSV41_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::Load(dir + "/tokenizer.json"));
  m.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer));
  if (!m.weights->config().engram_layer_ids.empty()) {
    DSV41_ASSIGN_OR_RETURN(m.token_map, BuildEngramTokenMap(*m.tokenizer));
    DSV41_RETURN_IF_ERROR(
        CheckClassCount(m.token_map, m.weights->config().engram_compressed_vocab_size));
    DSV41_ASSIGN_OR_RETURN(m.engram, ComputeEngramHashConstants(m.weights->config(), m.token_map));
    ThreadPool one_thread(1);
    DSV41_RETURN_IF_ERROR(m.OpenEngramStorage(EngramStoreOptions{}, one_thread));
  }
  return m;
}

Status LoadedTextModel::OpenEngramStorage(const EngramStoreOptions& options, ThreadPool& pool,
                                          const ProgressFn& progress) {
  if (weights->config().engram_layer_ids.empty()) return OkStatus();
  engram_storage.reset();  // a resident copy is freed before the next one is made
  EngramStoreOptions sharded = options;
  sharded.shard = weights->shard();
  DSV41_ASSIGN_OR_RETURN(engram_storage, EngramStorage::Open(weights->checkpoint(), weights->plan(),
                                                             sharded, pool, progress));
  return OkStatus();
}

int32_t LoadedTextModel::eos_token_id() const {
  return tokenizer->IdOf(kEos).value_or(config().eos_token_id);
}

LoadedTextModel::Residence LoadedTextModel::ResideWeights(ThreadPool& pool, WeightMemory memory) {
  Residence out;
  std::vector<std::span<const std::byte>> ranges;
  for (const TensorSpec& t : weights->expected()) {
    const WeightKind kind = ClassifyTensor(t.name);
    if (kind == WeightKind::kEngramTables || (kind == WeightKind::kDspark && !dspark)) continue;
    if (!RankNeedsTensor(config(), t.name, weights->shard())) continue;
    Result<TensorView> view = weights->Get(t.name);
    if (!view.ok() || view->bytes.empty()) continue;
    ranges.push_back(view->bytes);
    out.weight_bytes += view->bytes.size();
  }
  out.available_bytes = AvailableMemoryBytes();
  if (out.weight_bytes > out.available_bytes / 4 * 3) return out;
  if (memory == WeightMemory::kAuto) {
    memory = AdvisedMemoryGetsHugePages() ? WeightMemory::kCopy : WeightMemory::kMapped;
  }
  // Tensors that lie back to back become one range, so the pages they share are copied too;
  // the pages a range shares with bytes nobody here reads (Engram rows, other ranks' experts)
  // stay mapped.
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.data() < b.data(); });
  std::vector<std::span<const std::byte>> merged;
  for (std::span<const std::byte> r : ranges) {
    if (!merged.empty() && merged.back().data() + merged.back().size() == r.data()) {
      merged.back() = {merged.back().data(), merged.back().size() + r.size()};
    } else {
      merged.push_back(r);
    }
  }
  // Pieces of at most 64 MiB over the threads, cut at addresses that are multiples of 64 MiB (so
  // every cut is on a huge page's boundary and no huge page is split between two copies).
  constexpr uintptr_t kPiece = uintptr_t{64} << 20;
  std::vector<std::span<const std::byte>> pieces;
  for (std::span<const std::byte> r : merged) {
    const auto begin = reinterpret_cast<uintptr_t>(r.data());
    const uintptr_t end = begin + r.size();
    for (uintptr_t at = begin; at < end;) {
      const uintptr_t next = std::min(end, (at / kPiece + 1) * kPiece);
      pieces.push_back(r.subspan(at - begin, next - at));
      at = next;
    }
  }
  std::atomic<uint64_t> sink{0}, copied{0};
  std::mutex error_mutex;
  pool.ParallelFor(static_cast<int64_t>(pieces.size()), 1, [&](int64_t begin, int64_t end, int) {
    uint64_t sum = 0;
    for (int64_t i = begin; i < end; ++i) {
      if (memory == WeightMemory::kCopy) {
        Result<size_t> moved = CopyToAnonymousPages(pieces[i]);
        if (moved.ok()) {
          copied.fetch_add(*moved, std::memory_order_relaxed);
          continue;
        }
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (out.copy_error.empty()) out.copy_error = moved.status().ToString();
      }
      sum += PrefaultPages(pieces[i]);  // kMapped, or a piece whose copy failed
    }
    sink.fetch_add(sum, std::memory_order_relaxed);
  });
  out.copied_bytes = copied.load();
  out.done = sink.load() != ~uint64_t{0};  // always true; keeps the touches observable
  return out;
}

}  // namespace dsv41

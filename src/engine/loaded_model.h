#pragma once

// Everything the engine loads once per process: the weights (memory-mapped), the text model over
// them, the tokenizer, and the Engram token map and hash constants when the model has Engram.

#include <cstdint>
#include <memory>
#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engram/engram_store.h"
#include "engram/hash_constants.h"
#include "engram/token_map.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/vision_tower.h"
#include "model/weights.h"
#include "text/tokenizer.h"

namespace dsv41 {

// Immutable after Load; thread-safe to read.
struct LoadedTextModel {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<TextModel> model;
  std::unique_ptr<DsparkModel> dspark;  // the draft network; null unless loaded with it
  std::unique_ptr<VisionTower> vision;  // the vision tower; null when the config has none
  std::unique_ptr<Tokenizer> tokenizer;
  EngramTokenMap token_map;
  EngramHashConstants engram;
  // Where the Engram tables' rows come from (serving.md §8.2): the mapped tier after Load;
  // OpenEngramStorage picks another. Null when the model has no Engram layer.
  std::unique_ptr<EngramStorage> engram_storage;

  // Loads the checkpoint directory `dir` (config.json, safetensors, tokenizer.json); with_dspark
  // also checks and loads the DSpark stages (`mtp.*`, needed by --speculative dspark and `dsv41
  // draft`). Errors name the file, tensor or field. `progress` sees the shard mapping
  // (ModelWeights::Load) and may cancel it. `shard`: this process's rank of a multi-process run,
  // which holds only its routed experts and Engram rows (config/rank_shard.h).
  static Result<LoadedTextModel> Load(const std::string& dir, const ProgressFn& progress = {},
                                      bool with_dspark = false, RankShard shard = {});

  // Re-opens the Engram tables in the tier `options` asks for (the resident tier copies them over
  // `pool`, reporting progress; this rank's rows only). Not while an engine uses the model.
  // Errors name file and tensor.
  Status OpenEngramStorage(const EngramStoreOptions& options, ThreadPool& pool,
                           const ProgressFn& progress = {});

  const ModelConfig& config() const { return weights->config(); }
  // The end-of-sentence id: the tokenizer's "<｜end▁of▁sentence｜>", else the config's.
  int32_t eos_token_id() const;

  // Where ResideWeights puts the weights.
  enum class WeightMemory {
    kAuto,  // kCopy where advised memory gets huge pages (AdvisedMemoryGetsHugePages), else kMapped
    kCopy,  // an anonymous copy in transparent huge pages (CopyToAnonymousPages)
    kMapped,  // the file mapping, every page read ahead (4 KiB page-cache pages)
  };
  // What ResideWeights did.
  struct Residence {
    uint64_t weight_bytes = 0;     // the text model's weights and DSpark's when loaded (no Engram)
    uint64_t available_bytes = 0;  // MemAvailable before
    bool done = false;             // false: they did not fit in 3/4 of the available memory
    uint64_t copied_bytes = 0;     // bytes moved to anonymous pages (whole pages; kCopy)
    std::string copy_error;        // the first copy that failed (its pages stay mapped), or empty
  };
  // Makes the text model's (and the loaded DSpark stages') weights resident when they fit in 3/4 of
  // the available memory, in parallel over `pool`, so no step waits on a page fault: as an
  // anonymous copy in huge pages (a decode step's weight stream then walks one page table entry
  // per 2 MiB instead of per 4 KiB: docs/performance.md, fifteenth round) or as the prefaulted
  // mapping. The bytes and every view into them stay as they are. The Engram tables stay with
  // their storage tier; other ranks' routed experts are never touched. Not while an engine runs.
  Residence ResideWeights(ThreadPool& pool, WeightMemory memory);
};

}  // namespace dsv41

#pragma once

// Everything the engine loads once per process: the weights (memory-mapped), the text model over
// them, the tokenizer, and the Engram token map and hash constants when the model has Engram.

#include <memory>
#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "engram/hash_constants.h"
#include "engram/token_map.h"
#include "model/forward.h"
#include "model/weights.h"
#include "text/tokenizer.h"

namespace dsv41 {

// Immutable after Load; thread-safe to read.
struct LoadedTextModel {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<TextModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  EngramTokenMap token_map;
  EngramHashConstants engram;

  // Loads the checkpoint directory `dir` (config.json, safetensors, tokenizer.json). Errors name
  // the file, tensor or field. `progress` sees the shard mapping (ModelWeights::Load) and may
  // cancel it.
  static Result<LoadedTextModel> Load(const std::string& dir, const TextModelOptions& options = {},
                                      const ProgressFn& progress = {});

  const ModelConfig& config() const { return weights->config(); }
  // The end-of-sentence id: the tokenizer's "<｜end▁of▁sentence｜>", else the config's.
  int32_t eos_token_id() const;
};

}  // namespace dsv41

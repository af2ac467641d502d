#pragma once

// Everything the engine loads once per process: the weights (memory-mapped), the text model over
// them, the tokenizer, and the Engram token map and hash constants when the model has Engram.

#include <memory>
#include <string>

#include "base/status.h"
#include "engram/hash_constants.h"
#include "engram/token_map.h"
#include "model/dspark.h"
#include "model/forward.h"
#include "model/weights.h"
#include "text/tokenizer.h"

namespace dsv41 {

// Immutable after Load; thread-safe to read.
struct LoadedTextModel {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<TextModel> model;
  std::unique_ptr<DsparkModel> dspark;  // the draft network; null unless loaded with it
  std::unique_ptr<Tokenizer> tokenizer;
  EngramTokenMap token_map;
  EngramHashConstants engram;

  // Loads the checkpoint directory `dir` (config.json, safetensors, tokenizer.json); with_dspark
  // also checks and loads the DSpark stages (`mtp.*`, needed by --speculative dspark and `dsv41
  // draft`). Errors name the file, tensor or field.
  static Result<LoadedTextModel> Load(const std::string& dir, const TextModelOptions& options = {},
                                      bool with_dspark = false);

  const ModelConfig& config() const { return weights->config(); }
  // The end-of-sentence id: the tokenizer's "<｜end▁of▁sentence｜>", else the config's.
  int32_t eos_token_id() const;
};

}  // namespace dsv41

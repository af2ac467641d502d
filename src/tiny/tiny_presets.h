#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/config.h"

namespace dsv41 {

// A synthetic checkpoint to write: the model config plus how to lay it out on disk.
struct TinySpec {
  ModelConfig config;
  uint64_t seed = 1;
  int32_t num_shards = 3;  // model-0000k-of-0000N.safetensors; 1 writes model.safetensors
};

// Names of the built-in presets, the default first.
std::vector<std::string_view> TinyPresetNames();

// A preset by name:
//   tiny       every layer mode (SWA-only, Full r2, Reuse, Full r1 + candidate source, Reindex with
//              the candidate filter), Engram on a ratio-0 and a ratio-2 layer, 3 DSpark stages;
//              FP8 + MXFP4 weights (checkpoint.md §8.2). The Quick start's built-in model.
//   tiny-bf16  the same structure with unquantised BF16 weights (no .scale tensors).
//   small      the same structure at ~1.2 GB of weights, for speed baselines.
// InvalidArgument naming the preset and the known names when unknown.
Result<TinySpec> TinyPreset(std::string_view name);

// Switches `config` to unquantised BF16 weights (the Engram tables stay FP8, model.md §1.1 rule 2).
void MakeUnquantized(ModelConfig& config);

}  // namespace dsv41

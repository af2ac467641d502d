#pragma once

#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "tiny/tiny_presets.h"

namespace dsv41 {

// What WriteTinyCheckpoint produced.
struct TinyCheckpointSummary {
  ModelConfig config;  // as written to config.json (Engram rows, class count, noise id filled in)
  size_t num_tensors = 0;
  uint64_t tensor_bytes = 0;
};

// Writes a synthetic checkpoint directory in exactly the released layout (checkpoint.md §1, §8):
// config.json (composite HF form), inference/config.json, model.safetensors.index.json + shards
// (or model.safetensors for one shard), tokenizer.json, tokenizer_config.json and
// generation_config.json. Tensors are those the layer plan requires (config/tensor_inventory.h)
// plus the release's image_start/image_end/image_newline; FP8 weights carry ue8m0 32×32 tile
// scales, routed experts are MXFP4, Engram tables FP8 with per-32 scales; norms near 1, small
// biases and sinks, no all-zero rows. The config's Engram row counts come from the prime rule, its
// engram_compressed_vocab_size from the token map of the generated tokenizer, and its DSpark noise
// token is the tokenizer's "<｜System｜>", as in the release. Deterministic for a spec.
Result<TinyCheckpointSummary> WriteTinyCheckpoint(const TinySpec& spec, const std::string& dir,
                                                  const ProgressFn& progress = {});

}  // namespace dsv41

#pragma once

// The DSpark draft dump behind `dsv41 draft` and the golden comparison of the draft forward: one
// request runs its prompt, then greedy decode steps without speculation; after decode step k (the
// main model has just consumed position T − 1 + k and its argmax is t1) the draft network drafts
// from t1. The layout is the model goldens' dspark_ids / dspark_logits / dspark_confidence
// (goldens/model/README.md).

#include <cstdint>
#include <span>
#include <vector>

#include "base/exec_context.h"
#include "base/status.h"
#include "engine/loaded_model.h"

namespace dsv41 {

struct DraftDump {
  int32_t steps = 0;
  int32_t block_size = 0;
  int32_t vocab_size = 0;
  std::vector<int64_t> ids;       // [steps, 1 + block]: [t1, d1 .. d_block] per decode step
  std::vector<float> logits;      // [steps, block, vocab]: draft logits incl. the Markov bias
  std::vector<float> confidence;  // [steps, block]: raw (pre-sigmoid) confidences
  std::vector<int32_t> greedy;    // [steps + 1]: the main model's greedy tokens after the prompt
};

// Runs `prompt` and `steps` greedy decode steps (argmax, the lowest id on ties; EOS does not stop)
// over a paged cache of its own with the draft windows (smallest legal block size, seed profile),
// drafting after every decode step. `model` must hold the DSpark stages (loaded with_dspark).
// InvalidArgument for an empty prompt, a token outside the vocabulary, steps < 1, or a length
// beyond max_position_embeddings. The Engram rows come from model.engram_storage, fetched ahead of
// each forward unless engram_prefetch is false (then read inside the layers); same bits.
Result<DraftDump> DumpDrafts(const LoadedTextModel& model, std::span<const int32_t> prompt,
                             int32_t steps, ExecContext& ctx, bool engram_prefetch = true);

}  // namespace dsv41

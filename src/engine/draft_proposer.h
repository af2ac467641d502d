#pragma once

// The draft proposer (serving.md §7): all speculative-decoding state beside the verify rule. It
// proposes the next step's drafts of the requests ready to decode (DSpark: one draft forward for
// all of them; n-gram prompt lookup; a custom drafter) through each request's acceptance guard,
// and seeds the DSpark draft windows from the main forward's main_hidden rows of every kept
// position, deferring a paused request's rows to batch them. Requests hold only the draft ids;
// the rows waiting to be seeded live here. Engine thread only.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/speculative.h"
#include "model/batch.h"
#include "model/dspark.h"

namespace dsv41 {

// What the proposer did since it was made.
struct DraftProposerStats {
  uint64_t num_draft_forwards = 0;  // runs of the DSpark draft network (all requests at once)
  uint64_t num_seed_calls = 0;      // DSpark window seedings (one batched GEMM each)
  uint64_t num_seeded_rows = 0;     // positions they seeded
};

class DraftProposer {
 public:
  // `model`, `runner` (its cache and execution context) and the options outlive the proposer.
  // `block_tokens`: the cache's block size (a deferral never crosses a block).
  DraftProposer(const LoadedTextModel& model, const SpeculativeOptions& options,
                int32_t block_tokens, ModelRunner& runner);

  // DSpark window seeding of r's kept positions [start, end), whose main_hidden rows are `rows`:
  // staged for this step's SeedStaged, together with any rows r deferred before — or, while r's
  // guard pauses drafting, deferred itself, as long as they stay inside one incomplete block and
  // under kMaxDeferredSeeds rows. So a full block is seeded before it can be offered to the prefix
  // cache, and a request seeds what it held back in the step before it resumes drafting (the
  // guard lets it draft only after a step in which it was not paused).
  void StageSeedRows(const Request& r, std::span<const float> rows, int64_t start, int64_t end);
  // One SeedWindows over everything staged since the last call.
  Status SeedStaged();
  // Proposes the next step's drafts of the requests now ready to decode (right after sampling;
  // DSpark runs for all of them at once) into their draft_tokens / draft_classes.
  Status ProposeDrafts(std::span<Request* const> ready);
  // Drops what is held for a request that ended.
  void Forget(uint64_t request_id) { deferred_.erase(request_id); }

  const DraftProposerStats& stats() const { return stats_; }

 private:
  // Rows a paused request held back: positions start .. start + num_rows − 1, as bf16 bits (they
  // are bf16 values), all inside one block that is not yet complete.
  struct DeferredSeeds {
    int64_t start = 0;
    int64_t num_rows = 0;
    std::vector<uint16_t> main_hidden;
  };
  // Stages r's deferred rows, if any.
  void StageDeferred(const Request& r, DeferredSeeds& deferred);
  // Stores `tokens` (cut at the first id outside the vocabulary or the Engram map) as r's drafts.
  void SetDrafts(Request& r, std::span<const int32_t> tokens);
  // The DSpark drafts of dspark_requests_ (one draft forward).
  Status DraftWithDspark();

  const LoadedTextModel& model_;
  const SpeculativeOptions& options_;
  int64_t block_tokens_;
  ModelRunner& runner_;
  DraftProposerStats stats_;
  std::unordered_map<uint64_t, DeferredSeeds> deferred_;  // by request id
  // Reused every step (capacity kept).
  std::vector<float> seed_rows_;             // main_hidden rows staged for SeedStaged
  std::vector<BatchRequest> seed_requests_;  // their layout by request
  std::vector<Request*> dspark_requests_;
  std::vector<int32_t> dspark_budget_;
  std::vector<int32_t> proposal_;
  std::vector<DraftRequest> draft_inputs_;
  DraftResult drafted_;  // the last DSpark draft
};

}  // namespace dsv41

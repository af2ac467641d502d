#pragma once

// The step scheduler (serving.md §6, vLLM V1's policy): each step takes running decodes first,
// then running prefills, then admits waiting requests first come first served, within the token
// budget and the sequence limit, chunking the last prefill to fit. When blocks run out it preempts
// the newest running request by recompute (its released blocks stay hashable for its return) and
// never fails a request for a transient lack of blocks. It decides counts and blocks only: it
// never touches tensors.

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/request.h"
#include "kv/kv_cache_manager.h"

namespace dsv41 {

struct SchedulerOptions {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
};

// One request's share of a step: its tokens [request->num_computed, + num_new_tokens). A decode
// with drafts gets 1 + (drafts to verify) tokens: the positions past num_tokens() are drafts.
struct ScheduledRequest {
  Request* request = nullptr;
  int32_t num_new_tokens = 0;
};

// The plain per-step decision the model runner turns into a Batch.
struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // in batch order
  std::vector<Request*> preempted;          // sent back to waiting during this step
  int32_t num_tokens = 0;
};

// Engine thread only.
class Scheduler {
 public:
  Scheduler(KvCacheManager& kv, const SchedulerOptions& options);

  // Queues a new request (status waiting).
  void Add(Request* request);
  // Drops a request from the queues and releases its blocks at once (finish, abort, error).
  void Remove(Request* request);
  // The next step's work into `output` (cleared first, its capacity kept); empty when nothing
  // can run.
  void Schedule(SchedulerOutput& output);
  SchedulerOutput Schedule();
  // After the step's forward (and verification: a verify step passes the positions it kept):
  // each scheduled request now holds num_computed + num_new_tokens positions, all of them
  // committed in its history; newly full blocks are offered to the prefix cache.
  void Update(const SchedulerOutput& output);

  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  uint64_t num_preemptions() const { return num_preemptions_; }
  const std::vector<Request*>& running() const { return running_; }

 private:
  // Allocates blocks for `n` new tokens of `request`, preempting newer running requests that are
  // not yet scheduled in this step while blocks are short; shrinks n when `request` is the only
  // candidate left. Returns the tokens granted (0: `request` itself had to wait).
  int32_t AllocateOrPreempt(Request* request, int32_t n, const std::vector<Request*>& scheduled,
                            SchedulerOutput& output);
  void Preempt(Request* victim, SchedulerOutput& output);

  KvCacheManager& kv_;
  SchedulerOptions options_;
  std::vector<Request*> running_;    // admission order
  std::vector<Request*> snapshot_;   // Schedule's copy of running_ (capacity kept)
  std::vector<Request*> scheduled_;  // Schedule's requests so far (capacity kept)
  std::deque<Request*> waiting_;     // FCFS; preempted requests return to the front
  uint64_t num_preemptions_ = 0;
};

}  // namespace dsv41

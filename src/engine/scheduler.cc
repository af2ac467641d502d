#include "engine/scheduler.h"

#include <algorithm>

namespace dsv41 {
namespace {

bool Contains(const std::vector<Request*>& list, const Request* r) {
  return std::find(list.begin(), list.end(), r) != list.end();
}

int32_t Remaining(const Request* r) {
  return static_cast<int32_t>(r->num_tokens() - r->num_computed);
}

}  // namespace

Scheduler::Scheduler(KvCacheManager& kv, const SchedulerOptions& options)
    : kv_(kv), options_(options) {}

void Scheduler::Add(Request* request) {
  request->status = RequestStatus::kWaiting;
  waiting_.push_back(request);
}

void Scheduler::Remove(Request* request) {
  running_.erase(std::remove(running_.begin(), running_.end(), request), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), request), waiting_.end());
  kv_.Free(request->blocks);
}

void Scheduler::Preempt(Request* victim, SchedulerOutput& output) {
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  kv_.Free(victim->blocks);  // cached blocks keep their hashes: the return may hit them
  victim->num_computed = 0;
  victim->draft_tokens.clear();  // drafted again once its recompute is done
  victim->draft_classes.clear();
  victim->status = RequestStatus::kWaiting;
  waiting_.push_front(victim);
  output.preempted.push_back(victim);
  ++num_preemptions_;
}

int32_t Scheduler::AllocateOrPreempt(Request* request, int32_t n,
                                     const std::vector<Request*>& scheduled,
                                     SchedulerOutput& output) {
  while (true) {
    if (kv_.Allocate(request->blocks, request->num_computed, n)) return n;
    Request* victim = nullptr;
    for (Request* candidate : running_) {
      if (candidate == request || Contains(scheduled, candidate)) continue;
      if (victim == nullptr || candidate->arrival > victim->arrival) victim = candidate;
    }
    if (victim != nullptr && victim->arrival > request->arrival) {
      Preempt(victim, output);
    } else if (n > 1) {
      n = std::max(1, n / 2);  // a smaller chunk needs fewer window blocks
    } else {
      return 0;
    }
  }
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput output;
  Schedule(output);
  return output;
}

void Scheduler::Schedule(SchedulerOutput& output) {
  output.scheduled.clear();
  output.preempted.clear();
  output.num_tokens = 0;
  int32_t budget = options_.max_num_batched_tokens;
  std::vector<Request*>& scheduled = scheduled_;
  scheduled.clear();
  auto schedule = [&](Request* r, int32_t n) {
    scheduled.push_back(r);
    output.scheduled.push_back(ScheduledRequest{.request = r, .num_new_tokens = n});
    output.num_tokens += n;
    budget -= n;
  };

  // Running requests: decodes (one token left to compute, plus the drafts to verify) first, then
  // unfinished prefills, each in admission order. A verify that does not fit checks fewer drafts.
  std::vector<Request*>& snapshot = snapshot_;
  snapshot.assign(running_.begin(), running_.end());
  for (const bool decode_pass : {true, false}) {
    for (Request* r : snapshot) {
      if (budget <= 0) break;
      if (r->status != RequestStatus::kRunning || Contains(scheduled, r)) continue;
      const int32_t remaining = Remaining(r);
      if ((remaining == 1) != decode_pass || remaining < 1) continue;
      const int32_t wanted =
          decode_pass ? 1 + static_cast<int32_t>(r->draft_tokens.size()) : remaining;
      const int32_t granted = AllocateOrPreempt(r, std::min(wanted, budget), scheduled, output);
      if (granted == 0) {
        Preempt(r, output);  // nothing newer left to free: it waits for others to finish
        continue;
      }
      schedule(r, granted);
    }
  }

  // Waiting requests, first come first served, while the budget and the sequence limit allow.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(running_.size()) < options_.max_num_seqs) {
    Request* r = waiting_.front();
    // A request that wants every prompt position's logits computes them all.
    if (r->num_computed == 0 && !r->prompt_logits) {
      r->num_computed = kv_.AcquirePrefix(r->history.token_ids(), r->content_keys, r->blocks);
      r->num_cached_prompt_tokens = r->num_computed;
    }
    int32_t n = std::min(Remaining(r), budget);
    bool allocated = kv_.Allocate(r->blocks, r->num_computed, n);
    // Alone, a request must still make progress: smaller chunks need fewer window blocks.
    while (!allocated && running_.empty() && n > 1) {
      n = std::max(1, n / 2);
      allocated = kv_.Allocate(r->blocks, r->num_computed, n);
    }
    if (!allocated) {
      kv_.Free(r->blocks);  // drop the prefix references; the hit is found again next time
      r->num_computed = 0;
      break;
    }
    waiting_.pop_front();
    kv_.Reserve(r->blocks, r->max_total_tokens);
    r->status = RequestStatus::kRunning;
    running_.insert(std::upper_bound(
                        running_.begin(), running_.end(), r,
                        [](const Request* a, const Request* b) { return a->arrival < b->arrival; }),
                    r);
    schedule(r, n);
  }
}

void Scheduler::Update(const SchedulerOutput& output) {
  for (const ScheduledRequest& s : output.scheduled) {
    Request* r = s.request;
    r->num_computed += s.num_new_tokens;
    kv_.CacheFullBlocks(r->blocks, r->history.token_ids(), r->content_keys, r->num_computed);
  }
}

}  // namespace dsv41

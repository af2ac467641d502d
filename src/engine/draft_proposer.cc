#include "engine/draft_proposer.h"

#include <algorithm>

#include "base/check.h"
#include "engram/row_ids.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {

DraftProposer::DraftProposer(const LoadedTextModel& model, const SpeculativeOptions& options,
                             int32_t block_tokens, ModelRunner& runner)
    : model_(model), options_(options), block_tokens_(block_tokens), runner_(runner) {}

void DraftProposer::StageDeferred(const Request& r, DeferredSeeds& deferred) {
  if (deferred.num_rows == 0) return;
  const size_t width = static_cast<size_t>(runner_.main_hidden_width());
  const size_t first_row = seed_rows_.size() / width;
  for (const uint16_t bits : deferred.main_hidden) seed_rows_.push_back(F32FromBf16(bits));
  seed_requests_.push_back(BatchRequest{.first_row = static_cast<int32_t>(first_row),
                                        .num_tokens = static_cast<int32_t>(deferred.num_rows),
                                        .start_pos = static_cast<int32_t>(deferred.start),
                                        .block_tables = r.blocks.tables});
  deferred.main_hidden.clear();
  deferred.num_rows = 0;
}

void DraftProposer::StageSeedRows(const Request& r, std::span<const float> rows, int64_t start,
                                  int64_t end) {
  if (end <= start) return;
  const auto found = deferred_.find(r.id);
  DeferredSeeds* deferred = found == deferred_.end() ? nullptr : &found->second;
  // Deferred rows that do not end where these begin belong to positions a preemption dropped:
  // the recompute seeds them again.
  if (deferred != nullptr && deferred->num_rows > 0 &&
      deferred->start + deferred->num_rows != start) {
    deferred->main_hidden.clear();
    deferred->num_rows = 0;
  }
  const bool holds = deferred != nullptr && deferred->num_rows > 0;
  const int64_t first = holds ? deferred->start : start;
  const bool defer = options_.defer_paused_seeding && r.guard.paused() &&
                     first / block_tokens_ == end / block_tokens_ &&
                     end - first <= kMaxDeferredSeeds;
  if (defer) {
    if (deferred == nullptr) deferred = &deferred_[r.id];
    if (!holds) deferred->start = start;
    for (const float v : rows) deferred->main_hidden.push_back(Bf16FromF32(v));
    deferred->num_rows = end - deferred->start;
    return;
  }
  if (deferred != nullptr) StageDeferred(r, *deferred);
  const size_t width = static_cast<size_t>(runner_.main_hidden_width());
  const size_t first_row = seed_rows_.size() / width;
  seed_rows_.insert(seed_rows_.end(), rows.begin(), rows.end());
  const BatchRequest staged{.first_row = static_cast<int32_t>(first_row),
                            .num_tokens = static_cast<int32_t>(end - start),
                            .start_pos = static_cast<int32_t>(start),
                            .block_tables = r.blocks.tables};
  // The request's deferred rows end where these begin: one run of positions.
  if (!seed_requests_.empty() &&
      seed_requests_.back().block_tables.data() == r.blocks.tables.data() &&
      seed_requests_.back().start_pos + seed_requests_.back().num_tokens == staged.start_pos) {
    seed_requests_.back().num_tokens += staged.num_tokens;
  } else {
    seed_requests_.push_back(staged);
  }
}

Status DraftProposer::SeedStaged() {
  if (seed_requests_.empty()) return Status();
  const Status seeded = model_.dspark->SeedWindows(seed_rows_, seed_requests_, runner_.cache(),
                                                   runner_.exec_context());
  ++stats_.num_seed_calls;
  stats_.num_seeded_rows += seed_rows_.size() / static_cast<size_t>(runner_.main_hidden_width());
  seed_rows_.clear();
  seed_requests_.clear();
  return seeded;
}

void DraftProposer::SetDrafts(Request& r, std::span<const int32_t> tokens) {
  const int32_t vocab = model_.config().vocab_size;
  r.draft_tokens.clear();
  r.draft_classes.clear();
  for (const int32_t token : tokens) {
    int32_t class_id = 0;
    if (token < 0 || token >= vocab) break;
    if (model_.engram.num_layers() > 0 &&
        !MapTokensToEngramClasses(model_.token_map, std::span(&token, 1), std::span(&class_id, 1))
             .ok()) {
      break;
    }
    r.draft_tokens.push_back(token);
    r.draft_classes.push_back(class_id);
  }
}

Status DraftProposer::ProposeDrafts(std::span<Request* const> ready) {
  dspark_requests_.clear();
  dspark_budget_.clear();
  for (Request* r : ready) {
    // A verify of m drafts emits up to m + 1 tokens; none may pass the request's limit.
    const int64_t room = r->max_total_tokens - r->num_tokens() - 1;
    const int32_t room_drafts =
        static_cast<int32_t>(std::min<int64_t>(options_.num_speculative_tokens, room));
    if (room_drafts < 1) continue;
    const int32_t budget = r->guard.DraftsNextStep(room_drafts);
    if (budget < 1) continue;
    if (options_.custom_drafter) {
      proposal_.clear();
      options_.custom_drafter(r->history.token_ids(), budget, proposal_);
      proposal_.resize(std::min<size_t>(proposal_.size(), budget));
      SetDrafts(*r, proposal_);
    } else if (options_.method == SpeculativeMethod::kNgram) {
      SetDrafts(*r, ProposeNgram(r->history.token_ids(), options_.prompt_lookup_min,
                                 options_.prompt_lookup_max, budget));
    } else {
      dspark_requests_.push_back(r);
      dspark_budget_.push_back(budget);
    }
  }
  if (dspark_requests_.empty()) return Status();
  return DraftWithDspark();
}

Status DraftProposer::DraftWithDspark() {
  // The windows a draft reads are complete: a guard lets a request draft only after a step in
  // which it was not paused, and that step seeded whatever the request had held back.
  draft_inputs_.clear();
  for (const Request* r : dspark_requests_) {
    const auto found = deferred_.find(r->id);
    DSV41_CHECK(found == deferred_.end() || found->second.num_rows == 0,
                "request %llu drafts with %lld window rows unseeded",
                static_cast<unsigned long long>(r->id),
                static_cast<long long>(found->second.num_rows));
    draft_inputs_.push_back(DraftRequest{.token = r->history.token_ids().back(),
                                         .last_pos = static_cast<int32_t>(r->num_computed - 1),
                                         .block_tables = r->blocks.tables});
  }
  DSV41_RETURN_IF_ERROR(model_.dspark->Draft(draft_inputs_, runner_.cache(),
                                             /*want_logits=*/false, drafted_,
                                             runner_.exec_context()));
  ++stats_.num_draft_forwards;
  const int32_t block = model_.dspark->block_size();
  for (size_t i = 0; i < dspark_requests_.size(); ++i) {
    int32_t n = dspark_budget_[i];
    // Confidence-scheduled verification: keep the drafts before the first unlikely one.
    if (options_.confidence_threshold > 0.0) {
      for (int32_t k = 0; k < n; ++k) {
        if (Sigmoid(drafted_.confidence[i * block + k]) < options_.confidence_threshold) {
          n = k;
          break;
        }
      }
    }
    SetDrafts(*dspark_requests_[i],
              std::span<const int32_t>(drafted_.tokens).subspan(i * block, n));
  }
  return Status();
}

}  // namespace dsv41

#include "engine/model_runner.h"

#include <algorithm>

namespace dsv41 {

void ClearBatch(Batch& batch) {
  batch.token_ids.clear();
  batch.requests.clear();
  batch.engram_rows.clear();
  batch.logit_rows.clear();
  batch.main_hidden_rows.clear();
}

void AppendToBatch(const EngramHashConstants& engram, const BatchSlice& slice, Batch& batch) {
  const int32_t first_row = batch.num_tokens();
  const int32_t n = slice.num_tokens;
  batch.requests.push_back(BatchRequest{.first_row = first_row,
                                        .num_tokens = n,
                                        .start_pos = slice.start,
                                        .block_tables = slice.block_tables});
  const std::span<const int32_t> ids = slice.token_ids.subspan(slice.start, n);
  batch.token_ids.insert(batch.token_ids.end(), ids.begin(), ids.end());
  if (engram.num_layers() > 0) {
    const size_t begin = batch.engram_rows.size();
    batch.engram_rows.resize(begin +
                             static_cast<size_t>(n) * engram.num_layers() * engram.num_cols());
    ComputeEngramRows(engram, slice.class_ids, slice.dead, slice.start, n,
                      std::span<int64_t>(batch.engram_rows).subspan(begin));
  }
  for (int32_t t = 0; t < n; ++t) {
    const int64_t pos = slice.start + t;
    if (pos >= slice.logits_from || pos < slice.prompt_logits_end) {
      batch.logit_rows.push_back(first_row + t);
    }
    if (slice.main_hidden) batch.main_hidden_rows.push_back(first_row + t);
  }
}

ModelRunner::ModelRunner(const LoadedTextModel& model, const CachePlan& plan, uint32_t num_blocks,
                         const ModelRunnerOptions& options, ThreadPool& pool, Communicator& comm)
    : model_(model),
      options_(options),
      // Sized for a full step up front (pages are touched only when used), capped so that a
      // huge token budget does not reserve address space it will never need.
      arena_(std::min<size_t>(model.model->StepScratchBytes(options.max_num_batched_tokens),
                              size_t{1} << 30)),
      ctx_{.pool = pool,
           .arena = arena_,
           .numerics = options.numerics,
           .official_index_key_slot = options.official_index_key_slot,
           .comm = comm},
      storage_(std::make_unique<KvCacheStorage>(plan, model.config(), num_blocks)),
      main_hidden_width_(model.model->MainHiddenWidth()),
      no_engram_({}, 0) {
  ctx_.roofline = options.roofline;
  if (model.engram.num_layers() > 0) {
    engram_prefetch_ =
        MakeEngramPrefetcher(*model.engram_storage, model.engram.num_cols(),
                             options.max_num_batched_tokens, options.engram_prefetch, comm);
  }
}

void ModelRunner::BuildBatch(const SchedulerOutput& scheduled, std::span<const int64_t> committed) {
  ClearBatch(batch_);
  for (size_t i = 0; i < scheduled.scheduled.size(); ++i) {
    const ScheduledRequest& s = scheduled.scheduled[i];
    const Request& r = *s.request;
    const auto start = static_cast<int32_t>(r.num_computed);
    // The last committed position and every draft after it are verify rows.
    const bool completes = start + s.num_new_tokens == r.num_tokens();
    AppendToBatch(model_.engram,
                  BatchSlice{.token_ids = r.history.token_ids(),
                             .class_ids = r.history.class_ids(),
                             .dead = r.history.dead(),
                             .start = start,
                             .num_tokens = s.num_new_tokens,
                             .block_tables = r.blocks.tables,
                             .logits_from =
                                 completes ? committed[i] - 1 : std::numeric_limits<int64_t>::max(),
                             .prompt_logits_end = r.prompt_logits ? r.num_prompt_tokens : 0,
                             .main_hidden = options_.record_main_hidden},
                  batch_);
  }
}

Status ModelRunner::Run(const SchedulerOutput& scheduled) {
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  logits_.resize(batch_.logit_rows.size() * vocab);
  main_hidden_.resize(batch_.main_hidden_rows.size() * static_cast<size_t>(main_hidden_width_));
  arena_.Reset();
  if (engram_prefetch_ != nullptr) {
    // Step start (serving.md §8.4): every scheduled token's rows, and the next chunks' rows.
    BuildEngramLookAhead(scheduled);
    engram_prefetch_->StartStep(batch_.engram_rows, batch_.num_tokens(), engram_ahead_);
  }
  EngramStepRows& engram_rows =
      engram_prefetch_ != nullptr ? static_cast<EngramStepRows&>(*engram_prefetch_) : no_engram_;
  const Status forward =
      model_.model->Forward(batch_, storage_->view(), engram_rows,
                            ForwardOutputs{.logits = logits_, .main_hidden = main_hidden_}, ctx_);
  // None of this step's reads is in flight any more.
  if (engram_prefetch_ != nullptr) engram_prefetch_->FinishStep();
  return forward;
}

bool ModelRunner::engram_storage_failed() const {
  return engram_prefetch_ != nullptr && engram_prefetch_->step_failed();
}

void ModelRunner::ReadEngramFetchStats(EngramFetchStats& out) const {
  if (engram_prefetch_ != nullptr) {
    engram_prefetch_->ReadStats(out);
  } else {
    out = EngramFetchStats{};
  }
}

void ModelRunner::BuildEngramLookAhead(const SchedulerOutput& scheduled) {
  engram_ahead_.clear();
  const size_t per_token = static_cast<size_t>(model_.engram.num_cols()) *
                           static_cast<size_t>(model_.engram.num_layers());
  int64_t budget = options_.max_num_batched_tokens;
  for (const ScheduledRequest& s : scheduled.scheduled) {
    const Request& r = *s.request;
    const int64_t next = r.num_computed + s.num_new_tokens;
    const int64_t n = std::min<int64_t>(r.num_tokens() - next, budget);
    if (n <= 0) continue;
    const size_t begin = engram_ahead_.size();
    engram_ahead_.resize(begin + static_cast<size_t>(n) * per_token);
    ComputeEngramRows(model_.engram, r.history.class_ids(), r.history.dead(), next, n,
                      std::span<int64_t>(engram_ahead_).subspan(begin));
    budget -= n;
    if (budget == 0) break;
  }
}

}  // namespace dsv41

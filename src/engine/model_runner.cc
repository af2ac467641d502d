#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>

#include "vision/image_span.h"
#include "vision/patches.h"

namespace dsv41 {

void ClearBatch(Batch& batch) {
  batch.token_ids.clear();
  batch.requests.clear();
  batch.engram_rows.clear();
  batch.logit_rows.clear();
  batch.main_hidden_rows.clear();
  batch.span_roles.clear();
  batch.span_rows.clear();
}

namespace {

// The span roles and rows of the slice's positions inside image spans (vision.md §10).
void AppendSpanRows(const BatchSlice& slice, int32_t first_row, Batch& batch) {
  const int64_t begin = slice.start;
  const int64_t end = begin + slice.num_tokens;
  for (size_t k = 0; k < slice.images.size(); ++k) {
    const RequestImage& image = slice.images[k];
    const int64_t span_end = int64_t{image.span_start} + image.plan.span_length;
    for (int64_t pos = std::max<int64_t>(begin, image.span_start); pos < std::min(end, span_end);
         ++pos) {
      const SpanPosition at = SpanPositionAt(image.plan, pos - image.span_start);
      const size_t row = static_cast<size_t>(first_row + (pos - begin));
      batch.span_roles[row] = static_cast<int8_t>(at.role);
      const int64_t dim = static_cast<int64_t>(slice.delimiters.start.size());
      switch (at.role) {
        case SpanRole::kStart:
          batch.span_rows[row] = slice.delimiters.start.data();
          break;
        case SpanRole::kNewline:
          batch.span_rows[row] = slice.delimiters.newline.data();
          break;
        case SpanRole::kEnd:
          batch.span_rows[row] = slice.delimiters.end.data();
          break;
        case SpanRole::kImage:
        case SpanRole::kText:
          batch.span_rows[row] = slice.image_rows[k] + at.image_row * dim;
          break;
      }
    }
  }
}

bool SliceReachesASpan(const BatchSlice& slice) {
  for (const RequestImage& image : slice.images) {
    if (image.span_start < slice.start + slice.num_tokens &&
        image.span_start + image.plan.span_length > slice.start) {
      return true;
    }
  }
  return false;
}

}  // namespace

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
  if (!batch.span_roles.empty() || SliceReachesASpan(slice)) {
    batch.span_roles.resize(batch.token_ids.size(), static_cast<int8_t>(SpanRole::kText));
    batch.span_rows.resize(batch.token_ids.size(), nullptr);
    AppendSpanRows(slice, first_row, batch);
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
  EncodeImagesOfStep(scheduled);
  for (size_t i = 0; i < scheduled.scheduled.size(); ++i) {
    const ScheduledRequest& s = scheduled.scheduled[i];
    const Request& r = *s.request;
    SpanDelimiterRows delimiters;
    slice_image_rows_.clear();
    if (!r.images.empty()) {
      const std::vector<std::vector<float>>& rows = image_rows_[r.id];
      for (const std::vector<float>& image : rows) slice_image_rows_.push_back(image.data());
      delimiters = {model_.vision->image_start(), model_.vision->image_newline(),
                    model_.vision->image_end()};
    }
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
                             .main_hidden = options_.record_main_hidden,
                             .images = r.images,
                             .image_rows = slice_image_rows_,
                             .delimiters = delimiters},
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

void ModelRunner::EncodeImagesOfStep(const SchedulerOutput& scheduled) {
  struct Pending {
    std::vector<float>* rows;
    const RequestImage* image;
  };
  std::vector<Pending> pending;
  for (const ScheduledRequest& s : scheduled.scheduled) {
    const Request& r = *s.request;
    if (r.images.empty()) continue;
    std::vector<std::vector<float>>& rows = image_rows_[r.id];
    rows.resize(r.images.size());
    const int64_t end = r.num_computed + s.num_new_tokens;
    for (size_t k = 0; k < r.images.size(); ++k) {
      const RequestImage& image = r.images[k];
      if (!rows[k].empty() || image.span_start >= end ||
          image.span_start + image.plan.span_length <= r.num_computed) {
        continue;
      }
      if (image.embeddings != nullptr) {
        rows[k] = *image.embeddings;
      } else {
        pending.push_back({&rows[k], &image});
      }
    }
  }
  if (pending.empty()) return;
  const auto begin = std::chrono::steady_clock::now();
  const VisionConfig& v = model_.vision->config();
  std::vector<ImagePlan> plans;
  int64_t num_patches = 0, num_tokens = 0;
  for (const Pending& p : pending) {
    plans.push_back(p.image->plan);
    num_patches += p.image->plan.num_patches();
    num_tokens += p.image->plan.num_image_tokens();
  }
  std::vector<float> patches(static_cast<size_t>(num_patches * v.patch_values()));
  int64_t offset = 0;
  for (const Pending& p : pending) {
    const ImagePlan& plan = p.image->plan;
    const int64_t size = plan.num_patches() * v.patch_values();
    ExtractPatches(*p.image->canvas, plan.bw, plan.bh, v.patch_size,
                   std::span<float>(patches).subspan(static_cast<size_t>(offset), size));
    offset += size;
  }
  const int64_t dim = model_.config().hidden_size;
  std::vector<float> rows(static_cast<size_t>(num_tokens * dim));
  vision_arena_.Reset();
  ExecContext ctx{ctx_.pool, vision_arena_, ctx_.numerics};
  model_.vision->Encode(patches, plans, rows, ctx);
  offset = 0;
  for (const Pending& p : pending) {
    const int64_t size = p.image->plan.num_image_tokens() * dim;
    p.rows->assign(rows.begin() + offset, rows.begin() + offset + size);
    offset += size;
  }
  vision_stats_.images_encoded += pending.size();
  vision_stats_.encode_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

void ModelRunner::ReleaseImages(uint64_t request_id) { image_rows_.erase(request_id); }

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

#include "engine/engine.h"

#include <algorithm>
#include <random>
#include <utility>

#include "engram/row_ids.h"
#include "model/layer_plan.h"

namespace dsv41 {
namespace {

// The prefix-cache identity (serving.md §4): blocks are only shared between requests of the same
// model shape, cache profile and block size.
uint64_t CacheIdentity(const ModelConfig& c, const CachePlan& plan) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  };
  for (int64_t v :
       {int64_t{c.vocab_size}, int64_t{c.hidden_size}, int64_t{c.num_hidden_layers},
        int64_t{c.head_dim}, int64_t{c.sliding_window}, int64_t{plan.options.block_tokens},
        static_cast<int64_t>(plan.options.profile)}) {
    mix(static_cast<uint64_t>(v));
  }
  for (int32_t r : c.compress_ratios) mix(static_cast<uint64_t>(r));
  return h;
}

}  // namespace

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

Result<std::unique_ptr<Engine>> Engine::Create(const LoadedTextModel& model,
                                               const EngineOptions& options, ThreadPool& pool) {
  const ModelConfig& config = model.config();
  if (options.max_num_seqs < 1 || options.max_num_batched_tokens < 1) {
    return InvalidArgumentError("--max-num-seqs %d and --max-num-batched-tokens %d must be >= 1",
                                options.max_num_seqs, options.max_num_batched_tokens);
  }
  if (options.max_model_len < 0) {
    return InvalidArgumentError("--max-model-len %lld must be >= 0",
                                static_cast<long long>(options.max_model_len));
  }
  std::unique_ptr<Engine> engine(new Engine(model, options, pool));
  CachePlanOptions plan_options;
  plan_options.block_tokens = options.block_tokens;
  plan_options.profile = options.profile;
  DSV41_ASSIGN_OR_RETURN(CachePlan plan, PlanCache(config, model.weights->plan(), plan_options));
  engine->plan_ = std::make_unique<CachePlan>(std::move(plan));
  const uint64_t budget = options.num_blocks > 0
                              ? uint64_t{options.num_blocks} * engine->plan_->bytes_per_block_id
                              : options.kv_cache_bytes;
  const PoolSizing sizing = SizePool(*engine->plan_, budget, config);
  const int64_t model_len =
      options.max_model_len > 0
          ? std::min<int64_t>(options.max_model_len, config.max_position_embeddings)
          : config.max_position_embeddings;
  EngineLayout& layout = engine->layout_;
  layout.block_tokens = options.block_tokens;
  layout.bytes_per_block_id = engine->plan_->bytes_per_block_id;
  layout.num_blocks = sizing.num_block_ids;
  layout.kv_cache_bytes = sizing.used_bytes;
  layout.max_request_tokens = std::min(model_len, sizing.max_context_tokens);
  if (layout.max_request_tokens < 2) {
    return InvalidArgumentError(
        "a KV cache of %u blocks (%llu bytes) holds no request: raise --kv-cache-gib or "
        "--num-blocks",
        sizing.num_block_ids, static_cast<unsigned long long>(budget));
  }
  engine->storage_ = std::make_unique<KvCacheStorage>(*engine->plan_, config, layout.num_blocks);
  engine->kv_ = std::make_unique<KvCacheManager>(
      *engine->plan_, layout.num_blocks,
      KvManagerOptions{.enable_prefix_caching = options.enable_prefix_caching,
                       .identity = CacheIdentity(config, *engine->plan_)});
  engine->scheduler_ = std::make_unique<Scheduler>(
      *engine->kv_, SchedulerOptions{.max_num_seqs = options.max_num_seqs,
                                     .max_num_batched_tokens = options.max_num_batched_tokens});
  engine->eos_token_id_ = model.eos_token_id();
  if (model.engram.num_layers() > 0 && model.engram_storage != nullptr) {
    std::vector<const EngramRowSource*> tables;
    for (int32_t slot = 0; slot < model.engram_storage->num_tables(); ++slot) {
      tables.push_back(&model.engram_storage->table(slot));
    }
    engine->engram_prefetch_ =
        std::make_unique<EngramPrefetcher>(std::move(tables), model.engram.num_cols(),
                                           options.max_num_batched_tokens, options.engram_prefetch);
  }
  return engine;
}

Result<uint64_t> Engine::AddRequest(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                                    const AddRequestOptions& options) {
  const int32_t vocab = model_.config().vocab_size;
  DSV41_RETURN_IF_ERROR(ValidateSamplingParams(params, vocab));
  if (prompt_ids.empty()) return InvalidArgumentError("the prompt has no tokens");
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    if (prompt_ids[i] < 0 || prompt_ids[i] >= vocab) {
      return InvalidArgumentError("prompt token %zu: id %d outside [0, %d)", i, prompt_ids[i],
                                  vocab);
    }
  }
  const int64_t prompt_len = static_cast<int64_t>(prompt_ids.size());
  if (prompt_len + 1 > layout_.max_request_tokens) {
    return InvalidArgumentError(
        "a prompt of %lld tokens does not fit: requests may hold at most %lld tokens (prompt and "
        "output; the KV pool of %u blocks and --max-model-len allow that much)",
        static_cast<long long>(prompt_len), static_cast<long long>(layout_.max_request_tokens),
        layout_.num_blocks);
  }
  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->arrival = next_arrival_++;
  r->params = params;
  r->seed = params.seed.has_value() ? *params.seed : std::random_device{}();
  r->prompt_logits = options.prompt_logits;
  r->num_prompt_tokens = static_cast<int32_t>(prompt_len);
  r->max_total_tokens = std::min(layout_.max_request_tokens, prompt_len + params.max_tokens);
  std::vector<int32_t> classes(prompt_ids.size(), 0);
  if (model_.engram.num_layers() > 0) {
    DSV41_RETURN_IF_ERROR(MapTokensToEngramClasses(model_.token_map, prompt_ids, classes));
  }
  DSV41_RETURN_IF_ERROR(r->history.Append(prompt_ids, classes));
  r->detokenizer = std::make_unique<StreamingDetokenizer>(
      *model_.tokenizer, DecodeOptions{.skip_special_tokens = params.skip_special_tokens});
  r->stop_matcher = std::make_unique<StopStringMatcher>(params.stop);
  stats_.prompt_tokens += static_cast<uint64_t>(prompt_len);
  const uint64_t id = r->id;
  scheduler_->Add(r.get());
  requests_.emplace(id, std::move(r));
  return id;
}

Status Engine::Abort(uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    return NotFoundError("request %llu is not running or waiting",
                         static_cast<unsigned long long>(request_id));
  }
  RequestOutput out;
  out.request_id = request_id;
  out.num_prompt_tokens = it->second->num_prompt_tokens;
  out.finish = FinishReason::kAbort;
  scheduler_->Remove(it->second.get());
  requests_.erase(it);
  pending_outputs_.push_back(std::move(out));
  return Status();
}

Status Engine::BuildBatch(const SchedulerOutput& scheduled, Batch& batch) {
  const size_t num_cols = static_cast<size_t>(model_.engram.num_cols());
  const size_t num_engram = static_cast<size_t>(model_.engram.num_layers());
  int32_t row = 0;
  for (const ScheduledRequest& s : scheduled.scheduled) {
    const Request& r = *s.request;
    const int32_t start = static_cast<int32_t>(r.num_computed);
    const int32_t n = s.num_new_tokens;
    batch.requests.push_back(BatchRequest{
        .first_row = row, .num_tokens = n, .start_pos = start, .block_tables = r.blocks.tables});
    const std::span<const int32_t> ids = r.history.token_ids().subspan(start, n);
    batch.token_ids.insert(batch.token_ids.end(), ids.begin(), ids.end());
    if (num_engram > 0) {
      const size_t begin = batch.engram_rows.size();
      batch.engram_rows.resize(begin + static_cast<size_t>(n) * num_engram * num_cols);
      ComputeEngramRows(model_.engram, r.history.class_ids(), r.history.dead(), start, n,
                        std::span<int64_t>(batch.engram_rows).subspan(begin));
    }
    const bool completes = start + n == r.num_tokens();
    for (int32_t t = 0; t < n; ++t) {
      const bool last = completes && t == n - 1;
      if (last || (r.prompt_logits && start + t < r.num_prompt_tokens)) {
        batch.logit_rows.push_back(row + t);
      }
    }
    row += n;
  }
  return Status();
}

void Engine::BuildEngramLookAhead(const SchedulerOutput& scheduled) {
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

void Engine::FailStep(const SchedulerOutput& scheduled, const Status& error,
                      std::vector<RequestOutput>& outputs) {
  ++stats_.failed_steps;
  for (const ScheduledRequest& s : scheduled.scheduled) {
    Request& r = *s.request;
    RequestOutput out;
    out.request_id = r.id;
    out.num_prompt_tokens = r.num_prompt_tokens;
    out.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
    Finish(r, FinishReason::kError, out, /*flush_text=*/false,
           StrFormat("request %llu: the step failed: %s", static_cast<unsigned long long>(r.id),
                     error.ToString().c_str()));
    outputs.push_back(std::move(out));
    scheduler_->Remove(&r);
    requests_.erase(r.id);
  }
}

void Engine::Finish(Request& r, FinishReason reason, RequestOutput& out, bool flush_text,
                    std::string error) {
  if (flush_text) {
    // Flush the text held back for an incomplete character or a possible stop string.
    const StopStringMatcher::Result tail = r.stop_matcher->Push(r.detokenizer->Finish());
    out.text += tail.emit;
    if (!tail.stopped) out.text += r.stop_matcher->Flush();
  }
  r.finish = reason;
  r.status = RequestStatus::kFinished;
  out.finish = reason;
  out.error = std::move(error);
}

void Engine::Sample(Request& r, std::span<const float> logits, RequestOutput& out) {
  const int64_t pos = r.num_tokens();
  const SampledToken s =
      SampleToken(logits, r.params, r.seed, pos, r.prompt_ids(), r.output_ids(), sampler_scratch_);
  const int32_t token = s.token_id;
  int32_t class_id = 0;
  if (model_.engram.num_layers() > 0) {
    const Status mapped =
        MapTokensToEngramClasses(model_.token_map, std::span(&token, 1), std::span(&class_id, 1));
    if (!mapped.ok()) return Finish(r, FinishReason::kError, out, false, mapped.ToString());
  }
  const Status appended = r.history.Append(std::span(&token, 1), std::span(&class_id, 1));
  if (!appended.ok()) return Finish(r, FinishReason::kError, out, false, appended.ToString());
  ++stats_.generation_tokens;
  out.new_token_ids.push_back(token);
  if (r.params.logprobs > 0) out.logprobs.push_back(s);

  const std::vector<int32_t>& stop_ids = r.params.stop_token_ids;
  if ((!r.params.ignore_eos && token == eos_token_id_) ||
      std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    return Finish(r, FinishReason::kStop, out);  // the stop token's text is not emitted
  }
  const StopStringMatcher::Result text = r.stop_matcher->Push(r.detokenizer->Push(token));
  out.text += text.emit;
  if (text.stopped) return Finish(r, FinishReason::kStop, out, /*flush_text=*/false);
  if (r.num_tokens() >= r.max_total_tokens) Finish(r, FinishReason::kLength, out);
}

Result<std::vector<RequestOutput>> Engine::Step() {
  std::vector<RequestOutput> outputs = std::move(pending_outputs_);
  pending_outputs_.clear();
  const SchedulerOutput scheduled = scheduler_->Schedule();
  stats_.num_preemptions = scheduler_->num_preemptions();
  if (scheduled.scheduled.empty()) return outputs;
  ++stats_.num_steps;

  Batch batch;
  DSV41_RETURN_IF_ERROR(BuildBatch(scheduled, batch));
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  std::vector<float> logits(batch.logit_rows.size() * vocab);
  arena_.Reset();
  if (engram_prefetch_ != nullptr) {
    // Step start (serving.md §8.4): every scheduled token's rows, and the next chunks' rows.
    BuildEngramLookAhead(scheduled);
    engram_prefetch_->StartStep(batch.engram_rows, batch.num_tokens(), engram_ahead_);
  }
  const Status forward =
      model_.model->Forward(batch, storage_->view(), logits, ctx_, nullptr, engram_prefetch_.get());
  if (engram_prefetch_ != nullptr) {
    engram_prefetch_->FinishStep();  // none of this step's reads is in flight any more
    if (!forward.ok() && engram_prefetch_->step_failed()) {
      // The storage failed, not the batch: fail these requests, keep serving.
      FailStep(scheduled, forward, outputs);
      return outputs;
    }
  }
  DSV41_RETURN_IF_ERROR(forward);
  scheduler_->Update(scheduled);

  size_t logit_idx = 0;
  std::vector<Request*> finished;
  for (size_t i = 0; i < scheduled.scheduled.size(); ++i) {
    Request& r = *scheduled.scheduled[i].request;
    const BatchRequest& br = batch.requests[i];
    RequestOutput out;
    out.request_id = r.id;
    out.num_prompt_tokens = r.num_prompt_tokens;
    out.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
    const bool completes = r.num_computed == r.num_tokens();
    while (logit_idx < batch.logit_rows.size() &&
           batch.logit_rows[logit_idx] < br.first_row + br.num_tokens) {
      const std::span<const float> row =
          std::span<const float>(logits).subspan(logit_idx * vocab, vocab);
      const int32_t pos = br.start_pos + (batch.logit_rows[logit_idx] - br.first_row);
      if (r.prompt_logits && pos < r.num_prompt_tokens) {
        out.prompt_logits.insert(out.prompt_logits.end(), row.begin(), row.end());
      }
      ++logit_idx;
      if (completes && pos == r.num_tokens() - 1) Sample(r, row, out);
    }
    if (r.status == RequestStatus::kFinished) finished.push_back(&r);
    if (!out.new_token_ids.empty() || !out.prompt_logits.empty() ||
        out.finish != FinishReason::kNone) {
      outputs.push_back(std::move(out));
    }
  }
  for (Request* r : finished) {
    scheduler_->Remove(r);
    requests_.erase(r->id);
  }
  return outputs;
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.prefix_queried_tokens = kv_->stats().queried_tokens;
  s.prefix_hit_tokens = kv_->stats().hit_tokens;
  s.free_blocks = kv_->pool().num_free();
  s.cached_blocks = kv_->pool().num_cached_free();
  s.total_blocks = kv_->pool().num_blocks();
  s.running = scheduler_->num_running();
  s.waiting = scheduler_->num_waiting();
  s.weight_bytes = exec_stats_.weight_bytes;
  s.weight_macs = exec_stats_.weight_macs;
  if (engram_prefetch_ != nullptr) s.engram_fetch = engram_prefetch_->stats();
  if (model_.engram_storage != nullptr) s.engram_store = model_.engram_storage->counters();
  return s;
}

Status Engine::CheckConsistency() const { return kv_->CheckConsistency(); }

}  // namespace dsv41

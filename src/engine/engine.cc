#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "base/check.h"
#include "config/layer_plan.h"
#include "engram/row_ids.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

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
    case FinishReason::kStopString:
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
                                               const EngineOptions& options, ThreadPool& pool,
                                               Communicator& comm) {
  const ModelConfig& config = model.config();
  if (options.max_num_seqs < 1 || options.max_num_batched_tokens < 1) {
    return InvalidArgumentError("--max-num-seqs %d and --max-num-batched-tokens %d must be >= 1",
                                options.max_num_seqs, options.max_num_batched_tokens);
  }
  if (options.max_model_len < 0) {
    return InvalidArgumentError("--max-model-len %lld must be >= 0",
                                static_cast<long long>(options.max_model_len));
  }
  const SpeculativeOptions& spec = options.speculative;
  DSV41_RETURN_IF_ERROR(ValidateSpeculativeOptions(spec, config.dspark_block_size));
  if (spec.method == SpeculativeMethod::kDspark && model.dspark == nullptr) {
    return InvalidArgumentError(
        "--speculative dspark: the model was loaded without its DSpark stages (mtp.*)");
  }
  if (spec.method == SpeculativeMethod::kOff && spec.custom_drafter) {
    return InvalidArgumentError("a custom drafter needs a --speculative method");
  }
  // A model holds the experts of the rank it was loaded for; it runs only as that rank.
  if (model.weights->shard() != RankShard{comm.rank(), comm.size()}) {
    return InvalidArgumentError(
        "the model was loaded for rank %d of %d, the engine runs as rank %d of %d",
        model.weights->shard().rank, model.weights->shard().num_ranks, comm.rank(), comm.size());
  }
  std::vector<std::byte> open;
  if (comm.size() > 1) DSV41_RETURN_IF_ERROR(EncodeEngineOptions(options, open));
  std::unique_ptr<Engine> engine(new Engine(model, options, comm));
  DSV41_RETURN_IF_ERROR(engine->Build(pool));
  // The others make theirs once rank 0's is built (theirs then builds alike).
  if (engine->distributed() && engine->leads()) engine->SendCommand(LeaderCommand::kOpen, open);
  return engine;
}

Engine::~Engine() {
  if (distributed() && leads()) SendCommand(LeaderCommand::kClose, {});
}

Status Engine::Build(ThreadPool& pool) {
  const ModelConfig& config = model_.config();
  const SpeculativeOptions& spec = options_.speculative;
  CachePlanOptions plan_options;
  plan_options.block_tokens = options_.block_tokens;
  plan_options.profile = options_.profile;
  // serving.md §3.3, §3.6: the draft windows (G_DRAFT) and a ring that survives K rejected rows.
  plan_options.dspark = spec.method == SpeculativeMethod::kDspark;
  plan_options.num_speculative_tokens =
      spec.method == SpeculativeMethod::kOff ? 0 : spec.num_speculative_tokens;
  seeds_drafts_ = plan_options.dspark;
  DSV41_ASSIGN_OR_RETURN(CachePlan plan, PlanCache(config, model_.weights->plan(), plan_options));
  plan_ = std::make_unique<CachePlan>(std::move(plan));
  const uint64_t budget = options_.num_blocks > 0
                              ? uint64_t{options_.num_blocks} * plan_->bytes_per_block_id
                              : options_.kv_cache_bytes;
  const PoolSizing sizing = SizePool(*plan_, budget, config);
  const int64_t model_len =
      options_.max_model_len > 0
          ? std::min<int64_t>(options_.max_model_len, config.max_position_embeddings)
          : config.max_position_embeddings;
  layout_.block_tokens = options_.block_tokens;
  layout_.bytes_per_block_id = plan_->bytes_per_block_id;
  layout_.num_blocks = sizing.num_block_ids;
  layout_.kv_cache_bytes = sizing.used_bytes;
  layout_.max_request_tokens = std::min(model_len, sizing.max_context_tokens);
  if (layout_.max_request_tokens < 2) {
    return InvalidArgumentError(
        "a KV cache of %u blocks (%llu bytes) holds no request: raise --kv-cache-gib or "
        "--num-blocks",
        sizing.num_block_ids, static_cast<unsigned long long>(budget));
  }
  runner_ = std::make_unique<ModelRunner>(
      model_, *plan_, layout_.num_blocks,
      ModelRunnerOptions{.max_num_batched_tokens = options_.max_num_batched_tokens,
                         .numerics = options_.numerics,
                         .official_index_key_slot = options_.official_index_key_slot,
                         .engram_prefetch = options_.engram_prefetch,
                         .record_main_hidden = seeds_drafts_,
                         .roofline = options_.roofline},
      pool, comm_);
  kv_ = std::make_unique<KvCacheManager>(
      *plan_, layout_.num_blocks,
      KvManagerOptions{.enable_prefix_caching = options_.enable_prefix_caching,
                       .identity = CacheIdentity(config, *plan_)});
  scheduler_ = std::make_unique<Scheduler>(
      *kv_, SchedulerOptions{.max_num_seqs = options_.max_num_seqs,
                             .max_num_batched_tokens = options_.max_num_batched_tokens});
  proposer_ = std::make_unique<DraftProposer>(model_, options_.speculative, options_.block_tokens,
                                              *runner_);
  eos_token_id_ = model_.eos_token_id();
  const size_t positions =
      spec.method == SpeculativeMethod::kOff ? 0 : static_cast<size_t>(spec.num_speculative_tokens);
  stats_.drafts_at_position.assign(positions, 0);
  stats_.accepted_at_position.assign(positions, 0);
  return Status();
}

Result<uint64_t> ClaimRequestId(uint64_t requested, bool requested_in_use, uint64_t& next_id) {
  if (requested == 0) return next_id++;
  if (requested_in_use) {
    return InvalidArgumentError("request id %llu is already in use",
                                static_cast<unsigned long long>(requested));
  }
  next_id = std::max(next_id, requested + 1);
  return requested;
}

Status Engine::CheckRequestImages(std::span<const int32_t> prompt_ids,
                                  std::span<const RequestImage> images) const {
  if (images.empty()) return OkStatus();
  // The other ranks run the steps from rank 0's tokens and rows; image rows do not travel yet.
  if (distributed()) {
    return InvalidArgumentError("images run in one process, not under mpirun (docs/multinode.md)");
  }
  // Even aligner rows given as embeddings need the tower's START / NEWLINE / END rows.
  if (model_.vision == nullptr) {
    return InvalidArgumentError("image input: the model has no vision tower");
  }
  const ModelConfig& config = model_.config();
  int64_t next_free = 0;
  for (size_t k = 0; k < images.size(); ++k) {
    const RequestImage& image = images[k];
    const ImagePlan& plan = image.plan;
    const int64_t begin = image.span_start;
    const int64_t end = begin + plan.span_length;
    if (plan.span_length != plan.token_rows * (plan.token_cols + 1) + 2 || plan.token_rows < 1 ||
        plan.token_cols < 1) {
      return InvalidArgumentError("image %zu: a span of %d positions for %d x %d tokens", k,
                                  plan.span_length, plan.token_cols, plan.token_rows);
    }
    if (begin < next_free || end > static_cast<int64_t>(prompt_ids.size())) {
      return InvalidArgumentError(
          "image %zu: span [%lld, %lld) overlaps the previous one or leaves the %zu-token prompt",
          k, static_cast<long long>(begin), static_cast<long long>(end), prompt_ids.size());
    }
    for (int64_t p = begin; p < end; ++p) {
      if (prompt_ids[static_cast<size_t>(p)] != config.image_token_id) {
        return InvalidArgumentError(
            "image %zu: prompt position %lld holds %d, not the image "
            "token %d",
            k, static_cast<long long>(p), prompt_ids[static_cast<size_t>(p)],
            config.image_token_id);
      }
    }
    next_free = end;
    const size_t rows = static_cast<size_t>(plan.num_image_tokens());
    if (image.embeddings != nullptr) {
      if (image.embeddings->size() != rows * static_cast<size_t>(config.hidden_size)) {
        return InvalidArgumentError("image %zu: %zu embedding values, want %zu x %d", k,
                                    image.embeddings->size(), rows, config.hidden_size);
      }
      continue;
    }
    const VisionConfig& v = model_.vision->config();
    if (image.canvas == nullptr || plan.bw % v.patch_size != 0 || plan.bh % v.patch_size != 0 ||
        plan.patch_cols * v.patch_size != plan.bw || plan.patch_rows * v.patch_size != plan.bh ||
        plan.token_cols != (plan.patch_cols + v.downsample_ratio - 1) / v.downsample_ratio ||
        plan.token_rows != (plan.patch_rows + v.downsample_ratio - 1) / v.downsample_ratio ||
        image.canvas->size() != static_cast<size_t>(plan.bw) * plan.bh * 3) {
      return InvalidArgumentError("image %zu: its plan or canvas does not fit the vision tower", k);
    }
  }
  return OkStatus();
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
  DSV41_RETURN_IF_ERROR(CheckRequestImages(prompt_ids, options.images));
  DSV41_ASSIGN_OR_RETURN(const uint64_t id,
                         ClaimRequestId(options.request_id, IdInUse(options.request_id), next_id_));
  auto r = std::make_unique<Request>();
  r->id = id;
  r->arrival = next_arrival_++;
  r->params = params;
  r->seed = params.seed.has_value() ? *params.seed : std::random_device{}();
  r->prompt_logits = options.prompt_logits;
  r->num_prompt_tokens = static_cast<int32_t>(prompt_len);
  r->max_total_tokens = std::min(layout_.max_request_tokens, prompt_len + params.max_tokens);
  // A verify step appends its drafts for the forward: room for them past the last position.
  r->history.Reserve(r->max_total_tokens + options_.speculative.num_speculative_tokens);
  std::vector<int32_t> classes(prompt_ids.size(), 0);
  if (model_.engram.num_layers() > 0) {
    DSV41_RETURN_IF_ERROR(MapTokensToEngramClasses(model_.token_map, prompt_ids, classes));
  }
  // vision.md §11: every span position is dead for Engram, whatever its token id.
  std::vector<uint8_t> dead;
  if (!options.images.empty()) {
    dead.assign(prompt_ids.size(), 0);
    for (const RequestImage& image : options.images) {
      const int64_t end = int64_t{image.span_start} + image.plan.span_length;
      std::fill(dead.begin() + image.span_start, dead.begin() + end, uint8_t{1});
      r->content_keys.push_back({image.span_start, end, image.content_key});
      stats_.image_span_tokens += static_cast<uint64_t>(image.plan.span_length);
    }
    r->images = options.images;
  }
  DSV41_RETURN_IF_ERROR(r->history.Append(prompt_ids, classes, dead));
  const SpeculativeOptions& spec = options_.speculative;
  r->guard = DraftGuard(DraftGuard::Options{.min_acceptance = spec.min_acceptance,
                                            .initial_pause_steps = spec.guard_initial_pause_steps,
                                            .min_pause_steps = spec.guard_min_pause_steps});
  stats_.prompt_tokens += static_cast<uint64_t>(prompt_len);
  if (distributed() && leads()) {
    AdmittedRequest& admitted = header_.added.emplace_back();
    admitted.id = id;
    admitted.prompt_ids.assign(r->prompt_ids().begin(), r->prompt_ids().end());
    admitted.params = params;
    admitted.params.seed = r->seed;
    admitted.prompt_logits = options.prompt_logits;
  }
  scheduler_->Add(r.get());
  requests_.emplace(id, std::move(r));
  return id;
}

bool Engine::IdInUse(uint64_t id) const {
  return requests_.contains(id) ||
         std::any_of(pending_outputs_.begin(), pending_outputs_.end(),
                     [id](const RequestOutput& out) { return out.request_id == id; });
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
  Remove(*it->second);
  pending_outputs_.push_back(std::move(out));
  if (distributed() && leads()) header_.aborted.push_back(request_id);
  return Status();
}

void Engine::FailStep(const SchedulerOutput& scheduled, const Status& error,
                      std::vector<RequestOutput>& outputs, size_t& num_outputs) {
  ++stats_.failed_steps;
  for (const ScheduledRequest& s : scheduled.scheduled) {
    Request& r = *s.request;
    RequestOutput& out = NextOutput(outputs, num_outputs++);
    out.request_id = r.id;
    out.num_prompt_tokens = r.num_prompt_tokens;
    out.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
    Finish(r, FinishReason::kError, out,
           StrFormat("request %llu: the step failed: %s", static_cast<unsigned long long>(r.id),
                     error.ToString().c_str()));
    Remove(r);
  }
}

void Engine::Finish(Request& r, FinishReason reason, RequestOutput& out, std::string error) {
  r.finish = reason;
  r.status = RequestStatus::kFinished;
  out.finish = reason;
  out.error = std::move(error);
}

void Engine::Emit(Request& r, const SampledToken& s, RequestOutput& out) {
  const int32_t token = s.token_id;
  int32_t class_id = 0;
  if (model_.engram.num_layers() > 0) {
    const Status mapped =
        MapTokensToEngramClasses(model_.token_map, std::span(&token, 1), std::span(&class_id, 1));
    if (!mapped.ok()) return Finish(r, FinishReason::kError, out, mapped.ToString());
  }
  const Status appended = r.history.Append(std::span(&token, 1), std::span(&class_id, 1));
  if (!appended.ok()) return Finish(r, FinishReason::kError, out, appended.ToString());
  ++stats_.generation_tokens;
  out.new_token_ids.push_back(token);
  if (r.params.logprobs > 0) out.logprobs.push_back(s);

  const std::vector<int32_t>& stop_ids = r.params.stop_token_ids;
  if ((!r.params.ignore_eos && token == eos_token_id_) ||
      std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    out.ends_with_stop_token = true;
    return Finish(r, FinishReason::kStop, out);
  }
  if (r.num_tokens() >= r.max_total_tokens) Finish(r, FinishReason::kLength, out);
}

int32_t Engine::Verify(Request& r, std::span<const float> logits, std::span<const int32_t> drafts,
                       RequestOutput& out) {
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  const int32_t num_drafts = static_cast<int32_t>(drafts.size());
  int32_t accepted = 0;
  for (int32_t j = 0; j <= num_drafts && r.status != RequestStatus::kFinished; ++j) {
    const VerifyRow row{.logits = logits.subspan(j * vocab, vocab),
                        .params = &r.params,
                        .seed = r.seed,
                        .position = r.num_tokens(),
                        .prompt_ids = r.prompt_ids(),
                        .output_ids = r.output_ids(),
                        .draft = j < num_drafts ? drafts[j] : -1};
    const RowVerdict verdict = NextVerdict(row);
    const int64_t before = r.num_tokens();
    Emit(r, verdict.token, out);
    // An accepted (and emitted) draft is the token the forward already computed here.
    if (!verdict.accepted || r.num_tokens() == before) break;
    ++accepted;
    ++stats_.accepted_at_position[j];
  }
  return accepted;
}

Result<std::vector<RequestOutput>> Engine::Step() {
  std::vector<RequestOutput> outputs;
  DSV41_RETURN_IF_ERROR(Step(outputs));
  return outputs;
}

Status Engine::Step(std::vector<RequestOutput>& outputs) {
  const auto step_start = std::chrono::steady_clock::now();
  struct StepTimer {
    std::chrono::steady_clock::time_point start;
    double& total_ms;
    ~StepTimer() {
      total_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
    }
  } timer{step_start, step_ms_};
  size_t num_outputs = 0;
  for (RequestOutput& pending : pending_outputs_) {
    NextOutput(outputs, num_outputs) = std::move(pending);
    ++num_outputs;
  }
  pending_outputs_.clear();
  // Only the first num_outputs slots are this step's; the rest keep their buffers for the next.
  struct TrimOutputs {
    std::vector<RequestOutput>& outputs;
    size_t& n;
    ~TrimOutputs() { outputs.resize(n); }
  } trim{outputs, num_outputs};
  SchedulerOutput& scheduled = scheduled_;
  scheduler_->Schedule(scheduled);
  stats_.num_preemptions = scheduler_->num_preemptions();
  if (distributed()) SyncSchedule(scheduled);
  if (scheduled.scheduled.empty()) return Status();
  ++stats_.num_steps;

  DSV41_RETURN_IF_ERROR(AppendScheduledDrafts(scheduled));
  runner_->BuildBatch(scheduled, committed_);
  for (const ScheduledRequest& s : scheduled.scheduled) {
    const int64_t start = s.request->num_computed;
    stats_.prompt_tokens_computed += static_cast<uint64_t>(std::max<int64_t>(
        0, std::min<int64_t>(start + s.num_new_tokens, s.request->num_prompt_tokens) - start));
  }
  const Status forward = runner_->Run(scheduled);
  if (!forward.ok() && runner_->engram_storage_failed()) {
    // The storage failed, not the batch: the drafts leave the histories, these requests fail,
    // the engine serves on.
    TruncateToCommitted(scheduled);
    FailStep(scheduled, forward, outputs, num_outputs);
    return Status();
  }
  DSV41_RETURN_IF_ERROR(forward);
  if (options_.digest_logits) logits_digest_ = LogitsDigest(logits_digest_, runner_->logits());

  if (distributed() && !leads()) ReceiveTokens();
  kept_.scheduled.assign(scheduled.scheduled.begin(), scheduled.scheduled.end());
  kept_.num_tokens = scheduled.num_tokens;
  finished_.clear();
  ready_.clear();
  size_t logit_idx = 0;
  bool any_verify = false;
  for (size_t i = 0; i < scheduled.scheduled.size(); ++i) {
    RequestOutput& out = NextOutput(outputs, num_outputs);
    any_verify |= UpdateRequest(i, logit_idx, out);
    if (!out.new_token_ids.empty() || !out.prompt_logits.empty() ||
        out.finish != FinishReason::kNone) {
      ++num_outputs;  // kept; else the slot is reused
    }
  }
  if (distributed() && leads()) SendTokens();
  // Before Update offers the completed blocks to the prefix cache.
  DSV41_RETURN_IF_ERROR(proposer_->SeedStaged());
  scheduler_->Update(kept_);
  if (any_verify) ++stats_.num_verify_steps;
  if (options_.speculative.method != SpeculativeMethod::kOff) {
    DSV41_RETURN_IF_ERROR(proposer_->ProposeDrafts(ready_));
  }
  for (Request* r : finished_) Remove(*r);
  return Status();
}

Status Engine::AppendScheduledDrafts(const SchedulerOutput& scheduled) {
  const size_t num_scheduled = scheduled.scheduled.size();
  committed_.resize(num_scheduled);
  if (drafts_.size() < num_scheduled) drafts_.resize(num_scheduled);
  for (size_t i = 0; i < num_scheduled; ++i) {
    const ScheduledRequest& s = scheduled.scheduled[i];
    Request& r = *s.request;
    committed_[i] = r.num_tokens();
    const int64_t num_drafts = r.num_computed + s.num_new_tokens - committed_[i];
    if (num_drafts > 0) {
      DSV41_CHECK(num_drafts <= static_cast<int64_t>(r.draft_tokens.size()),
                  "request %llu: %lld drafts scheduled, %zu proposed",
                  static_cast<unsigned long long>(r.id), static_cast<long long>(num_drafts),
                  r.draft_tokens.size());
      drafts_[i].assign(r.draft_tokens.begin(), r.draft_tokens.begin() + num_drafts);
      DSV41_RETURN_IF_ERROR(r.history.Append(
          drafts_[i], std::span<const int32_t>(r.draft_classes).subspan(0, num_drafts)));
    } else {
      drafts_[i].clear();
    }
    r.draft_tokens.clear();
    r.draft_classes.clear();
  }
  return Status();
}

void Engine::TruncateToCommitted(const SchedulerOutput& scheduled) {
  for (size_t i = 0; i < scheduled.scheduled.size(); ++i) {
    const Request& r = *scheduled.scheduled[i].request;
    DSV41_CHECK(scheduled.scheduled[i].request->history.Truncate(committed_[i]).ok(),
                "history of request %llu", static_cast<unsigned long long>(r.id));
  }
}

bool Engine::UpdateRequest(size_t i, size_t& logit_idx, RequestOutput& out) {
  Request& r = *scheduled_.scheduled[i].request;
  const Batch& batch = runner_->batch();
  const std::span<const float> logits = runner_->logits();
  const size_t vocab = static_cast<size_t>(model_.config().vocab_size);
  const BatchRequest& br = batch.requests[i];
  const int64_t start = br.start_pos;
  const int64_t end = start + br.num_tokens;
  const std::vector<int32_t>& drafts = drafts_[i];
  DSV41_CHECK(r.history.Truncate(committed_[i]).ok(), "history of request %llu",
              static_cast<unsigned long long>(r.id));
  out.request_id = r.id;
  out.num_prompt_tokens = r.num_prompt_tokens;
  out.num_cached_prompt_tokens = r.num_cached_prompt_tokens;
  const bool completes = end == committed_[i] + static_cast<int64_t>(drafts.size());
  size_t first_verify = 0;  // logit index of the row at position committed − 1
  while (logit_idx < batch.logit_rows.size() &&
         batch.logit_rows[logit_idx] < br.first_row + br.num_tokens) {
    const int64_t pos = start + (batch.logit_rows[logit_idx] - br.first_row);
    if (r.prompt_logits && pos < r.num_prompt_tokens) {
      const std::span<const float> row = logits.subspan(logit_idx * vocab, vocab);
      out.prompt_logits.insert(out.prompt_logits.end(), row.begin(), row.end());
    }
    if (pos == committed_[i] - 1) first_verify = logit_idx;
    ++logit_idx;
  }
  bool verified = false;
  int64_t kept_end = end;
  if (completes) {
    const int32_t num_drafts = static_cast<int32_t>(drafts.size());
    const int32_t accepted =
        Verify(r, logits.subspan(first_verify * vocab, (num_drafts + 1) * vocab), drafts, out);
    if (num_drafts > 0) {
      verified = true;
      ++stats_.num_verifies;
      stats_.num_draft_tokens += static_cast<uint64_t>(num_drafts);
      stats_.num_accepted_tokens += static_cast<uint64_t>(accepted);
      for (int32_t j = 0; j < num_drafts; ++j) ++stats_.drafts_at_position[j];
      const uint64_t pauses = r.guard.num_pauses();
      r.guard.OnVerify(num_drafts, accepted);
      stats_.num_guard_pauses += r.guard.num_pauses() - pauses;
    }
    // Rows are valid up to the last accepted draft: the rest is rolled back (model.md §11.5).
    kept_end = std::min(end, committed_[i] + accepted);
    if (kept_end < end) kv_->Truncate(r.blocks, kept_end);
  }
  kept_.scheduled[i].num_new_tokens = static_cast<int32_t>(kept_end - start);
  // model.md §11.3: every kept position seeds the draft windows (rejected ones never do).
  if (seeds_drafts_) {
    const size_t width = static_cast<size_t>(runner_->main_hidden_width());
    proposer_->StageSeedRows(
        r,
        runner_->main_hidden().subspan(static_cast<size_t>(br.first_row) * width,
                                       static_cast<size_t>(kept_end - start) * width),
        start, kept_end);
  }
  if (r.status == RequestStatus::kFinished) {
    finished_.push_back(&r);
  } else if (completes) {
    ready_.push_back(&r);
  }
  return verified;
}

void Engine::Remove(Request& r) {
  runner_->ReleaseImages(r.id);
  scheduler_->Remove(&r);
  proposer_->Forget(r.id);
  requests_.erase(r.id);
}

RequestOutput& Engine::NextOutput(std::vector<RequestOutput>& outputs, size_t n) const {
  RequestOutput& out = n == outputs.size() ? outputs.emplace_back() : outputs[n];
  // A step emits up to 1 + K tokens per request.
  const size_t tokens = 1 + static_cast<size_t>(options_.speculative.num_speculative_tokens);
  out.new_token_ids.reserve(tokens);
  out.request_id = 0;
  out.new_token_ids.clear();
  out.logprobs.clear();
  out.prompt_logits.clear();
  out.finish = FinishReason::kNone;
  out.ends_with_stop_token = false;
  out.error.clear();
  out.num_prompt_tokens = 0;
  out.num_cached_prompt_tokens = 0;
  return out;
}

EngineStats Engine::stats() const {
  EngineStats s;
  ReadStats(s);
  return s;
}

void Engine::ReadStats(EngineStats& s) const {
  s = stats_;
  s.prefix_queried_tokens = kv_->stats().queried_tokens;
  s.prefix_hit_tokens = kv_->stats().hit_tokens;
  s.free_blocks = kv_->pool().num_free();
  s.cached_blocks = kv_->pool().num_cached_free();
  s.total_blocks = kv_->pool().num_blocks();
  s.running = scheduler_->num_running();
  s.waiting = scheduler_->num_waiting();
  s.weight_bytes = runner_->exec_stats().weight_bytes;
  s.weight_macs = runner_->exec_stats().weight_macs;
  s.weight_roofline_seconds = runner_->exec_stats().roofline_seconds;
  s.num_draft_forwards = proposer_->stats().num_draft_forwards;
  s.num_seed_calls = proposer_->stats().num_seed_calls;
  s.num_seeded_rows = proposer_->stats().num_seeded_rows;
  runner_->ReadEngramFetchStats(s.engram_fetch);
  s.images_encoded = runner_->vision_stats().images_encoded;
  s.vision_encode_seconds = runner_->vision_stats().encode_seconds;
  if (model_.engram_storage != nullptr) s.engram_store = model_.engram_storage->counters();
  s.logits_digest = options_.digest_logits ? logits_digest_ : 0;
}

Status Engine::CheckConsistency() const { return kv_->CheckConsistency(); }

Result<RequestState> Engine::InspectRequest(uint64_t request_id) const {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    return NotFoundError("request %llu is not running or waiting",
                         static_cast<unsigned long long>(request_id));
  }
  return ReadRequestState(runner_->cache(), *plan_, *it->second, model_.config().sliding_window);
}

double EngineStats::acceptance_rate() const {
  return num_draft_tokens == 0 ? 0.0 : static_cast<double>(num_accepted_tokens) / num_draft_tokens;
}

double EngineStats::mean_accepted_length() const {
  return num_verifies == 0 ? 0.0 : 1.0 + static_cast<double>(num_accepted_tokens) / num_verifies;
}

std::vector<double> EngineStats::acceptance_rate_at_position() const {
  std::vector<double> rates(drafts_at_position.size(), 0.0);
  for (size_t i = 0; i < rates.size(); ++i) {
    if (drafts_at_position[i] > 0) {
      rates[i] = static_cast<double>(accepted_at_position[i]) / drafts_at_position[i];
    }
  }
  return rates;
}

}  // namespace dsv41

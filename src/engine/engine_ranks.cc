// The multi-process side of the engine core (engine.h, docs/multinode.md): what rank 0 sends the
// other ranks around each step and how they follow it. The forward's own collectives (Engram
// rows, routed experts) are the model's and the prefetcher's.

#include <chrono>

#include "base/wire.h"
#include "engine/engine.h"

namespace dsv41 {
namespace {

// The block tables of the scheduled requests, in order: equal on every rank of a run whose
// schedules agree.
uint64_t HashBlockTables(const SchedulerOutput& scheduled) {
  uint64_t h = kLogitsDigestSeed;
  for (const ScheduledRequest& s : scheduled.scheduled) {
    for (const std::vector<uint32_t>& table : s.request->blocks.tables) {
      for (uint32_t id : table) h = (h ^ id) * 0x100000001b3ull;
      h = (h ^ (uint64_t{1} << 40) ^ table.size()) * 0x100000001b3ull;  // the table's end
    }
  }
  return h;
}

std::string DescribeSchedule(const std::vector<ScheduledEntry>& entries) {
  std::string out;
  for (const ScheduledEntry& e : entries) {
    out += StrFormat("%s(request %llu, %d tokens at %lld)", out.empty() ? "" : ", ",
                     static_cast<unsigned long long>(e.request_id), e.num_new_tokens,
                     static_cast<long long>(e.start));
  }
  return out.empty() ? "nothing" : out;
}

}  // namespace

Status EncodeEngineOptions(const EngineOptions& o, std::vector<std::byte>& out) {
  const SpeculativeOptions& spec = o.speculative;
  if (spec.custom_drafter || spec.acceptance != ExactAcceptance) {
    return InvalidArgumentError(
        "a custom drafter or acceptance rule cannot run on several ranks (they are functions "
        "rank 0 cannot send)");
  }
  out.clear();
  WireWriter w(out);
  w.Put(o.block_tokens);
  w.Put(o.profile);
  w.Put(o.kv_cache_bytes);
  w.Put(o.num_blocks);
  w.Put(o.max_num_seqs);
  w.Put(o.max_num_batched_tokens);
  w.Put(o.max_model_len);
  w.Put<uint8_t>(o.enable_prefix_caching);
  w.Put(o.numerics);
  w.Put<uint8_t>(o.official_index_key_slot);
  w.Put<uint8_t>(o.engram_prefetch);
  w.Put<uint8_t>(o.digest_logits);
  w.Put(o.roofline.peak_flops_per_second);
  w.Put(o.roofline.read_bytes_per_second);
  w.Put(spec.method);
  w.Put(spec.num_speculative_tokens);
  w.Put(spec.min_acceptance);
  w.Put(spec.guard_initial_pause_steps);
  w.Put(spec.guard_min_pause_steps);
  w.Put(spec.prompt_lookup_min);
  w.Put(spec.prompt_lookup_max);
  w.Put(spec.confidence_threshold);
  w.Put<uint8_t>(spec.defer_paused_seeding);
  return OkStatus();
}

Status DecodeEngineOptions(std::span<const std::byte> bytes, EngineOptions& o) {
  WireReader in(bytes, "rank 0's engine options");
  SpeculativeOptions& spec = o.speculative;
  uint8_t prefix_caching = 0, index_key_slot = 0, prefetch = 0, digest = 0, defer = 0;
  DSV41_RETURN_IF_ERROR(in.Get(o.block_tokens, "block size"));
  DSV41_RETURN_IF_ERROR(in.Get(o.profile, "profile"));
  DSV41_RETURN_IF_ERROR(in.Get(o.kv_cache_bytes, "kv cache bytes"));
  DSV41_RETURN_IF_ERROR(in.Get(o.num_blocks, "blocks"));
  DSV41_RETURN_IF_ERROR(in.Get(o.max_num_seqs, "max_num_seqs"));
  DSV41_RETURN_IF_ERROR(in.Get(o.max_num_batched_tokens, "max_num_batched_tokens"));
  DSV41_RETURN_IF_ERROR(in.Get(o.max_model_len, "max_model_len"));
  DSV41_RETURN_IF_ERROR(in.Get(prefix_caching, "prefix caching"));
  DSV41_RETURN_IF_ERROR(in.Get(o.numerics, "numerics"));
  DSV41_RETURN_IF_ERROR(in.Get(index_key_slot, "index key slot"));
  DSV41_RETURN_IF_ERROR(in.Get(prefetch, "engram prefetch"));
  DSV41_RETURN_IF_ERROR(in.Get(digest, "logits digest"));
  DSV41_RETURN_IF_ERROR(in.Get(o.roofline.peak_flops_per_second, "roofline peak"));
  DSV41_RETURN_IF_ERROR(in.Get(o.roofline.read_bytes_per_second, "roofline bandwidth"));
  DSV41_RETURN_IF_ERROR(in.Get(spec.method, "speculative method"));
  DSV41_RETURN_IF_ERROR(in.Get(spec.num_speculative_tokens, "speculative tokens"));
  DSV41_RETURN_IF_ERROR(in.Get(spec.min_acceptance, "min acceptance"));
  DSV41_RETURN_IF_ERROR(in.Get(spec.guard_initial_pause_steps, "guard pause"));
  DSV41_RETURN_IF_ERROR(in.Get(spec.guard_min_pause_steps, "guard pause"));
  DSV41_RETURN_IF_ERROR(in.Get(spec.prompt_lookup_min, "prompt lookup min"));
  DSV41_RETURN_IF_ERROR(in.Get(spec.prompt_lookup_max, "prompt lookup max"));
  DSV41_RETURN_IF_ERROR(in.Get(spec.confidence_threshold, "confidence threshold"));
  DSV41_RETURN_IF_ERROR(in.Get(defer, "deferred seeding"));
  o.enable_prefix_caching = prefix_caching != 0;
  o.official_index_key_slot = index_key_slot != 0;
  o.engram_prefetch = prefetch != 0;
  o.digest_logits = digest != 0;
  spec.defer_paused_seeding = defer != 0;
  return in.Finish();
}

void Engine::SendCommand(LeaderCommand command, std::span<const std::byte> payload) {
  EncodeCommand(command, payload, message_);
  comm_.Broadcast(CommKind::kHeader, 0, message_);
}

void Engine::SyncSchedule(const SchedulerOutput& scheduled) {
  std::vector<ScheduledEntry> mine;
  mine.reserve(scheduled.scheduled.size());
  for (const ScheduledRequest& s : scheduled.scheduled) {
    mine.push_back(ScheduledEntry{.request_id = s.request->id,
                                  .start = s.request->num_computed,
                                  .num_new_tokens = s.num_new_tokens});
  }
  const uint64_t tables = HashBlockTables(scheduled);
  if (leads()) {
    ++header_.step;
    header_.scheduled = std::move(mine);
    header_.block_tables_hash = tables;
    std::vector<std::byte> bytes;
    EncodeStepHeader(header_, bytes);
    SendCommand(LeaderCommand::kStep, bytes);
    header_.added.clear();
    header_.aborted.clear();
    return;
  }
  // Equal inputs and equal code give equal schedules; anything else is a bug that would feed
  // the ranks different batches, so the job ends here, before the forward.
  if (mine != header_.scheduled || tables != header_.block_tables_hash) {
    comm_.Abort(
        StrFormat("step %llu: this rank scheduled %s%s, rank 0 scheduled %s: the ranks diverged",
                  static_cast<unsigned long long>(header_.step), DescribeSchedule(mine).c_str(),
                  tables != header_.block_tables_hash ? " (other block tables)" : "",
                  DescribeSchedule(header_.scheduled).c_str()));
  }
}

RowVerdict Engine::NextVerdict(const VerifyRow& row) {
  if (!distributed() || leads()) {
    RowVerdict verdict = options_.speculative.acceptance(row, sampler_scratch_);
    if (distributed()) {
      step_tokens_.push_back(TokenVerdict{.token_id = verdict.token.token_id,
                                          .accepted = static_cast<uint8_t>(verdict.accepted)});
    }
    return verdict;
  }
  if (next_token_ >= step_tokens_.size()) {
    comm_.Abort(
        StrFormat("step %llu: verification wants more than rank 0's %zu tokens: the ranks "
                  "diverged",
                  static_cast<unsigned long long>(header_.step), step_tokens_.size()));
  }
  const TokenVerdict& t = step_tokens_[next_token_++];
  RowVerdict verdict;
  verdict.token.token_id = t.token_id;
  verdict.token.logprob = 0.0f;  // the frontend is rank 0's
  verdict.accepted = t.accepted != 0;
  return verdict;
}

void Engine::ReceiveTokens() {
  comm_.Broadcast(CommKind::kTokens, 0, message_);
  WireReader in(message_, "rank 0's tokens");
  Status decoded = in.GetVector(step_tokens_, "tokens");
  if (decoded.ok()) decoded = in.Finish();
  if (!decoded.ok()) comm_.Abort(decoded.ToString());
  next_token_ = 0;
}

void Engine::SendTokens() {
  message_.clear();
  WireWriter(message_).PutSpan(std::span<const TokenVerdict>(step_tokens_));
  comm_.Broadcast(CommKind::kTokens, 0, message_);
  step_tokens_.clear();
}

Status Engine::FollowStep(const StepHeader& header) {
  header_ = header;
  for (const AdmittedRequest& a : header.added) {
    Result<uint64_t> id =
        AddRequest(a.prompt_ids, a.params,
                   AddRequestOptions{.prompt_logits = a.prompt_logits, .request_id = a.id});
    if (!id.ok()) {
      return id.status().WithPrefix(
          StrFormat("request %llu, which rank 0 admitted", static_cast<unsigned long long>(a.id)));
    }
  }
  for (uint64_t id : header.aborted) {
    DSV41_RETURN_IF_ERROR(Abort(id).WithPrefix(
        StrFormat("request %llu, which rank 0 aborted", static_cast<unsigned long long>(id))));
  }
  std::vector<RequestOutput>& outputs = follower_outputs_;
  DSV41_RETURN_IF_ERROR(Step(outputs));
  if (next_token_ != step_tokens_.size()) {
    comm_.Abort(
        StrFormat("step %llu: verification used %zu of rank 0's %zu tokens: the ranks "
                  "diverged",
                  static_cast<unsigned long long>(header.step), next_token_, step_tokens_.size()));
  }
  step_tokens_.clear();
  next_token_ = 0;
  return OkStatus();
}

RankReport Engine::LocalReport() const {
  RankReport r;
  r.rank = comm_.rank();
  r.steps = stats_.num_steps;
  r.step_ms = step_ms_;
  EngramFetchStats fetch;
  runner_->ReadEngramFetchStats(fetch);
  for (double ms : fetch.wait_ms_per_layer) r.engram_wait_ms += ms;
  r.routed_rows = runner_->exec_stats().routed_rows;
  r.routed_rows_busiest_rank = runner_->exec_stats().routed_rows_busiest_rank;
  r.logits_digest = options_.digest_logits ? logits_digest_ : 0;
  r.comm = comm_.counters();
  return r;
}

std::vector<RankReport> Engine::GatherRankReports() {
  if (!distributed()) return {LocalReport()};
  SendCommand(LeaderCommand::kReport, {});
  return AllGatherValue(comm_, CommKind::kSetup, LocalReport());
}

Status RunEngineFollower(const LoadedTextModel& model, ThreadPool& pool, Communicator& comm) {
  std::unique_ptr<Engine> engine;
  std::vector<std::byte> message;
  StepHeader header;
  for (;;) {
    comm.Broadcast(CommKind::kHeader, 0, message);
    LeaderCommand command = LeaderCommand::kShutdown;
    std::span<const std::byte> payload;
    DSV41_RETURN_IF_ERROR(DecodeCommand(message, command, payload));
    switch (command) {
      case LeaderCommand::kOpen: {
        EngineOptions options;
        DSV41_RETURN_IF_ERROR(DecodeEngineOptions(payload, options));
        engine.reset();
        DSV41_ASSIGN_OR_RETURN(engine, Engine::Create(model, options, pool, comm));
        break;
      }
      case LeaderCommand::kStep:
        if (engine == nullptr) return InternalError("rank 0 sent a step without an engine");
        DSV41_RETURN_IF_ERROR(DecodeStepHeader(payload, header));
        DSV41_RETURN_IF_ERROR(engine->FollowStep(header));
        break;
      case LeaderCommand::kReport: {
        RankReport idle;
        idle.rank = comm.rank();
        idle.comm = comm.counters();
        AllGatherValue(comm, CommKind::kSetup, engine != nullptr ? engine->LocalReport() : idle);
        break;
      }
      case LeaderCommand::kClose:
        engine.reset();
        break;
      case LeaderCommand::kShutdown:
        return OkStatus();
    }
  }
}

void ShutDownFollowers(Communicator& comm) {
  if (comm.size() == 1 || comm.rank() != 0) return;
  std::vector<std::byte> message;
  EncodeCommand(LeaderCommand::kShutdown, {}, message);
  comm.Broadcast(CommKind::kHeader, 0, message);
}

}  // namespace dsv41

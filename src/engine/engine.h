#pragma once

// The engine core (serving.md §1, §6; vLLM V1's EngineCore): requests come in as token ids with
// sampling parameters; each Step schedules (Scheduler), runs one forward over the whole flattened
// batch through the paged KV cache (ModelRunner), verifies and samples every request that reached
// the end of its tokens, updates the scheduler, and lets the DraftProposer draft the next step. It
// reports new token ids and finish reasons; the text is the output processor's, on the frontend
// side (engine/output_processor.h). A bad request fails alone; the others keep running.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/communicator.h"
#include "base/exec_context.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/draft_proposer.h"
#include "engine/engine_api.h"
#include "engine/engram_prefetch.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engine/rank_messages.h"
#include "engine/request.h"
#include "engine/request_state.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative.h"
#include "kv/cache_plan.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"

namespace dsv41 {

struct EngineOptions {
  int32_t block_tokens = 128;  // --block-size
  KvProfile profile = KvProfile::kSeed;
  uint64_t kv_cache_bytes = uint64_t{1} << 30;  // --kv-cache-gib
  uint32_t num_blocks = 0;                      // --num-blocks; overrides kv_cache_bytes when > 0
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;  // 0: max_position_embeddings
  bool enable_prefix_caching = true;
  Numerics numerics = Numerics::kFast;  // --numerics: how weight products accumulate
  // --official-index-key-slot: the official reference's index-key slot defect (off: the model;
  // model/index_key_slot.h). Defined per request per forward, so the logits then depend on how
  // the engine splits a request into forwards (prefill chunks, speculative verify steps; cached
  // prefix blocks keep the rows of the forwards that computed them).
  bool official_index_key_slot = false;
  SpeculativeOptions speculative;  // --speculative and its knobs (default off)
  // --engram-prefetch: fetch a step's Engram rows ahead of the forward (off: each Engram layer
  // reads its rows when it needs them; for measurements only).
  bool engram_prefetch = true;
  // Benchmarks: the roofs EngineStats::weight_roofline_seconds is counted at (ExecContext).
  RooflineRates roofline = {};
  // Fold every step's logits into EngineStats::logits_digest (dsv41 bench: each run is also a
  // bit-identity check against another, e.g. one process against several).
  bool digest_logits = false;
};

// The options as rank 0 sends them to the other ranks (LeaderCommand::kOpen). InvalidArgument
// for what cannot travel: a custom drafter or acceptance rule (functions).
Status EncodeEngineOptions(const EngineOptions& options, std::vector<std::byte>& out);
Status DecodeEngineOptions(std::span<const std::byte> bytes, EngineOptions& options);

// What Engine::Create resolved (printed at start-up).
struct EngineLayout {
  int32_t block_tokens = 0;
  size_t bytes_per_block_id = 0;
  uint32_t num_blocks = 0;
  uint64_t kv_cache_bytes = 0;     // num_blocks × bytes_per_block_id
  int64_t max_request_tokens = 0;  // the longest request the pool and max_model_len allow
};

// Engine thread only (the loop that calls Step; the server will queue Submit/Abort into it).
//
// Multi-process runs (`comm` of N > 1 ranks, docs/multinode.md): every rank runs an Engine over
// the same requests, each with its share of the routed experts and Engram rows (the model was
// loaded for its rank). Rank 0's is driven by the frontend as in one process; it sends the
// others its options at Create, its admissions, aborts and schedule with every Step, the tokens
// it sampled after every forward, and a close when destroyed. The other ranks run
// RunEngineFollower, which makes their Engine and feeds it rank 0's commands.
class Engine {
 public:
  // Plans the cache for `model`, allocates the slot buffers once and never resizes them.
  // InvalidArgument naming the option for a bad block size, profile or budget (a pool with no
  // room for even one request), or, with several ranks, options that cannot travel.
  static Result<std::unique_ptr<Engine>> Create(const LoadedTextModel& model,
                                                const EngineOptions& options, ThreadPool& pool,
                                                Communicator& comm = Communicator::SingleProcess());
  // Rank 0 of several: tells the other ranks the engine ends.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineLayout& layout() const { return layout_; }
  const CachePlan& cache_plan() const { return *plan_; }

  // Admits a request: InvalidArgument naming the field for bad sampling parameters, an empty
  // prompt, a token id outside the vocabulary, a prompt that can never fit (naming its length
  // and the limit), or images that do not fit the prompt or the model (CheckRequestImages).
  // Returns the request id.
  Result<uint64_t> AddRequest(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                              const AddRequestOptions& options = {});
  // Ends a request at once and frees its blocks; its last output (finish kAbort) comes with the
  // next Step. NotFound for an id that is not running or waiting.
  Status Abort(uint64_t request_id);
  // One engine step. Returns an output for every request that produced tokens or finished.
  // An error here is a bug or a fault of the whole engine (the forward refused the batch). When
  // the step's Engram rows cannot be read (a read error, a short read), the step's requests end
  // with FinishReason::kError naming the file and tensor, and the engine serves on.
  Result<std::vector<RequestOutput>> Step();
  // The same into `outputs` (resized to this step's outputs). Its elements are reused: passing
  // the same vector every step, a steady-state decode step allocates nothing (unless a request
  // asks for logprobs, whose lists are built per token).
  Status Step(std::vector<RequestOutput>& outputs);
  bool HasUnfinished() const { return !requests_.empty() || !pending_outputs_.empty(); }
  EngineStats stats() const;
  // The same into `out`, reusing its buffers: no allocation once they have grown.
  void ReadStats(EngineStats& out) const;
  // Every block accounted for (free, cached or referenced by exactly the live requests).
  Status CheckConsistency() const;
  // A running or waiting request's history and stored rows (request_state.h), for tests and
  // debugging; NotFound for an unknown id.
  Result<RequestState> InspectRequest(uint64_t request_id) const;

  // Rank 0 of several: every rank's report, in rank order (this one's included). One rank: its own.
  std::vector<RankReport> GatherRankReports();
  // Ranks other than 0: admits and aborts what rank 0's `header` says, then runs the step,
  // checking that it schedules what rank 0 scheduled (the job ends when it does not: the ranks
  // diverged).
  Status FollowStep(const StepHeader& header);
  // This rank's report (GatherRankReports).
  RankReport LocalReport() const;

 private:
  // The images of a request (vision.md §10): spans inside the prompt, in order, disjoint, on the
  // image token; each with a tower and a canvas that fits it, or its own aligner rows.
  // InvalidArgument naming the image otherwise.
  Status CheckRequestImages(std::span<const int32_t> prompt_ids,
                            std::span<const RequestImage> images) const;
  // Whether a live request or an output not yet stepped out holds `id`.
  bool IdInUse(uint64_t id) const;
  Engine(const LoadedTextModel& model, const EngineOptions& options, Communicator& comm)
      : model_(model), options_(options), comm_(comm) {}
  bool distributed() const { return comm_.size() > 1; }
  bool leads() const { return comm_.rank() == 0; }

  // The step's schedule against the other ranks: rank 0 sends the step header (admissions and
  // aborts since the last step, its schedule), the others check their schedule against it.
  void SyncSchedule(const SchedulerOutput& scheduled);
  // The verdict of verify row `row`: rank 0 (or one process) decides it with the acceptance
  // rule and, with several ranks, records it; the other ranks take rank 0's.
  RowVerdict NextVerdict(const VerifyRow& row);
  // After the forward: the other ranks receive the step's tokens before verification, rank 0
  // sends them after.
  void ReceiveTokens();
  void SendTokens();
  // Rank 0: `command` with `payload` to the other ranks.
  void SendCommand(LeaderCommand command, std::span<const std::byte> payload);

  // Plans the cache and sizes the pool (layout_); makes the runner, the KV manager, the scheduler
  // and the proposer over it.
  Status Build(ThreadPool& pool);
  // Appends request `r`'s next token `s` (sampled, or an accepted draft) and applies the stop
  // rules.
  void Emit(Request& r, const SampledToken& s, RequestOutput& out);
  // Verifies the rows of request `r` from its committed length on (model.md §11.5): row j's
  // logits decide the token at committed + j; drafts[j] is accepted or verification stops there.
  // Returns the drafts accepted and emitted.
  int32_t Verify(Request& r, std::span<const float> logits, std::span<const int32_t> drafts,
                 RequestOutput& out);
  // A decode scheduled with drafts verifies them: they join the history for this forward only
  // (Engram rows and the batch read it by position) and leave it before verification. Fills
  // committed_ (each history's length before its drafts) and drafts_.
  Status AppendScheduledDrafts(const SchedulerOutput& scheduled);
  // Takes the drafts out of the histories again.
  void TruncateToCommitted(const SchedulerOutput& scheduled);
  // After the forward, scheduled request i: its prompt logits, verify and sampling, the rollback
  // of rejected rows, the seeding of kept ones; kept_, finished_ and ready_ learn the outcome.
  // logit_idx walks the batch's logit rows. Returns whether it verified drafts.
  bool UpdateRequest(size_t i, size_t& logit_idx, RequestOutput& out);
  // Ends `r` with `reason` (and `error`, with kError).
  void Finish(Request& r, FinishReason reason, RequestOutput& out, std::string error = {});
  // Drops an ended request (scheduler, proposer, the request table).
  void Remove(Request& r);
  // A step whose Engram rows could not be read: its requests end with `error`, their blocks are
  // freed unoffered to the prefix cache.
  void FailStep(const SchedulerOutput& scheduled, const Status& error,
                std::vector<RequestOutput>& outputs, size_t& num_outputs);
  // outputs[n], cleared with its buffers kept (appended when n == outputs.size()).
  RequestOutput& NextOutput(std::vector<RequestOutput>& outputs, size_t n) const;

  const LoadedTextModel& model_;
  EngineOptions options_;
  Communicator& comm_;
  std::unique_ptr<CachePlan> plan_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<DraftProposer> proposer_;
  EngineLayout layout_;
  int32_t eos_token_id_ = -1;
  uint64_t next_id_ = 1;
  uint64_t next_arrival_ = 0;
  std::map<uint64_t, std::unique_ptr<Request>> requests_;
  std::vector<RequestOutput> pending_outputs_;  // aborts since the last Step
  SamplerScratch sampler_scratch_;
  EngineStats stats_;
  bool seeds_drafts_ = false;  // DSpark on: the main forward records main_hidden
  // Reused every step (their capacity kept), so a steady-state step allocates nothing.
  SchedulerOutput scheduled_;
  SchedulerOutput kept_;                      // scheduled_ with the positions verification kept
  std::vector<int64_t> committed_;            // per scheduled request: history length before drafts
  std::vector<std::vector<int32_t>> drafts_;  // per scheduled request: the drafts it verifies
  std::vector<Request*> finished_;
  std::vector<Request*> ready_;  // decodes that may draft for the next step
  // Multi-process runs. Rank 0: what the next step header carries; the others: the header of
  // the step they follow.
  StepHeader header_;
  std::vector<TokenVerdict> step_tokens_;        // the step's tokens in verification order
  size_t next_token_ = 0;                        // the next of them to replay (ranks other than 0)
  std::vector<std::byte> message_;               // reused for every message
  std::vector<RequestOutput> follower_outputs_;  // ranks other than 0: outputs nobody reads
  uint64_t logits_digest_ = kLogitsDigestSeed;
  double step_ms_ = 0;  // wall time inside Step
};

// Ranks other than 0 of a multi-process run: executes rank 0's commands (engines it opens, their
// steps, reports, closes) on `model` until rank 0 shuts the run down. An error is this rank's
// (its engine refused rank 0's options or step): the caller should end the job with it.
Status RunEngineFollower(const LoadedTextModel& model, ThreadPool& pool, Communicator& comm);
// Rank 0: tells the others the run is over (their RunEngineFollower returns). No-op in one
// process.
void ShutDownFollowers(Communicator& comm);

// The Engine behind the interface. The engine must outlive it. Engine thread only.
class EngineBackend final : public GenerationBackend {
 public:
  explicit EngineBackend(Engine& engine) : engine_(engine) {}

  Result<uint64_t> AddRequest(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                              const AddRequestOptions& options) override {
    return engine_.AddRequest(std::move(prompt_ids), params, options);
  }
  Status Abort(uint64_t request_id) override { return engine_.Abort(request_id); }
  Status Step(std::vector<RequestOutput>& outputs) override { return engine_.Step(outputs); }
  bool HasUnfinished() const override { return engine_.HasUnfinished(); }
  void ReadStats(EngineStats& out) const override { engine_.ReadStats(out); }

 private:
  Engine& engine_;
};

}  // namespace dsv41

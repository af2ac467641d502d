#pragma once

// What a frontend (the server, the CLI) sees of the engine: the requests it submits, the outputs
// and stats it reads back, and the backend interface its engine loop drives. It reaches none of
// the model, cache or Engram-tier headers, so the server builds on this alone.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/engram_fetch_stats.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engram/engram_rows.h"
#include "vision/image_plan.h"

namespace dsv41 {

// Why a generation ended. The engine reports kStop (EOS or a stop token id), kLength, kAbort and
// kError; kStopString (a stop string matched the text) is the output processor's
// (engine/output_processor.h), which works on the text the engine never makes.
enum class FinishReason { kNone, kStop, kStopString, kLength, kAbort, kError };

// "", "stop" (kStop and kStopString), "length", "abort", "error" (OpenAI's finish_reason words
// where they exist).
std::string_view FinishReasonName(FinishReason reason);

// Per request, per step.
struct RequestOutput {
  uint64_t request_id = 0;
  std::vector<int32_t> new_token_ids;
  std::vector<SampledToken> logprobs;  // one per new token when params.logprobs > 0
  // With prompt_logits: [rows, vocab] logits of the prompt positions this step computed (and the
  // last prompt position's, which the first token is sampled from).
  std::vector<float> prompt_logits;
  FinishReason finish = FinishReason::kNone;
  // The last new token is the EOS or stop token id that ended the request (kStop): counted as
  // an output token, its text withheld.
  bool ends_with_stop_token = false;
  std::string error;  // with FinishReason::kError
  int32_t num_prompt_tokens = 0;
  int64_t num_cached_prompt_tokens = 0;  // prefix-cache hit
};

struct EngineStats {
  uint64_t num_steps = 0;
  uint64_t num_preemptions = 0;
  uint64_t prompt_tokens = 0;           // admitted
  uint64_t prompt_tokens_computed = 0;  // prefill positions run, chunk by chunk (no cache hits)
  uint64_t generation_tokens = 0;
  uint64_t prefix_queried_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint32_t free_blocks = 0;    // reference count 0, cached or not
  uint32_t cached_blocks = 0;  // free blocks that still hold a prefix hash (evictable hits)
  uint32_t total_blocks = 0;
  int32_t running = 0;
  int32_t waiting = 0;
  // What the forwards read and computed (ExecStats): stored weight bytes, weight-product MACs.
  uint64_t weight_bytes = 0;
  uint64_t weight_macs = 0;
  double weight_roofline_seconds = 0;  // ExecStats::roofline_seconds (EngineOptions::roofline)

  // Speculative decoding (serving.md §7, §11.4). A verify is one request's decode step with at
  // least one draft; its drafts are checked left to right until the first rejection.
  uint64_t num_verifies = 0;
  uint64_t num_draft_tokens = 0;     // drafts verified
  uint64_t num_accepted_tokens = 0;  // of which accepted
  // [i]: verifies that checked a draft at position i of their block, and how many accepted it.
  std::vector<uint64_t> drafts_at_position;
  std::vector<uint64_t> accepted_at_position;
  uint64_t num_verify_steps = 0;    // engine steps whose batch held at least one verify
  uint64_t num_draft_forwards = 0;  // runs of the DSpark draft network (all requests at once)
  uint64_t num_guard_pauses = 0;    // times the acceptance guard paused a request's drafting
  uint64_t num_seed_calls = 0;      // DSpark window seedings (one batched GEMM each)
  uint64_t num_seeded_rows = 0;     // positions they seeded

  // Accepted / verified drafts (0 without drafts).
  double acceptance_rate() const;
  // Tokens a verify emits on average: 1 + accepted drafts per verify (0 without verifies).
  double mean_accepted_length() const;
  // accepted_at_position[i] / drafts_at_position[i] for each position.
  std::vector<double> acceptance_rate_at_position() const;
  // Engram offload (serving.md §8.7): the prefetcher's and the stores' counters.
  EngramFetchStats engram_fetch;
  EngramStoreCounters engram_store;
  uint64_t failed_steps = 0;  // steps whose requests failed because their rows could not be read
  // EngineOptions::digest_logits: every step's logits folded together (LogitsDigest).
  uint64_t logits_digest = 0;
  // Image input (vision.md): images the tower encoded, the time it took, the span positions run.
  uint64_t images_encoded = 0;
  double vision_encode_seconds = 0;
  uint64_t image_span_tokens = 0;  // admitted prompt positions inside image spans
};

// One image of a request (vision.md §10–§12), placed by the frontend: the prompt is already
// expanded (vision/image_span.h), and the image's span of plan.span_length positions, each
// holding the image token id, starts at prompt position span_start. The tower encodes its
// letterbox when a step first reaches the span; or the request brings the aligner rows themselves
// (vLLM's image_embeds, `dsv41 logits --image-embeddings`). Shared, immutable buffers: a frontend
// hands them over without a copy.
struct RequestImage {
  int32_t span_start = 0;
  ImagePlan plan;
  std::shared_ptr<const std::vector<uint8_t>> canvas;    // [bh, bw, 3] (PreparedImage::canvas)
  std::shared_ptr<const std::vector<float>> embeddings;  // or [H · W, hidden_size] aligner rows
  // The prefix-cache key of the span's blocks (ImageSpanKey of the content hash and the plan).
  uint64_t content_key = 0;
};

struct AddRequestOptions {
  bool prompt_logits = false;
  // The images of an expanded prompt, in prompt order.
  std::vector<RequestImage> images = {};
  // The frontend's id for the request (the server's stream id), which its outputs carry: one id
  // space from the HTTP request to the engine's outputs. 0: the backend picks the next free id.
  uint64_t request_id = 0;
};

// The id a backend gives a new request: `requested` when nonzero (InvalidArgument naming it when
// `requested_in_use`: a live request holds it, or an output not yet stepped out), else `next_id`;
// `next_id` moves past the id taken, so the backend's own ids never collide with the frontend's.
Result<uint64_t> ClaimRequestId(uint64_t requested, bool requested_in_use, uint64_t& next_id);

// What the server's engine loop drives (serving.md §1): the engine (EngineBackend, engine.h), or
// a test double that replays scripted output. Engine thread only: the loop calls every method from
// its one thread.
class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // As Engine::AddRequest: the engine's id, or InvalidArgument naming the field.
  virtual Result<uint64_t> AddRequest(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                                      const AddRequestOptions& options) = 0;
  // As Engine::Abort: frees the request's blocks at once; its kAbort output comes with a Step.
  virtual Status Abort(uint64_t request_id) = 0;
  // As Engine::Step(outputs): this step's outputs into `outputs`, whose elements are reused.
  virtual Status Step(std::vector<RequestOutput>& outputs) = 0;
  virtual bool HasUnfinished() const = 0;
  // The engine's counters into `out`, reusing its buffers (as Engine::ReadStats).
  virtual void ReadStats(EngineStats& out) const = 0;
};

}  // namespace dsv41

#pragma once

// The engine-loop thread (serving.md §1, STYLE.md §6): the only thread that touches the backend
// (and so the model, caches and scheduler). HTTP threads submit requests and aborts through a
// queue and read each request's RequestStream; the loop admits, steps, hands every output to its
// stream and records latency metrics. A slow client never stalls a step.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_api.h"
#include "server/metrics.h"
#include "server/request_stream.h"

namespace dsv41 {

struct EngineLoopOptions {
  // Requests admitted at once (queued, waiting or running); the next Submit is refused as
  // overloaded. --max-num-seqs + --max-queue.
  int32_t max_live_requests = 64;
};

// One request for the engine: what Engine::AddRequest takes.
struct Submission {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  AddRequestOptions options;
};

enum class SubmitRefusal { kNone, kOverloaded, kShuttingDown };

// Thread-safe (but Start and Shutdown from one controlling thread).
class EngineLoop {
 public:
  // `backend` and `metrics` outlive the loop.
  EngineLoop(GenerationBackend& backend, ServerMetrics& metrics, EngineLoopOptions options);
  ~EngineLoop();  // Shutdown with no grace when still running
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Starts the loop thread.
  void Start();

  // Queues a request; returns its stream, or nullptr with `refusal` set when the server is at
  // --max-num-seqs + --max-queue live requests (kOverloaded) or shutting down. Never blocks on
  // the engine.
  std::shared_ptr<RequestStream> Submit(Submission submission, SubmitRefusal* refusal);
  // Ends the request of `request_id` (its stream's id; kAbort: a client went away; kStopString: the
  // output processor matched a stop string): the loop aborts it before its next step, freeing its
  // blocks; its stream gets a kAbort output, and the finished-requests metric counts `reason`.
  // A finished or unknown id is ignored.
  void Abort(uint64_t request_id, FinishReason reason);

  // Stops admitting (Submit refuses), lets live requests run up to `grace`, aborts the rest and
  // joins the loop thread. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

  // Requests submitted and not yet finished.
  int32_t num_live() const;

 private:
  struct Pending {
    std::shared_ptr<RequestStream> stream;
    Submission submission;
  };
  // Engine thread only: one admitted request.
  struct Live {
    std::shared_ptr<RequestStream> stream;
    bool has_token = false;
    RequestStream::Clock::time_point last_token;
    bool aborted = false;                              // the backend was told to abort it
    FinishReason abort_reason = FinishReason::kAbort;  // counted when its kAbort output comes
  };

  void Run();
  // Engine thread: hands outputs_ to their streams and records latencies.
  void Dispatch();
  // Engine thread: after a failed step, ends every live request with kError.
  void FailAll(const Status& status);
  void Finished(size_t count);

  GenerationBackend& backend_;
  ServerMetrics& metrics_;
  const EngineLoopOptions options_;

  mutable std::mutex mu_;
  std::condition_variable wake_;      // the loop: work arrived
  std::condition_variable finished_;  // Shutdown: a request finished
  std::vector<Pending> submissions_;  // guarded by mu_
  struct AbortRequest {
    uint64_t request_id = 0;
    FinishReason reason = FinishReason::kAbort;
  };
  std::vector<AbortRequest> aborts_;  // guarded by mu_
  int32_t num_live_ = 0;              // guarded by mu_
  bool shutting_down_ = false;        // guarded by mu_
  bool abort_all_ = false;            // guarded by mu_
  bool stop_ = false;                 // guarded by mu_
  uint64_t next_request_id_ = 1;      // guarded by mu_: stream and engine id at once

  // Engine thread only.
  std::map<uint64_t, Live> live_;  // by request id (the stream's and the engine's)
  // Reused every step (their buffers kept): a steady-state step allocates nothing here.
  std::vector<RequestOutput> outputs_;
  EngineStats stats_;
  std::vector<std::pair<std::shared_ptr<RequestStream>, size_t>> deliveries_;  // output index

  std::thread thread_;
};

}  // namespace dsv41

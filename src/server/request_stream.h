#pragma once

// One request's path between its HTTP thread and the engine loop (serving.md §1: "stream sink"):
// the loop's admission verdict, then the request's outputs step by step until the final one.
// Outputs that arrive before the reader takes them are merged into one (tokens, logprobs
// and prompt logits appended; the latest finish): the reader and the stream swap two buffers, so
// once both have grown, handing an output over allocates nothing on the engine thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "engine/engine_api.h"

namespace dsv41 {

// Thread-safe: the engine loop writes, the request's HTTP thread reads.
class RequestStream {
 public:
  using Clock = std::chrono::steady_clock;

  RequestStream(uint64_t id, Clock::time_point arrival) : id_(id), arrival_(arrival) {}

  // The request's id, the engine's as well (its outputs carry it), for EngineLoop::Abort and logs.
  uint64_t id() const { return id_; }
  Clock::time_point arrival() const { return arrival_; }

  // HTTP thread: blocks until the engine loop admitted the request (ok) or refused it (the
  // engine's InvalidArgument naming the field).
  Status WaitAdmitted();
  // HTTP thread: waits up to `timeout` for output and swaps what arrived (every output since the
  // last Wait, merged) into `out`; pass the same `out` each time to keep both buffers. False when
  // none came in time. After an output with a finish reason no more come.
  bool Wait(RequestOutput& out, std::chrono::milliseconds timeout);

  // Engine loop.
  void Admit();
  void Reject(Status status);
  // Copies `output` into the stream (merged into what the reader has not taken yet).
  void Push(const RequestOutput& output);

 private:
  enum class Admission { kPending, kAdmitted, kRejected };

  const uint64_t id_;
  const Clock::time_point arrival_;
  std::mutex mu_;
  std::condition_variable cv_;
  Admission admission_ = Admission::kPending;  // guarded by mu_
  Status rejection_;                           // guarded by mu_
  RequestOutput pending_;                      // guarded by mu_; valid when has_pending_
  bool has_pending_ = false;                   // guarded by mu_
};

}  // namespace dsv41

#pragma once

// One request's path between its HTTP thread and the engine loop (serving.md §1: "stream sink"):
// the loop's admission verdict, then the request's outputs step by step until the final one.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"

namespace dsv41 {

// Thread-safe: the engine loop writes, the request's HTTP thread reads.
class RequestStream {
 public:
  using Clock = std::chrono::steady_clock;

  RequestStream(uint64_t id, Clock::time_point arrival) : id_(id), arrival_(arrival) {}

  // The server's id of the request (not the engine's), for EngineLoop::Abort and logs.
  uint64_t id() const { return id_; }
  Clock::time_point arrival() const { return arrival_; }

  // HTTP thread: blocks until the engine loop admitted the request (ok) or refused it (the
  // engine's InvalidArgument naming the field).
  Status WaitAdmitted();
  // HTTP thread: waits up to `timeout` for outputs and moves every one that arrived into `out`
  // (in order). False when none came in time. After the output with a finish reason no more come.
  bool Wait(std::vector<RequestOutput>& out, std::chrono::milliseconds timeout);

  // Engine loop.
  void Admit();
  void Reject(Status status);
  void Push(RequestOutput output);

 private:
  enum class Admission { kPending, kAdmitted, kRejected };

  const uint64_t id_;
  const Clock::time_point arrival_;
  std::mutex mu_;
  std::condition_variable cv_;
  Admission admission_ = Admission::kPending;  // guarded by mu_
  Status rejection_;                           // guarded by mu_
  std::vector<RequestOutput> outputs_;         // guarded by mu_
};

}  // namespace dsv41

#pragma once

// The server's Prometheus metrics (serving.md §11.4, prefix dsv41_): request counters and latency
// histograms the HTTP and engine-loop threads record, and the engine's own gauges and counters
// (EngineStats) rendered beside them in the text exposition format.

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_api.h"

namespace dsv41 {

// A cumulative histogram with fixed upper bounds (seconds). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double value);
  // Appends `name`_bucket{le=...}, _sum and _count lines.
  void Render(std::string_view name, std::string_view help, std::string& out) const;
  uint64_t count() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative; the last is +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// Why a request ended in an HTTP error (the `type` label of dsv41_request_errors_total).
enum class RequestErrorType {
  kInvalidRequest,  // 400: malformed JSON, wrong type, bad value, too long
  kAuthentication,  // 401
  kNotFound,        // 404: unknown model or route
  kTooLarge,        // 413: body over --max-request-bytes
  kOverloaded,      // 429 / 529: the waiting queue is full
  kUnavailable,     // 503: loading or shutting down
  kInternal,        // 500: the engine failed the request
};
inline constexpr int kNumRequestErrorTypes = 7;
std::string_view RequestErrorTypeName(RequestErrorType type);

// Thread-safe.
class ServerMetrics {
 public:
  ServerMetrics();

  void CountError(RequestErrorType type);
  // A request that ended with `finish` ("stop", "length", "abort", "error").
  void CountFinished(std::string_view finish);
  void CountMalformedToolOutput();
  Histogram& time_to_first_token() { return ttft_; }
  Histogram& inter_token_latency() { return itl_; }
  Histogram& e2e_latency() { return e2e_; }
  Histogram& step_time() { return step_; }
  uint64_t num_errors(RequestErrorType type) const;

  // The engine's latest numbers (published by the engine loop after each step).
  void PublishEngineStats(const EngineStats& stats);
  EngineStats engine_stats() const;

  // The whole exposition: gauges, counters and histograms, one # HELP / # TYPE pair each.
  std::string RenderPrometheus() const;

 private:
  mutable std::mutex mu_;
  EngineStats engine_;
  std::array<uint64_t, kNumRequestErrorTypes> errors_{};
  std::map<std::string, uint64_t, std::less<>> finished_;  // by finish reason
  uint64_t malformed_tool_outputs_ = 0;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  Histogram step_;
};

}  // namespace dsv41

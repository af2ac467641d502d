#pragma once

// `dsv41 bench serve` (the shape of `vllm bench serve`): drives a running server over HTTP with N
// concurrent clients and a request mix — prompt and output lengths around a mean, and a share of
// multi-turn conversations whose turns re-send the whole history (prefix sharing) — and measures
// request and token throughput and TTFT / TPOT / ITL / end-to-end latency percentiles. Requests
// go to /v1/completions with token-id prompts (exact lengths; ids drawn from the tokenisation of
// a built-in text via /tokenize), streamed with return_token_ids and usage.

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

struct ServeBenchOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string model;         // empty: the first of /v1/models
  int32_t num_prompts = 64;  // requests per concurrency level (conversation turns count each)
  int32_t concurrency = 8;   // clients at once
  int32_t input_len = 128;   // mean prompt tokens of a fresh request (or of a new turn's text)
  int32_t output_len = 32;   // mean output tokens (ignore_eos: exactly this many)
  double range_ratio = 0.0;  // lengths uniform in [len·(1 − r), len·(1 + r)]
  double multi_turn_ratio = 0.25;  // share of requests that belong to multi-turn conversations
  int32_t turns = 3;               // turns per conversation
  uint64_t seed = 0;
};

// Mean and percentiles of one latency, in milliseconds.
struct LatencyStats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};

struct ServeBenchResult {
  int32_t concurrency = 0;
  int32_t num_requests = 0;  // completed
  int32_t num_failed = 0;
  double duration_s = 0;
  double request_throughput = 0;  // completed requests per second
  double output_throughput = 0;   // output tokens per second
  double total_token_throughput = 0;
  double mean_input_tokens = 0;
  double mean_output_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prefix-cache hits the server reported
  LatencyStats ttft, tpot, itl, e2e;
  std::string first_error;  // of the failed requests, if any
};

// Runs one level. IoError when the server cannot be reached or has no model; failed requests are
// counted, not errors.
Result<ServeBenchResult> RunServeBench(const ServeBenchOptions& options);

// Linear-interpolation percentile (numpy's default) of `values` (sorted in place); 0 when empty.
double Percentile(std::vector<double>& values, double q);

}  // namespace dsv41

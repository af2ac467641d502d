#pragma once

// One generation request as the engine tracks it (vLLM V1's Request): its token history (prompt,
// then generated tokens, with their Engram class ids), how many positions its cache holds, its
// block tables, its sampling parameters and why it ended. No text: the output processor
// (engine/output_processor.h) detokenizes and matches stop strings on the frontend side. Engine
// thread only.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/speculative.h"
#include "kv/kv_cache_manager.h"
#include "kv/token_history.h"

namespace dsv41 {

enum class RequestStatus { kWaiting, kRunning, kFinished };

struct Request {
  uint64_t id = 0;
  uint64_t arrival = 0;  // admission order: FCFS and the choice of whom to preempt
  SamplingParams params;
  uint64_t seed = 0;           // params.seed, or one the engine drew at admission
  bool prompt_logits = false;  // return the logits of every prompt position too
  int32_t num_prompt_tokens = 0;
  int64_t max_total_tokens = 0;          // context limit: prompt + outputs never exceed it
  TokenHistory history;                  // prompt then outputs, by absolute position
  int64_t num_computed = 0;              // positions whose cache rows are written
  int64_t num_cached_prompt_tokens = 0;  // prefix-cache hit of the last admission
  RequestBlockTables blocks;
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  // Speculative decoding: the drafts proposed for positions num_tokens() .. (never part of the
  // history: a verify step appends them for its forward only and emits the accepted ones), with
  // their Engram class ids, and the request's acceptance guard.
  std::vector<int32_t> draft_tokens;
  std::vector<int32_t> draft_classes;
  DraftGuard guard{DraftGuard::Options{}};
  // Image input (vision.md §10–§12): the prompt's images in span order, and the prefix-cache keys
  // of their spans (the positions of every span are also dead in the history).
  std::vector<RequestImage> images;
  std::vector<ContentKeyRange> content_keys;

  int64_t num_tokens() const { return history.size(); }
  int32_t num_output_tokens() const {
    return static_cast<int32_t>(history.size()) - num_prompt_tokens;
  }
  std::span<const int32_t> prompt_ids() const {
    return history.token_ids().subspan(0, num_prompt_tokens);
  }
  std::span<const int32_t> output_ids() const {
    return history.token_ids().subspan(num_prompt_tokens);
  }
};

}  // namespace dsv41

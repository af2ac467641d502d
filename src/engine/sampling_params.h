#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// One request's sampling settings, with vLLM's names, meanings and defaults (SamplingParams).
struct SamplingParams {
  float temperature = 1.0f;         // <= 1e-5: greedy
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = 0;                // 0 or -1: all tokens
  float min_p = 0.0f;               // [0, 1]
  std::optional<uint64_t> seed;     // the engine assigns one at admission when absent
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings (non-empty each)
  int32_t max_tokens = 16;        // >= 1
  bool ignore_eos = false;
  int32_t logprobs = 0;  // top-N logprobs to return per token, 0..20
  // Leave added tokens marked `special` (EOS, BOS, ...) out of the streamed text. vLLM defaults to
  // true; the engine keeps them by default because the chat output parser needs </think> and
  // ｜DSML｜ (tokenizer-and-chat.md §4). Stop strings match the text as streamed.
  bool skip_special_tokens = false;
  // With skip_special_tokens, keep those chat markers (DecodeOptions::keep_chat_markers): what
  // the chat endpoints ask for.
  bool keep_chat_markers = false;
};

// Temperatures at or below this sample greedily (argmax), as vLLM's _SAMPLING_EPS.
inline constexpr float kGreedyTemperature = 1e-5f;
// The largest `logprobs` a request may ask for.
inline constexpr int32_t kMaxLogprobs = 20;

// Returns InvalidArgument naming the field and the bad value ("top_p 1.5 is outside (0, 1]") for
// the first field out of its range above (NaN never is in range), a stop token id outside
// [0, vocab_size) or an empty stop string; ok otherwise. vocab_size: the model's vocabulary size.
Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size);

}  // namespace dsv41

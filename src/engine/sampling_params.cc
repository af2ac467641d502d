#include "engine/sampling_params.h"

#include <cmath>
#include <cstddef>

namespace dsv41 {

Status ValidateSamplingParams(const SamplingParams& params, int32_t vocab_size) {
  if (vocab_size <= 0) return InvalidArgumentError("vocab_size %d must be >= 1", vocab_size);
  // Written as "!(in range)" so that NaN, which fails every comparison, is out of range.
  if (!(params.temperature >= 0.0f) || std::isinf(params.temperature)) {
    return InvalidArgumentError("temperature %g must be finite and >= 0",
                                static_cast<double>(params.temperature));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return InvalidArgumentError("top_p %g is outside (0, 1]", static_cast<double>(params.top_p));
  }
  if (params.top_k < -1) {
    return InvalidArgumentError("top_k %d must be -1, 0 (all tokens) or >= 1", params.top_k);
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    return InvalidArgumentError("min_p %g is outside [0, 1]", static_cast<double>(params.min_p));
  }
  if (!(params.presence_penalty >= -2.0f && params.presence_penalty <= 2.0f)) {
    return InvalidArgumentError("presence_penalty %g is outside [-2, 2]",
                                static_cast<double>(params.presence_penalty));
  }
  if (!(params.frequency_penalty >= -2.0f && params.frequency_penalty <= 2.0f)) {
    return InvalidArgumentError("frequency_penalty %g is outside [-2, 2]",
                                static_cast<double>(params.frequency_penalty));
  }
  if (!(params.repetition_penalty > 0.0f) || std::isinf(params.repetition_penalty)) {
    return InvalidArgumentError("repetition_penalty %g must be finite and > 0",
                                static_cast<double>(params.repetition_penalty));
  }
  for (size_t i = 0; i < params.stop_token_ids.size(); ++i) {
    const int32_t id = params.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return InvalidArgumentError("stop_token_ids[%zu] %d is outside [0, %d)", i, id, vocab_size);
    }
  }
  for (size_t i = 0; i < params.stop.size(); ++i) {
    if (params.stop[i].empty()) return InvalidArgumentError("stop[%zu] is an empty string", i);
  }
  if (params.max_tokens < 1) {
    return InvalidArgumentError("max_tokens %d must be >= 1", params.max_tokens);
  }
  if (params.logprobs < 0 || params.logprobs > kMaxLogprobs) {
    return InvalidArgumentError("logprobs %d is outside [0, %d]", params.logprobs, kMaxLogprobs);
  }
  return OkStatus();
}

}  // namespace dsv41

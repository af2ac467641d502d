#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling_params.h"

namespace dsv41 {

// One (token, log-probability) pair of a returned top list.
struct TokenLogprob {
  int32_t token_id;
  float logprob;
};

// The sampled token, its log-probability and the request's top-`logprobs` list.
struct SampledToken {
  int32_t token_id;
  float logprob;  // log-softmax of the penalised logits (before temperature) at token_id
  std::vector<TokenLogprob> top_logprobs;  // highest first, ties to the lower id
};

// Buffers SampleToken reuses across calls (sized to the vocabulary on first use). Its contents
// between calls mean nothing; one scratch per thread. Not thread-safe.
struct SamplerScratch {
  std::vector<float> logits;    // [vocab] penalised
  std::vector<float> scaled;    // [vocab] penalised / temperature
  std::vector<int32_t> counts;  // [vocab] occurrences in output_ids
  std::vector<uint8_t> seen;    // [vocab] 1 when in prompt_ids or output_ids
  std::vector<int32_t> ids;     // candidate token ids
};

// The uniform draw in [0, 1) for (seed, position): a splitmix64-style mix of both, top 53 bits
// times 2^-53. Depends on nothing else, so a token never depends on the batch or the step.
double SamplerUniform(uint64_t seed, int64_t position);

// One request's next token. Pure function of its arguments, so a token never depends on the batch.
// logits: [vocab]. prompt_ids / output_ids: the request's tokens so far (penalties), each in
// [0, vocab). position: the absolute position of the token being sampled; the uniform draw comes
// from SamplerUniform(seed, position) only. params must pass ValidateSamplingParams. scratch:
// reused buffer (no per-call allocation after warm-up beyond the result).
// Order (as vLLM): repetition, frequency and presence penalties on the logits; logprobs as the
// log-softmax (in double) of the penalised logits; greedy argmax (lowest id on ties) when
// temperature <= kGreedyTemperature, else logits / temperature, top_k, top_p, min_p, renormalise
// and draw by inverse CDF over the kept tokens in ascending id order.
SampledToken SampleToken(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                         int64_t position, std::span<const int32_t> prompt_ids,
                         std::span<const int32_t> output_ids, SamplerScratch& scratch);

}  // namespace dsv41

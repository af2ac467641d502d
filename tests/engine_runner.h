#pragma once

// Runs requests through an engine step by step, as the engine tests do: each request added before
// its arrival step, outputs gathered per request, and at the end the block accounting checked.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "engine/output_processor.h"

namespace dsv41 {

// What one request produced.
struct Generated {
  std::vector<int32_t> tokens;
  std::vector<SampledToken> logprobs;
  std::vector<float> prompt_logits;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  int64_t cached_tokens = 0;
};

// `n` token ids drawn uniformly from [3, vocab) by mt19937(seed) (ids 0..2 are BOS, EOS, pad).
inline std::vector<int32_t> RandomPrompt(uint32_t seed, int32_t n, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, vocab - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = id(rng);
  return ids;
}

// Token ids and the bits of every logprob (and top list) equal.
inline bool SameLogprobs(const std::vector<SampledToken>& a, const std::vector<SampledToken>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].token_id != b[i].token_id ||
        std::memcmp(&a[i].logprob, &b[i].logprob, sizeof(float)) != 0 ||
        a[i].top_logprobs.size() != b[i].top_logprobs.size()) {
      return false;
    }
    for (size_t k = 0; k < a[i].top_logprobs.size(); ++k) {
      if (a[i].top_logprobs[k].token_id != b[i].top_logprobs[k].token_id ||
          std::memcmp(&a[i].top_logprobs[k].logprob, &b[i].top_logprobs[k].logprob,
                      sizeof(float)) != 0) {
        return false;
      }
    }
  }
  return true;
}

inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs the requests through one engine; request i is added before step arrival_step[i] (0 when
// missing). `after_step(engine, id of request 0)` runs after every step. Returns each request's
// output, in request order; every block must come back at the end.
inline std::vector<Generated> RunRequests(
    const LoadedTextModel& m, ThreadPool& pool, const EngineOptions& options,
    const std::vector<std::vector<int32_t>>& prompts, const std::vector<SamplingParams>& params,
    std::vector<int32_t> arrival_step = {}, bool prompt_logits = false,
    EngineStats* stats = nullptr,
    const std::function<void(const Engine&, uint64_t)>& after_step = {}) {
  Result<std::unique_ptr<Engine>> engine = Engine::Create(m, options, pool);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return {};
  arrival_step.resize(prompts.size(), 0);
  std::vector<Generated> out(prompts.size());
  std::map<uint64_t, size_t> index_of;
  // Text, stop strings and the finish reason, as a frontend makes them of the engine's outputs.
  std::vector<std::unique_ptr<OutputProcessor>> processors(prompts.size());
  uint64_t first_id = 0;
  size_t added = 0;
  for (int step = 0; added < prompts.size() || (*engine)->HasUnfinished(); ++step) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (arrival_step[i] != step) continue;
      Result<uint64_t> id = (*engine)->AddRequest(
          prompts[i], params[i], AddRequestOptions{.prompt_logits = prompt_logits});
      EXPECT_TRUE(id.ok()) << id.status().ToString();
      if (!id.ok()) return out;
      if (i == 0) first_id = *id;
      index_of[*id] = i;
      processors[i] =
          std::make_unique<OutputProcessor>(TextProcessorOptions(*m.tokenizer, params[i]));
      ++added;
    }
    Result<std::vector<RequestOutput>> outputs = (*engine)->Step();
    EXPECT_TRUE(outputs.ok()) << outputs.status().ToString();
    if (!outputs.ok()) return out;
    for (const RequestOutput& o : *outputs) {
      OutputProcessor& p = *processors[index_of.at(o.request_id)];
      p.Push(o);
      if (p.needs_abort()) {
        EXPECT_TRUE((*engine)->Abort(o.request_id).ok());
      }
    }
    if (after_step) after_step(**engine, first_id);
    EXPECT_LT(step, 100000);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (processors[i] == nullptr) continue;
    const OutputProcessor& p = *processors[i];
    out[i] = Generated{.tokens = p.token_ids(),
                       .logprobs = p.logprobs(),
                       .prompt_logits = p.prompt_logits(),
                       .text = p.content(),
                       .finish = p.finish(),
                       .cached_tokens = p.cached_tokens()};
  }
  EXPECT_TRUE((*engine)->CheckConsistency().ok());
  const EngineStats s = (*engine)->stats();
  EXPECT_EQ(s.free_blocks, s.total_blocks) << "every block comes back";
  if (stats != nullptr) *stats = s;
  return out;
}

}  // namespace dsv41

#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>

#include "base/check.h"

namespace dsv41 {
namespace {

// splitmix64's finaliser (Stafford's variant 13): a bijection that spreads every input bit.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Orders token ids by value, highest first, the lower id first on equal values.
struct HigherFirst {
  const float* values;
  bool operator()(int32_t a, int32_t b) const {
    if (values[a] != values[b]) return values[a] > values[b];
    return a < b;
  }
};

// Applies the penalties to scratch.logits in place, as vLLM's apply_penalties (fp32 arithmetic).
void ApplyPenalties(const SamplingParams& params, std::span<const int32_t> prompt_ids,
                    std::span<const int32_t> output_ids, SamplerScratch& scratch) {
  const bool repetition = params.repetition_penalty != 1.0f;
  const bool additive = params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  if (!repetition && !additive) return;
  const int32_t vocab = static_cast<int32_t>(scratch.logits.size());
  scratch.counts.assign(scratch.logits.size(), 0);
  scratch.seen.assign(scratch.logits.size(), 0);
  for (const int32_t id : prompt_ids) {
    DSV41_CHECK(id >= 0 && id < vocab, "prompt token %d outside [0, %d)", id, vocab);
    scratch.seen[id] = 1;
  }
  for (const int32_t id : output_ids) {
    DSV41_CHECK(id >= 0 && id < vocab, "output token %d outside [0, %d)", id, vocab);
    scratch.seen[id] = 1;
    ++scratch.counts[id];
  }
  const float rp = params.repetition_penalty;
  for (int32_t id = 0; id < vocab; ++id) {
    float x = scratch.logits[id];
    if (repetition && scratch.seen[id]) x = x > 0.0f ? x / rp : x * rp;
    const int32_t count = scratch.counts[id];
    if (count > 0) {
      x -= params.frequency_penalty * static_cast<float>(count);
      x -= params.presence_penalty;
    }
    scratch.logits[id] = x;
  }
}

// The log-softmax of the penalised logits, in double.
struct LogSoftmax {
  int32_t argmax = 0;  // the highest logit, lowest id on ties
  double log_sum_exp = 0.0;

  float LogprobOf(const float* penalised, int32_t id) const {
    return static_cast<float>(static_cast<double>(penalised[id]) - log_sum_exp);
  }
};

LogSoftmax ComputeLogSoftmax(const float* penalised, int32_t vocab) {
  LogSoftmax result;
  for (int32_t id = 1; id < vocab; ++id) {
    if (penalised[id] > penalised[result.argmax]) result.argmax = id;
  }
  const double max_logit = penalised[result.argmax];
  DSV41_CHECK(std::isfinite(max_logit), "max logit %g is not finite", max_logit);
  double sum = 0.0;
  for (int32_t id = 0; id < vocab; ++id)
    sum += std::exp(static_cast<double>(penalised[id]) - max_logit);
  result.log_sum_exp = max_logit + std::log(sum);
  return result;
}

// The `num_top` highest penalised logits' log-probabilities, highest first, ties to the lower id.
void FillTopLogprobs(const float* penalised, int32_t vocab, const LogSoftmax& log_softmax,
                     int32_t num_top, SamplerScratch& scratch, SampledToken& result) {
  scratch.ids.resize(vocab);
  std::iota(scratch.ids.begin(), scratch.ids.end(), 0);
  std::partial_sort(scratch.ids.begin(), scratch.ids.begin() + num_top, scratch.ids.end(),
                    HigherFirst{penalised});
  result.top_logprobs.reserve(num_top);
  for (int32_t i = 0; i < num_top; ++i) {
    result.top_logprobs.push_back(
        {scratch.ids[i], log_softmax.LogprobOf(penalised, scratch.ids[i])});
  }
}

// A token's unnormalised probability after temperature, relative to the highest one.
struct ScaledWeight {
  const float* scaled;
  double max_scaled;
  double operator()(int32_t id) const {
    return std::exp(static_cast<double>(scaled[id]) - max_scaled);
  }
};

// Leaves in scratch.ids the candidates top_k, top_p and min_p keep, from all ids ascending (the
// order they are left in is not defined).
void FilterCandidates(const SamplingParams& params, int32_t vocab, const ScaledWeight& weight_of,
                      SamplerScratch& scratch) {
  const float* scaled = weight_of.scaled;
  scratch.ids.resize(vocab);
  std::iota(scratch.ids.begin(), scratch.ids.end(), 0);
  size_t num_kept = static_cast<size_t>(vocab);
  bool sorted = false;  // ids[0, num_kept) sorted by HigherFirst{scaled}

  // top_k: the k highest scaled logits, ties to the lower id.
  if (params.top_k > 0 && params.top_k < vocab) {
    num_kept = static_cast<size_t>(params.top_k);
    std::partial_sort(scratch.ids.begin(), scratch.ids.begin() + num_kept, scratch.ids.end(),
                      HigherFirst{scaled});
    sorted = true;
  }
  // top_p over the renormalised top-k distribution: the smallest prefix (highest probability
  // first, ties to the lower id) whose mass reaches top_p; all of them if rounding never does.
  if (params.top_p < 1.0f) {
    if (!sorted) {
      std::sort(scratch.ids.begin(), scratch.ids.begin() + num_kept, HigherFirst{scaled});
      sorted = true;
    }
    double total = 0.0;
    for (size_t i = 0; i < num_kept; ++i) total += weight_of(scratch.ids[i]);
    const double target = static_cast<double>(params.top_p) * total;
    double mass = 0.0;
    for (size_t i = 0; i < num_kept; ++i) {
      mass += weight_of(scratch.ids[i]);
      if (mass >= target) {
        num_kept = i + 1;
        break;
      }
    }
  }
  // min_p: drop tokens whose probability is below min_p times the highest one (a ratio, so the
  // same before or after renormalising); the highest always stays.
  scratch.ids.resize(num_kept);
  if (params.min_p > 0.0f) {
    const double min_p = params.min_p;
    std::erase_if(scratch.ids, [&](int32_t id) { return weight_of(id) < min_p; });
  }
  DSV41_CHECK(!scratch.ids.empty(), "no token survived the filters");
}

// Inverse CDF over the kept tokens in ascending id order: the first whose cumulative weight
// exceeds u times the total (the renormalisation, without dividing every weight). Sorts `ids`.
int32_t DrawByInverseCdf(std::vector<int32_t>& ids, const ScaledWeight& weight_of, double u) {
  std::sort(ids.begin(), ids.end());
  double total = 0.0;
  for (const int32_t id : ids) total += weight_of(id);
  const double target = u * total;
  int32_t chosen = ids.back();  // when rounding leaves the running sum short of target
  double cumulative = 0.0;
  for (const int32_t id : ids) {
    cumulative += weight_of(id);
    if (target < cumulative) {
      chosen = id;
      break;
    }
  }
  return chosen;
}

}  // namespace

double SamplerUniform(uint64_t seed, int64_t position) {
  // Two rounds so that nearby (seed, position) pairs share no structure: the seed is mixed alone
  // first, then offset by the position times an odd constant (Weyl step) and mixed again.
  const uint64_t key = Mix64(seed + 0x9E3779B97F4A7C15ull);
  const uint64_t bits = Mix64(
      key ^ (static_cast<uint64_t>(position) * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

SampledToken SampleToken(std::span<const float> logits, const SamplingParams& params, uint64_t seed,
                         int64_t position, std::span<const int32_t> prompt_ids,
                         std::span<const int32_t> output_ids, SamplerScratch& scratch) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  DSV41_CHECK(vocab > 0, "empty logits");
  scratch.logits.assign(logits.begin(), logits.end());
  ApplyPenalties(params, prompt_ids, output_ids, scratch);
  const float* penalised = scratch.logits.data();
  const LogSoftmax log_softmax = ComputeLogSoftmax(penalised, vocab);

  SampledToken result;
  const int32_t num_top = std::min(params.logprobs, vocab);
  if (num_top > 0) FillTopLogprobs(penalised, vocab, log_softmax, num_top, scratch, result);

  if (params.temperature <= kGreedyTemperature) {
    result.token_id = log_softmax.argmax;
    result.logprob = log_softmax.LogprobOf(penalised, log_softmax.argmax);
    return result;
  }

  // Temperature. Dividing by a positive temperature keeps the order, so the argmax stays the
  // highest scaled logit.
  scratch.scaled.resize(vocab);
  float* scaled = scratch.scaled.data();
  for (int32_t id = 0; id < vocab; ++id) scaled[id] = penalised[id] / params.temperature;
  const ScaledWeight weight_of{scaled, scaled[log_softmax.argmax]};
  FilterCandidates(params, vocab, weight_of, scratch);
  const int32_t chosen = DrawByInverseCdf(scratch.ids, weight_of, SamplerUniform(seed, position));
  result.token_id = chosen;
  result.logprob = log_softmax.LogprobOf(penalised, chosen);
  return result;
}

}  // namespace dsv41

#include "engine/speculative.h"

#include <algorithm>
#include <string>

namespace dsv41 {

std::string_view SpeculativeMethodName(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kOff:
      return "off";
    case SpeculativeMethod::kDspark:
      return "dspark";
    case SpeculativeMethod::kNgram:
      return "ngram";
  }
  return "off";
}

Result<SpeculativeMethod> ParseSpeculativeMethod(std::string_view name) {
  for (SpeculativeMethod m :
       {SpeculativeMethod::kOff, SpeculativeMethod::kDspark, SpeculativeMethod::kNgram}) {
    if (name == SpeculativeMethodName(m)) return m;
  }
  return InvalidArgumentError("--speculative '%.*s': want dspark, ngram or off",
                              static_cast<int>(name.size()), name.data());
}

RowVerdict ExactAcceptance(const VerifyRow& row, SamplerScratch& scratch) {
  RowVerdict verdict;
  verdict.token = SampleToken(row.logits, *row.params, row.seed, row.position, row.prompt_ids,
                              row.output_ids, scratch);
  verdict.accepted = row.draft >= 0 && verdict.token.token_id == row.draft;
  return verdict;
}

Status ValidateSpeculativeOptions(const SpeculativeOptions& options, int32_t block_size) {
  if (options.method == SpeculativeMethod::kOff) return Status();
  const int32_t max_k =
      options.method == SpeculativeMethod::kDspark ? block_size : kMaxNgramSpeculativeTokens;
  if (options.num_speculative_tokens < 1 || options.num_speculative_tokens > max_k) {
    return InvalidArgumentError(
        "--num-speculative-tokens %d: want 1 .. %d for --speculative %s%s",
        options.num_speculative_tokens, max_k,
        std::string(SpeculativeMethodName(options.method)).c_str(),
        options.method == SpeculativeMethod::kDspark ? " (the draft block size)" : "");
  }
  if (!(options.min_acceptance >= 0.0 && options.min_acceptance <= 1.0)) {
    return InvalidArgumentError("--speculative-min-acceptance %g is outside [0, 1]",
                                options.min_acceptance);
  }
  if (!(options.confidence_threshold >= 0.0 && options.confidence_threshold <= 1.0)) {
    return InvalidArgumentError("--speculative-confidence %g is outside [0, 1]",
                                options.confidence_threshold);
  }
  if (options.guard_initial_pause_steps < 0 || options.guard_min_pause_steps < 1) {
    return InvalidArgumentError(
        "speculative guard pauses: initial %d, min %d steps (want >= 0 and >= 1)",
        options.guard_initial_pause_steps, options.guard_min_pause_steps);
  }
  if (options.prompt_lookup_min < 1 || options.prompt_lookup_max < options.prompt_lookup_min) {
    return InvalidArgumentError(
        "--prompt-lookup-min %d / --prompt-lookup-max %d: want 1 <= min <= max",
        options.prompt_lookup_min, options.prompt_lookup_max);
  }
  return Status();
}

std::vector<int32_t> ProposeNgram(std::span<const int32_t> token_ids, int32_t min_n, int32_t max_n,
                                  int32_t max_tokens) {
  const int64_t len = static_cast<int64_t>(token_ids.size());
  if (max_tokens < 1) return {};
  for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
    const std::span<const int32_t> suffix = token_ids.subspan(len - n);
    // An occurrence starting at j ends at j + n − 1 <= len − 2, so a token follows it.
    for (int64_t j = 0; j + n <= len - 1; ++j) {
      if (!std::equal(suffix.begin(), suffix.end(), token_ids.begin() + j)) continue;
      const int64_t begin = j + n;
      const int64_t end = std::min<int64_t>(len, begin + max_tokens);
      return std::vector<int32_t>(token_ids.begin() + begin, token_ids.begin() + end);
    }
  }
  return {};
}

DraftFn ContinuationDrafter(std::vector<std::vector<int32_t>> prompts,
                            std::vector<std::vector<int32_t>> continuations) {
  return [prompts = std::move(prompts), continuations = std::move(continuations)](
             std::span<const int32_t> history, int32_t max_tokens, std::vector<int32_t>& drafts) {
    for (size_t i = 0; i < prompts.size() && i < continuations.size(); ++i) {
      const std::vector<int32_t>& p = prompts[i];
      const std::vector<int32_t>& c = continuations[i];
      if (history.size() < p.size() || history.size() > p.size() + c.size() ||
          !std::equal(p.begin(), p.end(), history.begin()) ||
          !std::equal(history.begin() + p.size(), history.end(), c.begin())) {
        continue;
      }
      const size_t from = history.size() - p.size();
      const size_t to = std::min(c.size(), from + static_cast<size_t>(std::max(max_tokens, 0)));
      drafts.insert(drafts.end(), c.begin() + from, c.begin() + to);
      return;
    }
  };
}

DraftGuard::DraftGuard(const Options& options)
    : options_(options), next_pause_(options.min_pause_steps) {
  if (options_.min_acceptance <= 0.0) return;
  pause_left_ = options_.initial_pause_steps;
  probing_ = true;  // the first verify decides, whether it comes at once or after the pause
}

int32_t DraftGuard::DraftsNextStep(int32_t max_drafts) {
  if (pause_left_ > 0) {
    if (--pause_left_ == 0) probing_ = true;
    return 0;
  }
  return probing_ ? std::min(max_drafts, 1) : max_drafts;
}

void DraftGuard::Pause() {
  pause_left_ = next_pause_;
  next_pause_ = std::min(options_.max_pause_steps, next_pause_ * 2);
  window_.clear();
  window_proposed_ = window_accepted_ = 0;
  ++num_pauses_;
}

void DraftGuard::OnVerify(int32_t proposed, int32_t accepted) {
  if (options_.min_acceptance <= 0.0 || proposed <= 0) return;
  const bool below = accepted < options_.min_acceptance * proposed;
  if (probing_) {
    probing_ = false;
    if (below) return Pause();
    next_pause_ = options_.min_pause_steps;
  }
  window_.emplace_back(proposed, accepted);
  window_proposed_ += proposed;
  window_accepted_ += accepted;
  // Keep the fewest latest steps that still hold window_tokens drafts.
  while (!window_.empty() && window_proposed_ - window_.front().first >= options_.window_tokens) {
    window_proposed_ -= window_.front().first;
    window_accepted_ -= window_.front().second;
    window_.erase(window_.begin());
  }
  if (window_proposed_ >= options_.window_tokens &&
      window_accepted_ < options_.min_acceptance * window_proposed_) {
    Pause();
  }
}

}  // namespace dsv41

#pragma once

// Speculative decoding policy of the engine (model.md §11.5, serving.md §7): which drafter
// proposes tokens (DSpark, the n-gram prompt lookup, or off), how many a verify step checks, the
// rule that accepts them, and the n-gram proposer itself. The engine loop (engine.h) runs the
// verify steps and the rollback.

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace dsv41 {

enum class SpeculativeMethod {
  kOff,
  kDspark,  // the checkpoint's draft network (model.md §11)
  kNgram,   // prompt lookup in the request's own history (as vLLM's n-gram proposer)
};

// "off", "dspark", "ngram".
std::string_view SpeculativeMethodName(SpeculativeMethod method);
// Inverse of SpeculativeMethodName; InvalidArgument naming the value otherwise.
Result<SpeculativeMethod> ParseSpeculativeMethod(std::string_view name);

// One verify row of a request (model.md §11.5 step 2): its logits predict the token at
// `position`; `draft` is the drafted token there (-1 on the last row, whose token is the bonus).
struct VerifyRow {
  std::span<const float> logits;
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;
  int64_t position = 0;
  std::span<const int32_t> prompt_ids;
  std::span<const int32_t> output_ids;  // every token emitted before `position`
  int32_t draft = -1;
};

// What a verify row emits: the token for its position, and whether it is the draft (only then
// does verification go on to the next row).
struct RowVerdict {
  SampledToken token;
  bool accepted = false;
};

// An acceptance rule. Pure: the verdict depends on the row alone.
using AcceptanceRule = RowVerdict (*)(const VerifyRow& row, SamplerScratch& scratch);

// The exact rule for a deterministic drafter: x = SampleToken(row) — the request's full sampling
// distribution P (penalties, temperature, top-k, top-p, min-p) drawn with the row's own
// (seed, position) uniform — is emitted, and the draft o is accepted iff x == o. So o is accepted
// with probability P(o) and, on rejection, the emitted x is distributed as P with o removed and
// renormalised: exact speculative sampling. Because the draw is the one a plain decode step makes
// at that position, the tokens equal those of a run without speculation, bit for bit, for any
// drafts (greedy: accept while o is the argmax, lowest id on ties).
RowVerdict ExactAcceptance(const VerifyRow& row, SamplerScratch& scratch);

// A test drafter: proposes up to `max_tokens` tokens after `token_ids` (a request's committed
// history: prompt and outputs) into `drafts`.
using DraftFn = std::function<void(std::span<const int32_t> token_ids, int32_t max_tokens,
                                   std::vector<int32_t>& drafts)>;

// A drafter that knows the continuation of each of `prompts` (from an earlier greedy run, say):
// after a history that is prompts[i] followed by the first j tokens of continuations[i] it
// proposes the tokens that follow there; for any other history nothing. For benchmarks (the
// verify path at full acceptance) and tests.
DraftFn ContinuationDrafter(std::vector<std::vector<int32_t>> prompts,
                            std::vector<std::vector<int32_t>> continuations);

struct SpeculativeOptions {
  SpeculativeMethod method = SpeculativeMethod::kOff;
  // K: drafts a verify step checks at most (--num-speculative-tokens); 1 .. dspark_block_size
  // with DSpark, 1 .. kMaxNgramSpeculativeTokens with ngram.
  int32_t num_speculative_tokens = 5;
  // The acceptance guard (serving.md §7.3, --speculative-min-acceptance): drafting pauses for a
  // request whose acceptance rate (accepted / proposed drafts) over its recent drafts falls below
  // this; 0 turns it off. A verify step of K drafts emits 1 + K·rate tokens, so it pays while
  // rate > (verify step time / plain step time − 1) / K.
  double min_acceptance = 0.3;
  // The guard's first pause and its shortest later pause, in decode steps (DraftGuard::Options).
  int32_t guard_initial_pause_steps = 128;
  int32_t guard_min_pause_steps = 128;
  // ngram: the lengths of the suffix to look up (vLLM's prompt_lookup_min / _max).
  int32_t prompt_lookup_min = 2;
  int32_t prompt_lookup_max = 4;
  // DSpark confidence-scheduled verification (--speculative-confidence): verify only the drafts
  // before the first whose sigmoid(confidence) is below this; 0 verifies all K.
  double confidence_threshold = 0.0;
  // For tests: proposes the drafts instead of the method's drafter (method must not be kOff;
  // with kDspark the windows are still seeded), and the rule verify rows follow.
  DraftFn custom_drafter;
  AcceptanceRule acceptance = ExactAcceptance;
  // DSpark: while the guard pauses a request's drafting, its draft window rows are seeded in
  // batches (when a block completes, kMaxDeferredSeeds rows are waiting, or drafting resumes)
  // instead of one main_proj GEMV per token. false seeds every position in its own step (the
  // reference the tests and benchmarks compare with); the windows are the same either way.
  bool defer_paused_seeding = true;
};

// The most drafts an n-gram verify step checks.
inline constexpr int32_t kMaxNgramSpeculativeTokens = 16;

// The most main_hidden rows a request paused by its guard holds back before they are seeded in
// one batch: enough that main_proj is read once per 16 tokens instead of once per token, few
// enough that the rows held stay small (16 × MainHiddenWidth bf16 values).
inline constexpr int64_t kMaxDeferredSeeds = 16;

// InvalidArgument naming the flag: K outside its range for the method (block_size: the model's
// dspark_block_size), a lookup range outside 1 <= min <= max, a threshold outside [0, 1].
Status ValidateSpeculativeOptions(const SpeculativeOptions& options, int32_t block_size);

// vLLM's prompt lookup: the longest n in [min_n, max_n] whose last n tokens of `token_ids` occur
// earlier (an occurrence ending before the last token; occurrences may overlap the suffix), at its
// earliest occurrence; returns the up to `max_tokens` tokens that follow it there (fewer when the
// history ends first), or nothing without a match.
std::vector<int32_t> ProposeNgram(std::span<const int32_t> token_ids, int32_t min_n, int32_t max_n,
                                  int32_t max_tokens);

// Per-request acceptance guard (serving.md §7.3). Off when min_acceptance <= 0. A request starts
// with drafting paused for initial_pause_steps decode steps, so that short requests pay nothing
// for a drafter that does not hit; then a probe: one verify step of a single draft (the cheapest
// verify; the first draft is the likeliest to be accepted) — rejected, drafting pauses again.
// While drafting, the guard keeps the verify results of the last `window_tokens` drafts; once
// that many are in and their acceptance rate (accepted / proposed) is below min_acceptance,
// drafting pauses. A pause lasts a number of decode steps and ends in a probe: a failing probe
// doubles the pause (from min_pause_steps up to max_pause_steps), a passing one resets it and
// drafting resumes with every draft. A drafter that never hits thus costs one single-draft verify
// step after the initial pause and one per doubling pause. A probe costs about two decode steps
// on the flash preset (a draft forward reads as many weight bytes as a main step: three stages
// and the shared head; plus the verify row), so the pauses are 128 steps and up: a drafter that
// never hits costs under 2 % in probes at any request length, besides the seeding (~1 %, batched
// while paused). Engine thread only.
class DraftGuard {
 public:
  struct Options {
    double min_acceptance = 0.0;
    int32_t window_tokens = 16;
    int32_t initial_pause_steps = 128;
    int32_t min_pause_steps = 128;
    int32_t max_pause_steps = 4096;
  };
  explicit DraftGuard(const Options& options);

  // Asked once per decode step that could draft, with the drafts it could verify: how many to
  // propose — 0 while paused (counting the pause down), 1 for a probe, else max_drafts.
  int32_t DraftsNextStep(int32_t max_drafts);
  // The result of one verify step: `proposed` drafts checked, `accepted` of them accepted.
  void OnVerify(int32_t proposed, int32_t accepted);

  // True when the next DraftsNextStep returns 0 (the engine defers DSpark seeding meanwhile).
  bool paused() const { return pause_left_ > 0; }
  // Pauses after a failing probe or window (the initial pause not counted).
  uint64_t num_pauses() const { return num_pauses_; }

 private:
  void Pause();

  Options options_;
  std::vector<std::pair<int32_t, int32_t>> window_;  // (proposed, accepted) per verify step
  int64_t window_proposed_ = 0;
  int64_t window_accepted_ = 0;
  int32_t pause_left_ = 0;
  int32_t next_pause_ = 0;
  bool probing_ = false;
  uint64_t num_pauses_ = 0;
};

}  // namespace dsv41

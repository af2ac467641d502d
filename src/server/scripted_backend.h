#pragma once

// A stand-in for the engine's output: every request generates scripted token ids, a scripted
// group of them per step (one, or several as a speculative step emits), then finishes (EOS, or
// kLength at max_tokens); the output processor makes their text, as it does the engine's. Two
// uses: the server tests and the request fuzzer (one script for every request, or a hold that
// keeps streams open and fills the queue), and `dsv41 serve --scripted-replies FILE`, which
// answers by rules on the prompt so a client (a coding agent) can be driven through a scripted
// tool-using session on the real HTTP, chat-format and output-parser path. Engine thread only,
// except set_hold and the counters, which are thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "text/tokenizer.h"

namespace dsv41 {

class ScriptedBackend final : public GenerationBackend {
 public:
  // The token ids one step emits.
  using ScriptStep = std::vector<int32_t>;

  // The reply to a prompt whose text (special tokens included) contains every string of
  // `when_prompt_contains`; replies are tried in order, so an empty list is the fallback.
  struct Reply {
    std::vector<std::string> when_prompt_contains;
    std::vector<int32_t> token_ids;
  };

  // ReadStats: total_blocks = num_blocks; each live request holds one block.
  explicit ScriptedBackend(std::vector<ScriptStep> script, uint32_t num_blocks = 64);
  // Replies chosen by the prompt (its text decoded by `tokenizer`), one token per step. A prompt
  // no reply matches is an InvalidArgument naming `source`. Every choice is logged (info). The
  // tokenizer must outlive the backend.
  ScriptedBackend(std::vector<Reply> replies, const Tokenizer& tokenizer, std::string source,
                  uint32_t num_blocks = 64);

  // Every byte of `text` its own step: the id of `tokenizer`'s token for that byte.
  static std::vector<ScriptStep> ByteSteps(std::string_view text, const Tokenizer& tokenizer);
  // Reads a replies file, {"replies": [{"when_prompt_contains": ["..."], "text": "..."}, ...]},
  // encoding each text with `tokenizer` (added-token literals such as </think> and ｜DSML｜
  // matched). Errors name the file and the field.
  static Result<std::vector<Reply>> LoadReplies(const std::string& path,
                                                const Tokenizer& tokenizer);

  void set_hold(bool hold) { hold_.store(hold); }
  // The next step fails as a whole (a fault of the engine, not of a request).
  void FailNextStep() { fail_next_step_.store(true); }
  // Every step that produces tokens takes at least this long (a slow model).
  void set_step_delay(std::chrono::microseconds delay) { step_delay_us_.store(delay.count()); }
  int num_added() const { return num_added_.load(); }
  int num_aborted() const { return num_aborted_.load(); }
  int num_live() const { return num_live_.load(); }
  // The last request's prompt and parameters.
  const std::vector<int32_t>& last_prompt() const { return last_prompt_; }
  const SamplingParams& last_params() const { return last_params_; }
  // The images of the last request added (their spans, plans and canvases).
  const std::vector<RequestImage>& last_images() const { return last_images_; }

  Result<uint64_t> AddRequest(std::vector<int32_t> prompt_ids, const SamplingParams& params,
                              const AddRequestOptions& options) override;
  Status Abort(uint64_t request_id) override;
  Status Step(std::vector<RequestOutput>& outputs) override;
  bool HasUnfinished() const override { return !live_.empty() || !pending_.empty(); }
  void ReadStats(EngineStats& out) const override;

 private:
  struct Script {
    std::vector<std::string> when_prompt_contains;
    std::vector<ScriptStep> steps;
  };
  struct Live {
    const Script* script = nullptr;
    int32_t num_prompt_tokens = 0;
    int32_t max_tokens = 0;
    size_t pos = 0;           // the next step of the script
    int32_t num_emitted = 0;  // tokens so far
  };

  // The index of the first script whose strings the prompt contains, or an error naming source_.
  Result<size_t> Choose(const std::vector<int32_t>& prompt_ids) const;

  std::vector<Script> scripts_;
  const Tokenizer* tokenizer_ = nullptr;  // set: scripts chosen by rule on the prompt's text
  std::string source_;
  const uint32_t num_blocks_;
  std::atomic<bool> hold_{false};
  std::atomic<int64_t> step_delay_us_{0};
  std::atomic<bool> fail_next_step_{false};
  std::atomic<int> num_added_{0};
  std::atomic<int> num_aborted_{0};
  std::atomic<int> num_live_{0};
  uint64_t next_id_ = 1;
  std::map<uint64_t, Live> live_;
  std::vector<RequestOutput> pending_;
  std::vector<int32_t> last_prompt_;
  SamplingParams last_params_;
  std::vector<RequestImage> last_images_;
  uint64_t generated_ = 0;
  uint64_t prompt_tokens_ = 0;
};

}  // namespace dsv41

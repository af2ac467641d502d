#pragma once

// One request's engine outputs turned into what every API reports (tokenizer-and-chat.md §7):
// reasoning, content and tool-call deltas as the streaming parser releases them (chat endpoints),
// or the raw text (completions); content stop strings; token ids, logprobs and usage counts; and
// why it ended. Streaming writers send the deltas as they come; non-streaming writers read the
// accumulated result, which is the deltas concatenated, so both agree by construction.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "engine/stop_strings.h"
#include "server/generation_request.h"
#include "text/output_parser.h"

namespace dsv41 {

// Why a generation ended, in API-neutral terms.
enum class EndReason {
  kNone,        // still running
  kEos,         // EOS or a stop token
  kStopString,  // a stop string (the engine's on completions, the server's on chat content)
  kLength,      // max_tokens or the context limit
  kAbort,       // aborted (shutdown)
  kError,       // the engine failed the request
};

// What one engine output released.
struct TrackedDelta {
  std::vector<OutputDelta> deltas;  // in order; completions: kContent only
  std::vector<int32_t> token_ids;
  std::vector<SampledToken> logprobs;
};

// HTTP thread only (one per request).
class GenerationTracker {
 public:
  // think_close_id: the "</think>" token id (ServedModel), or -1.
  GenerationTracker(const GenerationRequest& request, int32_t think_close_id);

  // Consumes one engine output (in order). After a content stop string the request is over
  // (ended() true): the caller aborts it in the engine and ignores later outputs.
  TrackedDelta Push(const RequestOutput& output);
  bool ended() const { return end_ != EndReason::kNone; }
  // True when the server ended the request (content stop string) and the engine must abort it.
  bool needs_abort() const { return needs_abort_; }

  EndReason end() const { return end_; }
  const std::string& error() const { return error_; }
  std::string_view stop_sequence() const { return stop_sequence_; }

  // The accumulated result (concatenated deltas).
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& tool_calls() const { return tool_calls_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  const std::vector<SampledToken>& logprobs() const { return logprobs_; }
  const std::vector<float>& prompt_logits() const { return prompt_logits_; }
  bool malformed_tool_block() const { return malformed_tool_block_; }

  int32_t prompt_tokens() const { return prompt_tokens_; }
  int64_t cached_tokens() const { return cached_tokens_; }
  int32_t completion_tokens() const { return static_cast<int32_t>(token_ids_.size()); }
  // Output tokens before "</think>" (all of them while it has not come), chat thinking mode.
  int32_t reasoning_tokens() const { return reasoning_tokens_; }

 private:
  void Release(OutputDelta delta, TrackedDelta& out);
  void EndWith(EndReason reason, TrackedDelta& out);

  const bool parse_chat_;
  const int32_t think_close_id_;
  std::optional<StreamingOutputParser> parser_;
  std::optional<StopStringMatcher> content_stop_;
  bool in_reasoning_;
  EndReason end_ = EndReason::kNone;
  bool needs_abort_ = false;
  std::string error_;
  std::string stop_sequence_;
  std::string reasoning_;
  std::string content_;
  std::vector<ParsedToolCall> tool_calls_;
  std::vector<int32_t> token_ids_;
  std::vector<SampledToken> logprobs_;
  std::vector<float> prompt_logits_;
  bool malformed_tool_block_ = false;
  bool content_stopped_ = false;
  int32_t prompt_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  int32_t reasoning_tokens_ = 0;
};

}  // namespace dsv41

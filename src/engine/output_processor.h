#pragma once

// One request's engine outputs turned into what every API reports (tokenizer-and-chat.md §4, §7;
// vLLM V1's OutputProcessor): it runs on the frontend side (the server's HTTP thread, the CLI's
// loop), so the engine thread does no text work. It detokenizes the new token ids (never half a
// UTF-8 character), parses chat output into reasoning, content and tool-call deltas, matches every
// stop string (on the content of chat output, on the raw text otherwise), and keeps token ids,
// logprobs, usage counts and the one finish reason. Streaming writers send the deltas as they
// come; non-streaming writers read the accumulated result, which is the deltas concatenated.
//
// A stop string ends the request here, not in the engine: the tokens after the one that completed
// it are dropped, and needs_abort() tells the caller to abort the engine's request.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "engine/stop_strings.h"
#include "text/output_parser.h"
#include "text/tokenizer.h"

namespace dsv41 {

struct OutputProcessorOptions {
  const Tokenizer* tokenizer = nullptr;  // required; outlives the processor
  DecodeOptions decode;                  // skip_special_tokens, keep_chat_markers
  std::vector<std::string> stop;         // stop strings (non-empty each)
  // Chat output is parsed into reasoning, content and tool calls; stop strings match its content
  // only (§7.3). Otherwise the whole text is content.
  bool parse_chat = false;
  bool starts_in_reasoning = false;  // the prompt ended with "<think>"
  int32_t think_close_id = -1;       // the "</think>" token id, or -1
  int32_t num_prompt_tokens = 0;     // until the engine's first output reports it
};

// The options for raw text (no chat parsing) with `params`' decoding and stop strings.
OutputProcessorOptions TextProcessorOptions(const Tokenizer& tokenizer,
                                            const SamplingParams& params);

// What one engine output released.
struct ProcessedOutput {
  std::vector<OutputDelta> deltas;  // in order; without chat parsing: kContent only
  std::vector<int32_t> token_ids;
  std::vector<SampledToken> logprobs;
};

// Not thread-safe: one per request, on one thread.
class OutputProcessor {
 public:
  explicit OutputProcessor(const OutputProcessorOptions& options);

  // Consumes one engine output of the request (in order). After the request ended (ended()
  // true) later outputs are ignored.
  ProcessedOutput Push(const RequestOutput& output);
  bool ended() const { return finish_ != FinishReason::kNone; }
  // True right after the Push in which a stop string ended the request while the engine still
  // runs it: abort it there (once).
  bool needs_abort() const { return needs_abort_; }

  FinishReason finish() const { return finish_; }
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
  // Text the detokenizer released: parsed (chat) or content, through the stop strings.
  void ReleaseText(std::string text, ProcessedOutput& out);
  void Release(OutputDelta delta, ProcessedOutput& out);
  void EndWith(FinishReason reason, ProcessedOutput& out);

  const bool parse_chat_;
  const int32_t think_close_id_;
  StreamingDetokenizer detokenizer_;
  std::optional<StreamingOutputParser> parser_;
  std::optional<StopStringMatcher> stop_;
  bool in_reasoning_;
  FinishReason finish_ = FinishReason::kNone;
  bool needs_abort_ = false;
  bool stopped_ = false;  // a stop string matched
  std::string error_;
  std::string stop_sequence_;
  std::string reasoning_;
  std::string content_;
  std::vector<ParsedToolCall> tool_calls_;
  std::vector<int32_t> token_ids_;
  std::vector<SampledToken> logprobs_;
  std::vector<float> prompt_logits_;
  bool malformed_tool_block_ = false;
  int32_t prompt_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  int32_t reasoning_tokens_ = 0;
};

}  // namespace dsv41

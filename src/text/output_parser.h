#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat_encoding.h"

namespace dsv41 {

// tokenizer-and-chat.md §7: model output (decoded with special tokens kept) to an assistant
// message. Never fails: malformed or truncated DSML becomes plain content (§7.6).

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON object text, client-visible function.arguments (§7.2 step 5)
};

struct ParsedOutput {
  std::optional<std::string> reasoning_content;  // set in thinking mode (possibly empty)
  std::string content;                           // possibly empty
  std::vector<ParsedToolCall> tool_calls;
  // The opener "\n\n<｜DSML｜ calls>" was seen but the block was not well formed (§7.6 metric).
  bool malformed_tool_block = false;
};

// The tool calls of a block that starts with "\n\n<｜DSML｜ calls>" and must be exactly one
// TOOLCALLS of §7.1 (nothing after "</｜DSML｜ calls>"); nullopt when it is not.
std::optional<std::vector<ParsedToolCall>> ParseToolCallBlock(std::string_view block);

// §7.2: `mode` is the prompt's mode (kThinking when the prompt ended with "<think>").
ParsedOutput ParseModelOutput(std::string_view text, ChatMode mode);

struct OutputDelta {
  enum class Kind { kReasoning, kContent, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;          // kReasoning, kContent
  ParsedToolCall tool_call;  // kToolCall
  int tool_call_idx = 0;     // kToolCall: 0, 1, ... in call order
};

// §7.3: incremental parser over decoded text pieces. For any split of a text, the reasoning
// deltas, the content deltas and the tool calls concatenate to ParseModelOutput of the whole text.
// Text that may start a marker ("</think>", EOS, the tool-block opener) is held back until the
// next piece decides; a tool block is buffered and its calls emitted once it ends. One instance
// per request; not thread-safe.
class StreamingOutputParser {
 public:
  explicit StreamingOutputParser(ChatMode mode);

  // Consumes the next piece of generated text; appends the deltas it releases to `out`.
  void Push(std::string_view text, std::vector<OutputDelta>& out);
  // Generation ended (EOS already seen, length limit, stop string, cancellation): releases what is
  // held back and resolves a pending tool block. Further pushes are ignored.
  void Finish(std::vector<OutputDelta>& out);

  // True once EOS was seen or Finish was called; later text is ignored.
  bool done() const { return state_ == State::kDone; }
  bool malformed_tool_block() const { return malformed_tool_block_; }

 private:
  enum class State { kReasoning, kContent, kTools, kDone };

  void EmitText(OutputDelta::Kind kind, std::string_view text, std::vector<OutputDelta>& out);
  void ResolveToolBlock(std::vector<OutputDelta>& out);

  State state_;
  std::string pending_;  // kReasoning / kContent: text not yet emitted (a possible marker prefix)
  std::string block_;    // kTools: the block so far, opener included
  bool malformed_tool_block_ = false;
};

}  // namespace dsv41

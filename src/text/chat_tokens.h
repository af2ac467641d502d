#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "text/chat_encoding.h"
#include "text/tokenizer.h"

namespace dsv41 {

// tokenizer-and-chat.md §6.10: how a rendered prompt becomes token ids.
struct ChatTokenizeOptions {
  // false (default): special pieces by IdOf, text pieces with added-token matching off, so
  // user-typed literals such as "<｜User｜>" stay text. true: the whole prompt text with matching
  // on (what vLLM/SGLang do; compatibility switch).
  bool whole_string = false;
};

// Token ids of `prompt`. Errors: a special piece the tokenizer lacks (InvalidArgument naming it,
// e.g. "</think>" with the DeepSeek-V3 tokenizer), invalid UTF-8. Thread-safe.
Result<std::vector<int32_t>> EncodeChatPrompt(const Tokenizer& tokenizer, const ChatPrompt& prompt,
                                              const ChatTokenizeOptions& options = {});

}  // namespace dsv41

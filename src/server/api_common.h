#pragma once

// Pieces the OpenAI and Anthropic mappings share: context-length checks, ids, token strings and
// logprob values as the wire carries them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "server/generation_request.h"
#include "text/json_format.h"

namespace dsv41 {

// The output budget of a request with `prompt_tokens` tokens: `max_tokens` when given (it must be
// >= 1 and fit), else what the context leaves, as vLLM. InvalidArgument naming `prompt_field` for
// a prompt that leaves no room for one token, or `max_tokens_field` for a budget beyond the
// context: "max_tokens: 2000 output tokens + 30 prompt tokens exceed the context of 1024 tokens".
Result<int32_t> OutputBudget(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                             const ServedModel& model, std::string_view prompt_field,
                             std::string_view max_tokens_field);

// prefix + `hex_chars` random hex digits ("chatcmpl-", "call_", "toolu_"). Thread-safe.
std::string RandomId(std::string_view prefix, size_t hex_chars);

// A token's text for logprob lists: its bytes, invalid UTF-8 replaced by U+FFFD.
std::string TokenText(const Tokenizer& tokenizer, int32_t id);
// A token's bytes as a JSON array of integers (OpenAI `bytes`).
JsonValue TokenBytesJson(const Tokenizer& tokenizer, int32_t id);
// A log-probability as a finite JSON number: -inf becomes -9999.0, as vLLM writes it.
JsonValue LogprobJson(float logprob);

// Unix time in seconds.
int64_t UnixSeconds();

}  // namespace dsv41

#pragma once

// The OpenAI endpoints (serving.md §11.1, tokenizer-and-chat.md §6.9, §7): request bodies of
// /v1/chat/completions and /v1/completions to engine submissions, with vLLM's behaviour where
// OpenAI is silent; responses and SSE chunks back. Pure functions and per-request writers;
// thread-safe as long as each writer stays on one thread.

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "base/status.h"
#include "server/generation_request.h"
#include "server/response_writer.h"
#include "text/json_format.h"

namespace dsv41 {

// /v1/chat/completions: messages rendered and tokenised (§6), sampling fields, max_tokens /
// max_completion_tokens, stop (matched on content), logprobs / top_logprobs, n = 1, stream /
// stream_options, tools / tool_choice (validated; the prompt carries the tools, nothing forces a
// call). InvalidArgument naming the field.
Result<GenerationRequest> ParseChatCompletionsRequest(const JsonValue& body,
                                                      const ServedModel& model);
// A chat request's output budget and the request fields its errors name.
struct ChatBudget {
  std::optional<int64_t> max_tokens;  // none: what the context leaves
  std::string_view prompt_field;      // "messages"
  std::string_view max_tokens_field;  // "max_tokens"
};
// A /v1/chat/completions body (as above) with the budget given apart (the Responses API maps its
// requests onto chat bodies and names its own fields).
Result<GenerationRequest> ParseChatBody(const JsonValue& body, const ServedModel& model,
                                        const ChatBudget& budget);

// /v1/completions: prompt as a string (BOS added unless add_special_tokens is false) or token
// ids, echo, logprobs N, max_tokens (default 16), stop (matched by the engine), stream,
// return_token_ids, skip_special_tokens (default true).
Result<GenerationRequest> ParseCompletionsRequest(const JsonValue& body, const ServedModel& model);

std::unique_ptr<ResponseWriter> MakeChatCompletionsWriter(const GenerationRequest& request,
                                                          const ServedModel& model);
std::unique_ptr<ResponseWriter> MakeCompletionsWriter(const GenerationRequest& request,
                                                      const ServedModel& model);

// GET /v1/models.
JsonValue ModelsResponse(const ServedModel& model);

}  // namespace dsv41

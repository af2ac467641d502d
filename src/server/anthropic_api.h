#pragma once

// The Anthropic Messages endpoint (/v1/messages; tokenizer-and-chat.md §6.9, §7.4): request bodies
// to chat messages and an engine submission; responses and the streaming event sequence
// (message_start, content_block_start / _delta / _stop for thinking, text and tool_use blocks,
// message_delta, message_stop). Thread-safe as long as each writer stays on one thread.

#include <memory>

#include "base/status.h"
#include "server/generation_request.h"
#include "server/response_writer.h"
#include "text/chat_encoding.h"
#include "text/json_format.h"

namespace dsv41 {

// The chat messages and options of a Messages body: `system` (a string or text blocks) as the
// system message at index 0, user blocks (text, tool_result), assistant blocks (text, thinking,
// tool_use), system messages anywhere in `messages` (rendered where they stand), `tools` ({name,
// description, input_schema}) as OpenAI function tools, `tool_choice` (none omits the tools),
// `thinking` (enabled or adaptive: thinking mode; disabled: chat mode; absent: the engine
// default, thinking), `output_config.effort` (the reasoning effort, §6.1 names). A tool_result
// must answer a tool_use of the assistant message right before it. Fields the rendering does not
// use (metadata, cache_control, context_management, service_tier, ...) are ignored.
// InvalidArgument naming the field.
Status MapMessagesRequest(const JsonValue& body, std::vector<ChatMessage>& messages,
                          ChatOptions& options);

// /v1/messages: the above rendered and tokenised, max_tokens (required), stop_sequences (matched
// on content), temperature, top_p, top_k, stream.
Result<GenerationRequest> ParseMessagesRequest(const JsonValue& body, const ServedModel& model);

// /v1/messages/count_tokens: {"input_tokens": N}, N the rendered prompt's token count.
Result<JsonValue> CountMessagesTokens(const JsonValue& body, const ServedModel& model);

std::unique_ptr<ResponseWriter> MakeMessagesWriter(const GenerationRequest& request,
                                                   const ServedModel& model);

}  // namespace dsv41

#pragma once

// What the API parsers make of a request body and what the response writers need: the engine
// submission, the response shape (stream, usage, logprobs, echo, token ids) and, for the chat
// endpoints, how the output is parsed (tokenizer-and-chat.md §7).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/output_processor.h"
#include "server/engine_loop.h"
#include "server/image_inputs.h"
#include "text/tokenizer.h"

namespace dsv41 {

enum class Api { kChatCompletions, kCompletions, kMessages, kResponses };

struct ResponsesRequest;  // server/responses_api.h

// The model the server serves, as the API layer sees it. Immutable; thread-safe to read.
struct ServedModel {
  const Tokenizer* tokenizer = nullptr;
  std::vector<std::string> names;  // served model names; names[0] is the one reported
  int64_t max_model_len = 0;       // prompt + output tokens at most (EngineLayout)
  // The output budget of a request that sets none (chat, Responses); 0: what the context leaves.
  int64_t default_max_tokens = 0;
  int32_t vocab_size = 0;
  int32_t think_close_id = -1;  // "</think>", or -1 when the tokenizer lacks it
  int64_t created = 0;          // Unix seconds of start-up (/v1/models)
  ImageServing images;          // image input (vision.md §3): off without a vision tower

  // True when `name` is one of the served names (an empty name means the default model).
  bool Serves(const std::string& name) const;
  // The name responses report for a request that asked for `requested` (names[0] when empty).
  const std::string& NameFor(const std::string& requested) const {
    return requested.empty() ? names.front() : requested;
  }
};

struct GenerationRequest {
  Api api = Api::kChatCompletions;
  Submission submission;
  std::string model;  // as the client named it, echoed in responses
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage (OpenAI)

  // Chat endpoints: the output is parsed into reasoning, content and tool calls (§7); the stop
  // strings (submission.params.stop) then match the content only (§7.3).
  bool parse_chat = false;
  bool starts_in_reasoning = false;  // the prompt ended with "<think>"

  // Logprobs: chat `logprobs` + `top_logprobs`; completions `logprobs` N (N top entries).
  bool logprobs = false;
  int32_t top_logprobs = 0;

  // /v1/completions.
  bool echo = false;
  bool return_token_ids = false;
  std::string prompt_text;  // the prompt as text (echo)

  // /v1/responses: what the response object echoes and where it is stored.
  std::shared_ptr<const ResponsesRequest> responses;
};

// The output processor's options for `request` on `served`'s tokenizer.
OutputProcessorOptions ProcessorOptionsFor(const GenerationRequest& request,
                                           const ServedModel& served);

}  // namespace dsv41

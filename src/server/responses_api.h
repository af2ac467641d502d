#pragma once

// POST /v1/responses (the OpenAI Responses API, which Codex CLI speaks) over the chat path: the
// input items, instructions, tools and options become a /v1/chat/completions body, which the chat
// mapping renders, tokenises and parses (tokenizer-and-chat.md §6.9, §7), so both endpoints
// prompt the model alike. The response is written as Responses output items (reasoning, message,
// function_call) and typed SSE events with sequence numbers; responses are kept in a
// ResponseStore for GET / DELETE and previous_response_id. Pure functions and per-request
// writers; thread-safe as long as each writer stays on one thread.

#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/generation_request.h"
#include "server/response_store.h"
#include "server/response_writer.h"
#include "text/json_format.h"

namespace dsv41 {

// What a Responses request needs beyond the chat request it became (GenerationRequest::responses).
struct ResponsesRequest {
  ResponseStore* store = nullptr;            // outlives the request
  bool store_response = true;                // `store` (default true)
  bool include_encrypted_reasoning = false;  // include: reasoning.encrypted_content
  // The chain of the previous responses (their input and output items), then this request's
  // input: what a later request naming this response continues from.
  std::vector<JsonValue> input_items;
  // The request members the response object echoes (instructions, tools, metadata, ...).
  JsonValue echo;
};

// The body of POST /v1/responses to a chat request (api kResponses). InvalidArgument naming the
// field ("tools[2].type: 'web_search' is not supported (function tools only)"); NotFound naming
// an unknown previous_response_id.
Result<GenerationRequest> ParseResponsesRequest(const JsonValue& body, const ServedModel& model,
                                                ResponseStore& store);

// The writer of a request from ParseResponsesRequest; it stores the finished response.
std::unique_ptr<ResponseWriter> MakeResponsesWriter(const GenerationRequest& request,
                                                    const ServedModel& model);

// GET /v1/responses/{id}: the stored response object, or NotFound naming the id.
Result<JsonValue> GetStoredResponse(ResponseStore& store, std::string_view id);
// DELETE /v1/responses/{id}: {"id", "object": "response", "deleted": true}, or NotFound.
Result<JsonValue> DeleteStoredResponse(ResponseStore& store, std::string_view id);

}  // namespace dsv41

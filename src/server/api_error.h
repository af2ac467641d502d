#pragma once

// An HTTP error as the APIs report it: status, the metrics type, a message naming the field, and
// the error bodies of OpenAI ({"error": {"message", "type", "param", "code"}}, serving.md §11.1)
// and Anthropic ({"type": "error", "error": {"type", "message"}}).

#include <string>
#include <string_view>

#include "base/status.h"
#include "server/metrics.h"

namespace dsv41 {

struct ApiError {
  int status = 400;
  RequestErrorType type = RequestErrorType::kInvalidRequest;
  std::string message;
};

// 400 for InvalidArgument / OutOfRange (the request's fault), 500 otherwise.
ApiError ApiErrorFromStatus(const Status& status);

// The request field a message names: its leading path ("messages[2].content", "top_p"), or empty.
std::string ErrorParam(std::string_view message);

// {"error": {"message", "type", "param", "code"}} with OpenAI's type words.
std::string OpenAiErrorBody(const ApiError& error);
// {"type": "error", "error": {"type", "message"}} with Anthropic's type words (overloaded_error
// for the 529 of a full queue).
std::string AnthropicErrorBody(const ApiError& error);

}  // namespace dsv41

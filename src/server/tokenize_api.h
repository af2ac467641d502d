#pragma once

// vLLM's helper endpoints POST /tokenize and POST /detokenize (serving.md §11.1).

#include "base/status.h"
#include "server/generation_request.h"
#include "text/json_format.h"

namespace dsv41 {

// {"prompt": TEXT, "add_special_tokens": true} (BOS first) or a chat body with "messages" (the
// chat template applied as /v1/chat/completions does), "return_token_strs" optional →
// {"count", "max_model_len", "tokens", ["token_strs"]}. InvalidArgument naming the field.
Result<JsonValue> Tokenize(const JsonValue& body, const ServedModel& model);
// {"tokens": [ids]} → {"prompt": TEXT} (special tokens kept).
Result<JsonValue> Detokenize(const JsonValue& body, const ServedModel& model);

}  // namespace dsv41

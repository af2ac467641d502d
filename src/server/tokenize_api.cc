#include "server/tokenize_api.h"

#include <vector>

#include "server/api_common.h"
#include "server/request_fields.h"
#include "text/chat_encoding.h"
#include "text/chat_tokens.h"

namespace dsv41 {

Result<JsonValue> Tokenize(const JsonValue& body, const ServedModel& model) {
  if (!body.is_object()) return InvalidArgumentError("request body: must be a JSON object");
  std::vector<int32_t> ids;
  if (FieldOrNull(body, "messages") != nullptr) {
    DSV41_ASSIGN_OR_RETURN(
        ChatPrompt prompt,
        RenderChatCompletionsRequest(body, ChatRequestOptions{.images = model.images.enabled}));
    Submission submission;
    DSV41_ASSIGN_OR_RETURN(submission.prompt_ids, EncodeChatPrompt(*model.tokenizer, prompt));
    DSV41_RETURN_IF_ERROR(AttachImages(prompt.images, model.images, submission));
    ids = std::move(submission.prompt_ids);
  } else {
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> prompt, StringField(body, "prompt"));
    if (!prompt.has_value()) return InvalidArgumentError("prompt: is required (or messages)");
    DSV41_ASSIGN_OR_RETURN(std::optional<bool> add_special, BoolField(body, "add_special_tokens"));
    EncodeOptions options;
    options.add_bos = add_special.value_or(true) && model.tokenizer->bos_id().has_value();
    DSV41_ASSIGN_OR_RETURN(ids, model.tokenizer->Encode(*prompt, options));
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> strs, BoolField(body, "return_token_strs"));
  JsonValue tokens = JsonArray();
  JsonValue token_strs = JsonArray();
  for (int32_t id : ids) {
    tokens.Push(JsonInt(id));
    token_strs.Push(JsonString(TokenText(*model.tokenizer, id)));
  }
  JsonValue out = JsonObject({{"count", JsonInt(static_cast<int64_t>(ids.size()))},
                              {"max_model_len", JsonInt(model.max_model_len)},
                              {"tokens", std::move(tokens)}});
  if (strs.value_or(false)) out.Set("token_strs", std::move(token_strs));
  return out;
}

Result<JsonValue> Detokenize(const JsonValue& body, const ServedModel& model) {
  if (!body.is_object()) return InvalidArgumentError("request body: must be a JSON object");
  const JsonValue* tokens = FieldOrNull(body, "tokens");
  if (tokens == nullptr || !tokens->is_array()) {
    return InvalidArgumentError("tokens: must be an array of token ids");
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->array.size(); ++i) {
    const JsonValue& t = tokens->array[i];
    const int64_t id = t.kind == JsonValue::Kind::kInteger && t.text.size() <= 11
                           ? std::strtoll(t.text.c_str(), nullptr, 10)
                           : -1;
    if (id < 0 || id >= model.vocab_size) {
      return InvalidArgumentError("tokens[%zu]: must be a token id in [0, %d)", i,
                                  model.vocab_size);
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return JsonObject({{"prompt", JsonString(model.tokenizer->Decode(ids))}});
}

}  // namespace dsv41

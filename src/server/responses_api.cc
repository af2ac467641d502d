#include "server/responses_api.h"

#include <optional>
#include <set>
#include <string>
#include <utility>

#include "server/api_common.h"
#include "server/openai_api.h"
#include "server/request_fields.h"
#include "text/chat_encoding.h"

namespace dsv41 {
namespace {

// --- Requests: Responses input items to chat messages -------------------------------------------

// The string `type` of an object, or none (also when `value` is no object).
Result<std::optional<std::string>> TypeOf(const JsonValue& value) {
  if (!value.is_object()) return std::optional<std::string>();
  return StringField(value, "type");
}

// The text of a message's content: a string, or input_text / output_text / text / refusal parts
// joined by "\n\n" (as the chat endpoint joins text parts). Images and files are refused.
Result<std::string> PartsText(const JsonValue& content, const std::string& field) {
  if (content.is_string()) return content.text;
  if (!content.is_array()) {
    return InvalidArgumentError("%s: must be a string or an array of content parts", field.c_str());
  }
  std::string joined;
  for (size_t p = 0; p < content.array.size(); ++p) {
    const JsonValue& part = content.array[p];
    const std::string part_field = StrFormat("%s[%zu]", field.c_str(), p);
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> type, TypeOf(part));
    if (!type.has_value()) {
      return InvalidArgumentError("%s: a content part must be an object with a string 'type'",
                                  part_field.c_str());
    }
    const char* text_key = *type == "refusal" ? "refusal" : "text";
    if (*type == "input_image") {
      return InvalidArgumentError("%s: images belong to user messages (vision.md §3.4)",
                                  part_field.c_str());
    }
    if (*type == "input_file" || *type == "input_audio") {
      return InvalidArgumentError("%s: %s content is not supported", part_field.c_str(),
                                  type->c_str());
    }
    if (*type != "input_text" && *type != "output_text" && *type != "text" && *type != "refusal" &&
        *type != "summary_text" && *type != "reasoning_text") {
      return InvalidArgumentError("%s.type: unsupported content part type '%s'", part_field.c_str(),
                                  type->c_str());
    }
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> text, StringField(part, text_key));
    if (!text.has_value()) {
      return InvalidArgumentError("%s.%s: must be a string", part_field.c_str(), text_key);
    }
    if (p > 0) joined += "\n\n";
    joined += *text;
  }
  return joined;
}

// A user message's content for the chat request: its text (PartsText), or, when it holds
// input_image parts, chat parts in order — text parts and image_url parts, each image naming its
// input field for errors (vision.md §3.1).
Result<JsonValue> UserContent(const JsonValue& content, const std::string& field) {
  bool has_image = false;
  if (content.is_array()) {
    for (const JsonValue& part : content.array) {
      Result<std::optional<std::string>> type = TypeOf(part);
      has_image = has_image || (type.ok() && *type == "input_image");
    }
  }
  if (!has_image) {
    DSV41_ASSIGN_OR_RETURN(std::string text, PartsText(content, field));
    return JsonString(std::move(text));
  }
  JsonValue parts = JsonArray();
  for (size_t p = 0; p < content.array.size(); ++p) {
    const JsonValue& part = content.array[p];
    const std::string part_field = StrFormat("%s[%zu]", field.c_str(), p);
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> type, TypeOf(part));
    if (type != "input_image") {
      DSV41_ASSIGN_OR_RETURN(std::string text, PartsText(JsonArray({part}), part_field));
      parts.Push(JsonObject({{"type", JsonString("text")}, {"text", JsonString(text)}}));
      continue;
    }
    const JsonValue* url = FieldOrNull(part, "image_url");
    if (url != nullptr && url->is_object()) url = FieldOrNull(*url, "url");
    if (url == nullptr || !url->is_string()) {
      return InvalidArgumentError(
          "%s.image_url: an input_image needs an image_url (a data: URL; file_id is not "
          "supported)",
          part_field.c_str());
    }
    parts.Push(JsonObject({{"type", JsonString("image_url")},
                           {"image_url", JsonObject({{"url", *url}})},
                           {"dsv41_field", JsonString(part_field)}}));
  }
  return parts;
}

// Joins the texts of an optional parts array (reasoning content / summary).
Result<std::optional<std::string>> OptionalPartsText(const JsonValue& item, std::string_view key,
                                                     const std::string& field) {
  const JsonValue* parts = FieldOrNull(item, key);
  if (parts == nullptr || (parts->is_array() && parts->array.empty())) {
    return std::optional<std::string>();
  }
  DSV41_ASSIGN_OR_RETURN(std::string text, PartsText(*parts, field + "." + std::string(key)));
  return std::optional<std::string>(std::move(text));
}

// Builds the chat `messages` of a Responses conversation. A reasoning item, assistant message
// items and function_call items that follow one another make one assistant message (its
// reasoning_content, content and tool_calls), as the chat format renders an assistant turn.
class ChatMessagesBuilder {
 public:
  explicit ChatMessagesBuilder(JsonValue& messages) : messages_(messages) {}

  Status Add(const JsonValue& item, const std::string& field) {
    if (!item.is_object()) return InvalidArgumentError("%s: must be an object", field.c_str());
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> type, StringField(item, "type"));
    if (!type.has_value() && FieldOrNull(item, "role") != nullptr) type = "message";
    if (!type.has_value()) {
      return InvalidArgumentError("%s.type: must be a string", field.c_str());
    }
    if (*type == "message") return AddMessage(item, field);
    if (*type == "function_call") return AddFunctionCall(item, field);
    if (*type == "function_call_output") return AddFunctionCallOutput(item, field);
    if (*type == "reasoning") return AddReasoning(item, field);
    return InvalidArgumentError("%s.type: '%s' items are not supported", field.c_str(),
                                type->c_str());
  }

 private:
  Status AddMessage(const JsonValue& item, const std::string& field) {
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> role, StringField(item, "role"));
    const std::string r = role.value_or("");
    if (r != "user" && r != "assistant" && r != "system" && r != "developer") {
      return InvalidArgumentError(
          "%s.role: unknown role '%s' (want user, assistant, system or developer)", field.c_str(),
          r.c_str());
    }
    const JsonValue* content = FieldOrNull(item, "content");
    if (content == nullptr) {
      return InvalidArgumentError("%s.content: is required", field.c_str());
    }
    if (r == "user") {
      DSV41_ASSIGN_OR_RETURN(JsonValue parts, UserContent(*content, field + ".content"));
      pending_reasoning_.reset();
      messages_.Push(JsonObject({{"role", JsonString(r)}, {"content", std::move(parts)}}));
      assistant_open_ = false;
      return OkStatus();
    }
    DSV41_ASSIGN_OR_RETURN(std::string text, PartsText(*content, field + ".content"));
    if (r != "assistant") {
      pending_reasoning_.reset();
      messages_.Push(JsonObject({{"role", JsonString(r)}, {"content", JsonString(text)}}));
      assistant_open_ = false;
      return OkStatus();
    }
    JsonValue& message = OpenAssistant(/*for_content=*/true);
    const JsonValue* existing = message.Find("content");
    message.Set("content", JsonString(existing != nullptr && !existing->text.empty()
                                          ? existing->text + "\n\n" + text
                                          : text));
    return OkStatus();
  }

  Status AddFunctionCall(const JsonValue& item, const std::string& field) {
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> call_id, StringField(item, "call_id"));
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> name, StringField(item, "name"));
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> arguments, StringField(item, "arguments"));
    if (!call_id.has_value()) {
      return InvalidArgumentError("%s.call_id: must be a string", field.c_str());
    }
    if (!name.has_value()) return InvalidArgumentError("%s.name: must be a string", field.c_str());
    JsonValue& message = OpenAssistant(/*for_content=*/false);
    message.Set("tool_calls",
                message.Find("tool_calls") != nullptr ? *message.Find("tool_calls") : JsonArray());
    for (JsonMember& m : message.object) {
      if (m.key != "tool_calls") continue;
      m.value.Push(JsonObject(
          {{"id", JsonString(*call_id)},
           {"type", JsonString("function")},
           {"function", JsonObject({{"name", JsonString(*name)},
                                    {"arguments", JsonString(arguments.value_or("{}"))}})}}));
    }
    calls_.insert(*call_id);
    return OkStatus();
  }

  Status AddFunctionCallOutput(const JsonValue& item, const std::string& field) {
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> call_id, StringField(item, "call_id"));
    if (!call_id.has_value()) {
      return InvalidArgumentError("%s.call_id: must be a string", field.c_str());
    }
    if (calls_.count(*call_id) == 0) {
      return InvalidArgumentError("%s.call_id: '%s' answers no function_call before it",
                                  field.c_str(), call_id->c_str());
    }
    const JsonValue* output = FieldOrNull(item, "output");
    if (output == nullptr) return InvalidArgumentError("%s.output: is required", field.c_str());
    DSV41_ASSIGN_OR_RETURN(std::string text, PartsText(*output, field + ".output"));
    pending_reasoning_.reset();
    assistant_open_ = false;
    messages_.Push(JsonObject({{"role", JsonString("tool")},
                               {"tool_call_id", JsonString(*call_id)},
                               {"content", JsonString(std::move(text))}}));
    return OkStatus();
  }

  // The model's thinking: its reasoning_text content, else its summary, else encrypted_content
  // (which this server fills with the plain text).
  Status AddReasoning(const JsonValue& item, const std::string& field) {
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> text,
                           OptionalPartsText(item, "content", field));
    if (!text.has_value()) {
      DSV41_ASSIGN_OR_RETURN(text, OptionalPartsText(item, "summary", field));
    }
    if (!text.has_value()) {
      DSV41_ASSIGN_OR_RETURN(text, StringField(item, "encrypted_content"));
    }
    assistant_open_ = false;
    pending_reasoning_ = pending_reasoning_.value_or("") + text.value_or("");
    return OkStatus();
  }

  // The assistant message the next content or tool call belongs to: the open one, unless content
  // follows tool calls or content (a new turn then).
  JsonValue& OpenAssistant(bool for_content) {
    if (assistant_open_) {
      JsonValue& last = messages_.array.back();
      const bool has_calls = last.Find("tool_calls") != nullptr;
      if (!(for_content && has_calls)) return last;
    }
    JsonValue message =
        JsonObject({{"role", JsonString("assistant")}, {"content", JsonString("")}});
    if (pending_reasoning_.has_value()) {
      message.Set("reasoning_content", JsonString(std::move(*pending_reasoning_)));
      pending_reasoning_.reset();
    }
    messages_.Push(std::move(message));
    assistant_open_ = true;
    return messages_.array.back();
  }

  JsonValue& messages_;
  std::optional<std::string> pending_reasoning_;
  bool assistant_open_ = false;
  std::set<std::string> calls_;
};

// A hosted tool the API runs on its side (web search, file search, ...): this server has none, so
// the model is not offered it; a client that merely lists it (Codex CLI lists web_search) is
// served.
bool IsHostedTool(std::string_view type) {
  return type == "web_search" || type == "web_search_preview" || type == "file_search" ||
         type == "code_interpreter" || type == "image_generation";
}

// Appends the function tools of `tools` (`field` names the list) as chat tools; a `namespace`
// tool contributes the functions it groups (Codex CLI sends its sub-agent tools so).
Status AppendChatTools(const JsonValue& tools, const std::string& field, JsonValue& out) {
  if (!tools.is_array()) return InvalidArgumentError("%s: must be an array", field.c_str());
  for (size_t t = 0; t < tools.array.size(); ++t) {
    const JsonValue& tool = tools.array[t];
    const std::string tool_field = StrFormat("%s[%zu]", field.c_str(), t);
    if (!tool.is_object()) return InvalidArgumentError("%s: must be an object", tool_field.c_str());
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> type, StringField(tool, "type"));
    if (type.has_value() && IsHostedTool(*type)) continue;
    if (type == "namespace") {
      const JsonValue* inner = FieldOrNull(tool, "tools");
      if (inner == nullptr) {
        return InvalidArgumentError("%s.tools: is required", tool_field.c_str());
      }
      DSV41_RETURN_IF_ERROR(AppendChatTools(*inner, tool_field + ".tools", out));
      continue;
    }
    if (type != "function") {
      return InvalidArgumentError("%s.type: '%s' is not supported (function tools only)",
                                  tool_field.c_str(), type.value_or("").c_str());
    }
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> name, StringField(tool, "name"));
    if (!name.has_value()) {
      return InvalidArgumentError("%s.name: must be a string", tool_field.c_str());
    }
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> description,
                           StringField(tool, "description"));
    const JsonValue* parameters = FieldOrNull(tool, "parameters");
    if (parameters != nullptr && !parameters->is_object()) {
      return InvalidArgumentError("%s.parameters: must be an object", tool_field.c_str());
    }
    JsonValue function = JsonObject({{"name", JsonString(*name)}});
    if (description.has_value()) function.Set("description", JsonString(*description));
    function.Set("parameters", parameters != nullptr ? *parameters : JsonObject());
    out.Push(JsonObject({{"type", JsonString("function")}, {"function", std::move(function)}}));
  }
  return OkStatus();
}

// `tool_choice`: none / auto / required, or {type: function, name}.
Result<JsonValue> ChatToolChoice(const JsonValue& choice) {
  if (choice.is_string()) return choice;
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> type, TypeOf(choice));
  if (type != "function") {
    return InvalidArgumentError(
        "tool_choice: must be none, auto, required or {\"type\": \"function\", \"name\"}");
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> name, StringField(choice, "name"));
  if (!name.has_value()) return InvalidArgumentError("tool_choice.name: must be a string");
  return JsonObject(
      {{"type", JsonString("function")}, {"function", JsonObject({{"name", JsonString(*name)}})}});
}

// `text.format` as the chat response_format: text (nothing), json_object, json_schema.
Result<std::optional<JsonValue>> ChatResponseFormat(const JsonValue& text) {
  if (!text.is_object()) return InvalidArgumentError("text: must be an object");
  const JsonValue* format = FieldOrNull(text, "format");
  if (format == nullptr) return std::optional<JsonValue>();
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> type, TypeOf(*format));
  if (type == "text") return std::optional<JsonValue>();
  if (type == "json_object") {
    return std::optional<JsonValue>(JsonObject({{"type", JsonString("json_object")}}));
  }
  if (type != "json_schema") {
    return InvalidArgumentError("text.format.type: must be text, json_object or json_schema");
  }
  JsonValue schema = JsonObject();
  for (const char* key : {"name", "description", "schema", "strict"}) {
    if (const JsonValue* v = FieldOrNull(*format, key); v != nullptr) schema.Set(key, *v);
  }
  return std::optional<JsonValue>(
      JsonObject({{"type", JsonString("json_schema")}, {"json_schema", std::move(schema)}}));
}

// The items of `input` (a string is one user message), after those of previous_response_id.
Result<std::vector<JsonValue>> InputItems(const JsonValue& body, ResponseStore& store) {
  std::vector<JsonValue> items;
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> previous,
                         StringField(body, "previous_response_id"));
  if (previous.has_value()) {
    std::shared_ptr<const StoredResponse> stored = store.Get(*previous);
    if (stored == nullptr) {
      return NotFoundError("previous_response_id: no stored response '%s'", previous->c_str());
    }
    items = stored->input_items;
    if (const JsonValue* output = stored->response.Find("output"); output != nullptr) {
      items.insert(items.end(), output->array.begin(), output->array.end());
    }
  }
  const JsonValue* input = FieldOrNull(body, "input");
  if (input == nullptr) return InvalidArgumentError("input: is required");
  if (input->is_string()) {
    items.push_back(JsonObject({{"type", JsonString("message")},
                                {"role", JsonString("user")},
                                {"content", JsonString(input->text)}}));
  } else if (input->is_array()) {
    items.insert(items.end(), input->array.begin(), input->array.end());
  } else {
    return InvalidArgumentError("input: must be a string or an array of items");
  }
  return items;
}

// The members of the request a response object repeats, with the API's defaults.
JsonValue EchoOf(const JsonValue& body) {
  auto member = [&](std::string_view key, JsonValue fallback) {
    const JsonValue* v = FieldOrNull(body, key);
    return v != nullptr ? *v : fallback;
  };
  const JsonValue* reasoning = FieldOrNull(body, "reasoning");
  return JsonObject({
      {"instructions", member("instructions", JsonValue())},
      {"max_output_tokens", member("max_output_tokens", JsonValue())},
      {"metadata", member("metadata", JsonObject())},
      {"parallel_tool_calls", member("parallel_tool_calls", JsonBool(true))},
      {"previous_response_id", member("previous_response_id", JsonValue())},
      {"reasoning", reasoning != nullptr && reasoning->is_object()
                        ? *reasoning
                        : JsonObject({{"effort", JsonValue()}, {"summary", JsonValue()}})},
      {"store", member("store", JsonBool(true))},
      {"temperature", member("temperature", JsonFloat(1.0))},
      {"text",
       member("text", JsonObject({{"format", JsonObject({{"type", JsonString("text")}})}}))},
      {"tool_choice", member("tool_choice", JsonString("auto"))},
      {"tools", member("tools", JsonArray())},
      {"top_p", member("top_p", JsonFloat(1.0))},
      {"truncation", member("truncation", JsonString("disabled"))},
      {"user", member("user", JsonValue())},
  });
}

// Request fields that change nothing here but must have their documented type.
Status CheckAcceptedFields(const JsonValue& body) {
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> background, BoolField(body, "background"));
  if (background.value_or(false)) {
    return InvalidArgumentError("background: background responses are not supported");
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> parallel, BoolField(body, "parallel_tool_calls"));
  (void)parallel;  // the format lets the model make any number of calls (§6.9)
  if (const JsonValue* metadata = FieldOrNull(body, "metadata");
      metadata != nullptr && !metadata->is_object()) {
    return InvalidArgumentError("metadata: must be an object");
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> user, StringField(body, "user"));
  (void)user;
  if (const JsonValue* truncation = FieldOrNull(body, "truncation"); truncation != nullptr) {
    if (!truncation->is_string() ||
        (truncation->text != "disabled" && truncation->text != "auto")) {
      return InvalidArgumentError("truncation: must be disabled or auto");
    }
  }
  return OkStatus();
}

// The chat body of a Responses body: messages from instructions and the items, and the options.
Result<JsonValue> ChatBodyOf(const JsonValue& body, const std::vector<JsonValue>& items,
                             size_t first_input_item) {
  JsonValue messages = JsonArray();
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> instructions,
                         StringField(body, "instructions"));
  if (instructions.has_value()) {
    messages.Push(
        JsonObject({{"role", JsonString("system")}, {"content", JsonString(*instructions)}}));
  }
  ChatMessagesBuilder builder(messages);
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string field = i < first_input_item ? StrFormat("previous_response_id: item %zu", i)
                                                   : StrFormat("input[%zu]", i - first_input_item);
    DSV41_RETURN_IF_ERROR(builder.Add(items[i], field));
  }
  if (messages.array.empty()) return InvalidArgumentError("input: must not be empty");

  JsonValue chat = JsonObject({{"messages", std::move(messages)}});
  for (const char* key : {"model", "stream", "temperature", "top_p", "top_k", "min_p", "seed",
                          "stop", "presence_penalty", "frequency_penalty", "repetition_penalty"}) {
    if (const JsonValue* v = FieldOrNull(body, key); v != nullptr) chat.Set(key, *v);
  }
  if (const JsonValue* tools = FieldOrNull(body, "tools"); tools != nullptr) {
    JsonValue chat_tools = JsonArray();
    DSV41_RETURN_IF_ERROR(AppendChatTools(*tools, "tools", chat_tools));
    if (!chat_tools.array.empty()) chat.Set("tools", std::move(chat_tools));
  }
  if (const JsonValue* choice = FieldOrNull(body, "tool_choice"); choice != nullptr) {
    DSV41_ASSIGN_OR_RETURN(JsonValue chat_choice, ChatToolChoice(*choice));
    chat.Set("tool_choice", std::move(chat_choice));
  }
  if (const JsonValue* text = FieldOrNull(body, "text"); text != nullptr) {
    DSV41_ASSIGN_OR_RETURN(std::optional<JsonValue> format, ChatResponseFormat(*text));
    if (format.has_value()) chat.Set("response_format", std::move(*format));
  }
  if (const JsonValue* reasoning = FieldOrNull(body, "reasoning"); reasoning != nullptr) {
    if (!reasoning->is_object()) return InvalidArgumentError("reasoning: must be an object");
    if (const JsonValue* effort = FieldOrNull(*reasoning, "effort"); effort != nullptr) {
      DSV41_ASSIGN_OR_RETURN(std::optional<int> level,
                             ParseReasoningEffort(*effort, "reasoning.effort"));
      (void)level;  // the chat mapping applies it (none: chat mode)
      chat.Set("reasoning_effort", *effort);
    }
  }
  return chat;
}

}  // namespace

Result<GenerationRequest> ParseResponsesRequest(const JsonValue& body, const ServedModel& model,
                                                ResponseStore& store) {
  if (!body.is_object()) return InvalidArgumentError("request body: must be a JSON object");
  DSV41_RETURN_IF_ERROR(CheckAcceptedFields(body));
  auto responses = std::make_shared<ResponsesRequest>();
  responses->store = &store;
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> store_response, BoolField(body, "store"));
  responses->store_response = store_response.value_or(true);
  DSV41_ASSIGN_OR_RETURN(std::vector<std::string> include, StringListField(body, "include"));
  for (const std::string& name : include) {
    if (name == "reasoning.encrypted_content") responses->include_encrypted_reasoning = true;
  }
  DSV41_ASSIGN_OR_RETURN(responses->input_items, InputItems(body, store));
  const JsonValue* input = FieldOrNull(body, "input");
  const size_t own_items = input->is_array() ? input->array.size() : 1;
  DSV41_ASSIGN_OR_RETURN(JsonValue chat, ChatBodyOf(body, responses->input_items,
                                                    responses->input_items.size() - own_items));
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> max_output,
                         IntegerField(body, "max_output_tokens"));
  DSV41_ASSIGN_OR_RETURN(GenerationRequest r,
                         ParseChatBody(chat, model, {max_output, "input", "max_output_tokens"}));
  r.api = Api::kResponses;
  responses->echo = EchoOf(body);
  r.responses = std::move(responses);
  return r;
}

namespace {

// --- Responses: output items and the event stream -----------------------------------------------

JsonValue UsageJson(const OutputProcessor& t) {
  return JsonObject({
      {"input_tokens", JsonInt(t.prompt_tokens())},
      {"input_tokens_details", JsonObject({{"cached_tokens", JsonInt(t.cached_tokens())}})},
      {"output_tokens", JsonInt(t.completion_tokens())},
      {"output_tokens_details", JsonObject({{"reasoning_tokens", JsonInt(t.reasoning_tokens())}})},
      {"total_tokens", JsonInt(int64_t{t.prompt_tokens()} + t.completion_tokens())},
  });
}

// status, incomplete_details and error of a finished response.
struct Outcome {
  std::string_view status;
  JsonValue incomplete_details;
  JsonValue error;
};

Outcome OutcomeOf(const OutputProcessor& t) {
  switch (t.finish()) {
    case FinishReason::kNone:
      return {"in_progress", JsonValue(), JsonValue()};
    case FinishReason::kLength:
      return {"incomplete", JsonObject({{"reason", JsonString("max_output_tokens")}}), JsonValue()};
    case FinishReason::kAbort:
    case FinishReason::kError: {
      const ApiError error = EndedRequestError(t);
      return {"failed", JsonValue(),
              JsonObject(
                  {{"code", JsonString("server_error")}, {"message", JsonString(error.message)}})};
    }
    default:
      return {"completed", JsonValue(), JsonValue()};
  }
}

// One output item as it is built from deltas (streaming) or the processor's result (not).
struct OutputItem {
  enum class Kind { kReasoning, kMessage, kFunctionCall };
  Kind kind = Kind::kMessage;
  std::string id;
  std::string text;  // reasoning text, message text, or function arguments
  std::string call_id;
  std::string name;
};

class ResponsesWriter final : public ResponseWriter {
 public:
  ResponsesWriter(const GenerationRequest& request, const ServedModel& model)
      : responses_(*request.responses),
        id_(RandomId("resp_", 32)),
        created_(UnixSeconds()),
        model_name_(model.NameFor(request.model)) {}

  std::string StreamStart(const OutputProcessor& t) override {
    JsonValue response = ResponseObject(t, JsonArray());
    std::string out = Event("response.created", {{"response", response}});
    return out + Event("response.in_progress", {{"response", std::move(response)}});
  }

  std::string StreamDelta(const ProcessedOutput& d, const OutputProcessor&) override {
    std::string out;
    for (const OutputDelta& delta : d.deltas) {
      switch (delta.kind) {
        case OutputDelta::Kind::kReasoning:
          out += Open(OutputItem::Kind::kReasoning);
          items_.back().text += delta.text;
          out += Event("response.reasoning_text.delta", ItemDelta(delta.text));
          break;
        case OutputDelta::Kind::kContent:
          out += Open(OutputItem::Kind::kMessage);
          items_.back().text += delta.text;
          out += Event("response.output_text.delta",
                       ItemDelta(delta.text, {{"logprobs", JsonArray()}}));
          break;
        case OutputDelta::Kind::kToolCall:
          out += Open(OutputItem::Kind::kFunctionCall);
          items_.back().name = delta.tool_call.name;
          out += Added();
          items_.back().text = delta.tool_call.arguments;
          out += Event("response.function_call_arguments.delta",
                       {{"item_id", JsonString(items_.back().id)},
                        {"output_index", JsonInt(OutputIndex())},
                        {"delta", JsonString(delta.tool_call.arguments)}});
          out += Close();
          break;
      }
    }
    return out;
  }

  std::string StreamEnd(const OutputProcessor& t) override {
    std::string out = Close();
    JsonValue response = Finish(t, OutputOf(items_));
    const std::string_view status = OutcomeOf(t).status;
    const char* event = status == "completed"    ? "response.completed"
                        : status == "incomplete" ? "response.incomplete"
                                                 : "response.failed";
    return out + Event(event, {{"response", std::move(response)}});
  }

  std::string Heartbeat() override { return ": ping\n\n"; }

  JsonValue Response(const OutputProcessor& t) override {
    std::vector<OutputItem> items;
    if (!t.reasoning().empty())
      items.push_back(NewItem(OutputItem::Kind::kReasoning, t.reasoning()));
    if (!t.content().empty()) items.push_back(NewItem(OutputItem::Kind::kMessage, t.content()));
    for (const ParsedToolCall& call : t.tool_calls()) {
      OutputItem item = NewItem(OutputItem::Kind::kFunctionCall, call.arguments);
      item.name = call.name;
      items.push_back(std::move(item));
    }
    return Finish(t, OutputOf(items));
  }

 private:
  static OutputItem NewItem(OutputItem::Kind kind, std::string text) {
    OutputItem item;
    item.kind = kind;
    item.text = std::move(text);
    switch (kind) {
      case OutputItem::Kind::kReasoning:
        item.id = RandomId("rs_", 32);
        break;
      case OutputItem::Kind::kMessage:
        item.id = RandomId("msg_", 32);
        break;
      case OutputItem::Kind::kFunctionCall:
        item.id = RandomId("fc_", 32);
        item.call_id = RandomId("call_", 24);
        break;
    }
    return item;
  }

  // The item as output carries it; `done` false: as response.output_item.added shows it.
  JsonValue ItemJson(const OutputItem& item, bool done) const {
    const std::string text = done ? item.text : "";
    const JsonValue status = JsonString(done ? "completed" : "in_progress");
    switch (item.kind) {
      case OutputItem::Kind::kReasoning: {
        JsonValue out =
            JsonObject({{"id", JsonString(item.id)}, {"type", JsonString("reasoning")}});
        out.Set("summary", done ? JsonArray({SummaryPart(text)}) : JsonArray());
        out.Set("content", done ? JsonArray({ReasoningPart(text)}) : JsonArray());
        if (responses_.include_encrypted_reasoning) {
          out.Set("encrypted_content", JsonString(text));  // plain text: nothing is encrypted
        }
        return out;
      }
      case OutputItem::Kind::kMessage:
        return JsonObject({{"id", JsonString(item.id)},
                           {"type", JsonString("message")},
                           {"status", status},
                           {"role", JsonString("assistant")},
                           {"content", done ? JsonArray({TextPart(text)}) : JsonArray()}});
      case OutputItem::Kind::kFunctionCall:
        return JsonObject({{"id", JsonString(item.id)},
                           {"type", JsonString("function_call")},
                           {"status", status},
                           {"arguments", JsonString(text)},
                           {"call_id", JsonString(item.call_id)},
                           {"name", JsonString(item.name)}});
    }
    return JsonValue();
  }

  static JsonValue TextPart(const std::string& text) {
    return JsonObject({{"type", JsonString("output_text")},
                       {"text", JsonString(text)},
                       {"annotations", JsonArray()},
                       {"logprobs", JsonArray()}});
  }
  static JsonValue ReasoningPart(const std::string& text) {
    return JsonObject({{"type", JsonString("reasoning_text")}, {"text", JsonString(text)}});
  }
  static JsonValue SummaryPart(const std::string& text) {
    return JsonObject({{"type", JsonString("summary_text")}, {"text", JsonString(text)}});
  }

  JsonValue OutputOf(const std::vector<OutputItem>& items) const {
    JsonValue output = JsonArray();
    for (const OutputItem& item : items) output.Push(ItemJson(item, true));
    return output;
  }

  JsonValue ResponseObject(const OutputProcessor& t, JsonValue output) const {
    Outcome outcome = OutcomeOf(t);
    JsonValue response = JsonObject({
        {"id", JsonString(id_)},
        {"object", JsonString("response")},
        {"created_at", JsonInt(created_)},
        {"status", JsonString(std::string(outcome.status))},
        {"error", std::move(outcome.error)},
        {"incomplete_details", std::move(outcome.incomplete_details)},
        {"model", JsonString(model_name_)},
        {"output", std::move(output)},
    });
    for (const JsonMember& m : responses_.echo.object) response.Set(m.key, m.value);
    response.Set("usage", t.ended() ? UsageJson(t) : JsonValue());
    return response;
  }

  // The final response object; stored when the request asked for it and it did not fail.
  JsonValue Finish(const OutputProcessor& t, JsonValue output) {
    JsonValue response = ResponseObject(t, std::move(output));
    if (responses_.store_response && OutcomeOf(t).status != "failed") {
      auto stored = std::make_shared<StoredResponse>();
      stored->response = response;
      stored->input_items = responses_.input_items;
      responses_.store->Put(id_, std::move(stored));
    }
    return response;
  }

  int64_t OutputIndex() const { return static_cast<int64_t>(items_.size()) - 1; }

  std::string Event(std::string_view type, std::vector<JsonMember> members) {
    JsonValue event = JsonObject(
        {{"type", JsonString(std::string(type))}, {"sequence_number", JsonInt(sequence_++)}});
    for (JsonMember& m : members) event.Set(m.key, std::move(m.value));
    return SseEvent(type, event);
  }

  std::vector<JsonMember> ItemDelta(const std::string& delta,
                                    std::vector<JsonMember> extra = {}) const {
    std::vector<JsonMember> members = {{"item_id", JsonString(items_.back().id)},
                                       {"output_index", JsonInt(OutputIndex())},
                                       {"content_index", JsonInt(0)},
                                       {"delta", JsonString(delta)}};
    for (JsonMember& m : extra) members.push_back(std::move(m));
    return members;
  }

  std::string Added() {
    return Event("response.output_item.added", {{"output_index", JsonInt(OutputIndex())},
                                                {"item", ItemJson(items_.back(), false)}});
  }

  // Starts an item of `kind` unless one is open (closing another kind first). A function call's
  // item.added waits for its name (the caller sends it).
  std::string Open(OutputItem::Kind kind) {
    if (open_ && items_.back().kind == kind && kind != OutputItem::Kind::kFunctionCall) return "";
    std::string out = Close();
    items_.push_back(NewItem(kind, ""));
    open_ = true;
    if (kind == OutputItem::Kind::kFunctionCall) return out;
    out += Added();
    out += Event("response.content_part.added", {{"item_id", JsonString(items_.back().id)},
                                                 {"output_index", JsonInt(OutputIndex())},
                                                 {"content_index", JsonInt(0)},
                                                 {"part", EmptyPart(kind)}});
    return out;
  }

  static JsonValue EmptyPart(OutputItem::Kind kind) {
    return kind == OutputItem::Kind::kReasoning ? ReasoningPart("") : TextPart("");
  }

  std::string Close() {
    if (!open_) return "";
    open_ = false;
    const OutputItem& item = items_.back();
    std::vector<JsonMember> at = {{"item_id", JsonString(item.id)},
                                  {"output_index", JsonInt(OutputIndex())}};
    std::string out;
    if (item.kind == OutputItem::Kind::kFunctionCall) {
      at.push_back({"arguments", JsonString(item.text)});
      out += Event("response.function_call_arguments.done", std::move(at));
    } else {
      const bool reasoning = item.kind == OutputItem::Kind::kReasoning;
      at.push_back({"content_index", JsonInt(0)});
      std::vector<JsonMember> part = at;
      at.push_back({"text", JsonString(item.text)});
      out += Event(reasoning ? "response.reasoning_text.done" : "response.output_text.done",
                   std::move(at));
      part.push_back({"part", reasoning ? ReasoningPart(item.text) : TextPart(item.text)});
      out += Event("response.content_part.done", std::move(part));
    }
    out += Event("response.output_item.done",
                 {{"output_index", JsonInt(OutputIndex())}, {"item", ItemJson(item, true)}});
    return out;
  }

  const ResponsesRequest& responses_;
  const std::string id_;
  const int64_t created_;
  const std::string model_name_;
  std::vector<OutputItem> items_;  // streamed so far; the last one is open while open_
  bool open_ = false;
  int64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<ResponseWriter> MakeResponsesWriter(const GenerationRequest& request,
                                                    const ServedModel& model) {
  return std::make_unique<ResponsesWriter>(request, model);
}

Result<JsonValue> GetStoredResponse(ResponseStore& store, std::string_view id) {
  std::shared_ptr<const StoredResponse> stored = store.Get(id);
  if (stored == nullptr) {
    return NotFoundError("response '%.*s' is not stored", static_cast<int>(id.size()), id.data());
  }
  return stored->response;
}

Result<JsonValue> DeleteStoredResponse(ResponseStore& store, std::string_view id) {
  if (!store.Erase(id)) {
    return NotFoundError("response '%.*s' is not stored", static_cast<int>(id.size()), id.data());
  }
  return JsonObject({{"id", JsonString(std::string(id))},
                     {"object", JsonString("response")},
                     {"deleted", JsonBool(true)}});
}

}  // namespace dsv41

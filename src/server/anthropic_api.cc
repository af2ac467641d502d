#include "server/anthropic_api.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "server/api_common.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "text/chat_tokens.h"

namespace dsv41 {
namespace {

// The `type` of block `b` of `field`: an object with a string type. Images are read only from
// user messages (`images`); documents never.
Result<std::string> BlockType(const JsonValue& block, const std::string& field,
                              bool images = false) {
  const JsonValue* type = block.is_object() ? FieldOrNull(block, "type") : nullptr;
  if (type == nullptr || !type->is_string()) {
    return InvalidArgumentError("%s: a content block must be an object with a string 'type'",
                                field.c_str());
  }
  if (type->text == "document" || (type->text == "image" && !images)) {
    return InvalidArgumentError("%s: %s blocks are not supported here%s", field.c_str(),
                                type->text.c_str(),
                                type->text == "image" ? " (images belong to user messages)" : "");
  }
  return type->text;
}

// vision.md §3.1: an image block's source, base64 (or a url).
Result<ChatImage> ImageBlock(const JsonValue& block, const std::string& field) {
  ChatImage image;
  image.field = field;
  const JsonValue* source = FieldOrNull(block, "source");
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> kind, source != nullptr && source->is_object()
                                                              ? StringField(*source, "type")
                                                              : std::optional<std::string>());
  if (kind == "base64") {
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> data, StringField(*source, "data"));
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> media, StringField(*source, "media_type"));
    if (!data.has_value() || data->empty()) {
      return InvalidArgumentError("%s.source.data: a base64 image needs its data", field.c_str());
    }
    image.data = std::move(*data);
    image.media_type = media.value_or("");
    return image;
  }
  if (kind == "url") {
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> url, StringField(*source, "url"));
    if (url.has_value() && !url->empty()) {
      image.url = std::move(*url);
      return image;
    }
  }
  return InvalidArgumentError("%s.source: an image block needs a base64 source", field.c_str());
}

Result<std::string> BlockText(const JsonValue& block, const std::string& field) {
  const JsonValue* text = FieldOrNull(block, "text");
  if (text == nullptr || !text->is_string()) {
    return InvalidArgumentError("%s.text: must be a string", field.c_str());
  }
  return text->text;
}

// Text of `value`: a string, or text blocks joined by "\n\n" (system, tool_result content).
Result<std::string> TextOrTextBlocks(const JsonValue* value, const std::string& field) {
  if (value == nullptr) return std::string();
  if (value->is_string()) return value->text;
  if (!value->is_array()) {
    return InvalidArgumentError("%s: must be a string or an array of text blocks", field.c_str());
  }
  std::string joined;
  for (size_t i = 0; i < value->array.size(); ++i) {
    const std::string block_field = StrFormat("%s[%zu]", field.c_str(), i);
    DSV41_ASSIGN_OR_RETURN(std::string type, BlockType(value->array[i], block_field));
    if (type != "text") {
      return InvalidArgumentError("%s: unsupported block type '%s' (want text)",
                                  block_field.c_str(), type.c_str());
    }
    DSV41_ASSIGN_OR_RETURN(std::string text, BlockText(value->array[i], block_field));
    if (i > 0) joined += "\n\n";
    joined += text;
  }
  return joined;
}

// A tool_result's content (vision.md §3.2): a string or text blocks, joined by "\n\n", into
// `result.text`; with image blocks among them, every block in order into `result.result_parts`.
Status ToolResultContent(const JsonValue* value, const std::string& field, ChatBlock& result) {
  const bool has_image =
      value != nullptr && value->is_array() &&
      std::any_of(value->array.begin(), value->array.end(), [](const JsonValue& block) {
        const JsonValue* type = block.Find("type");
        return type != nullptr && type->is_string() && type->text == "image";
      });
  if (!has_image) {
    DSV41_ASSIGN_OR_RETURN(result.text, TextOrTextBlocks(value, field));
    return OkStatus();
  }
  for (size_t i = 0; i < value->array.size(); ++i) {
    const std::string block_field = StrFormat("%s[%zu]", field.c_str(), i);
    DSV41_ASSIGN_OR_RETURN(std::string type, BlockType(value->array[i], block_field, true));
    if (type == "text") {
      DSV41_ASSIGN_OR_RETURN(std::string text, BlockText(value->array[i], block_field));
      result.result_parts.push_back({ChatBlock::Kind::kText, std::move(text), "", ""});
    } else if (type == "image") {
      DSV41_ASSIGN_OR_RETURN(ChatImage image, ImageBlock(value->array[i], block_field));
      result.result_parts.push_back({ChatBlock::Kind::kImage, "", "", "", std::move(image)});
    } else {
      return InvalidArgumentError("%s: unsupported block type '%s' (want text or image)",
                                  block_field.c_str(), type.c_str());
    }
  }
  return OkStatus();
}

// Calls fn(block, block_field, type) for each block of an array `content`, stopping at the first
// error.
template <typename Fn>
Status ForEachBlock(const JsonValue& content, const std::string& field, Fn fn,
                    bool images = false) {
  for (size_t j = 0; j < content.array.size(); ++j) {
    const JsonValue& block = content.array[j];
    const std::string block_field = StrFormat("%s[%zu]", field.c_str(), j);
    DSV41_ASSIGN_OR_RETURN(std::string type, BlockType(block, block_field, images));
    DSV41_RETURN_IF_ERROR(fn(block, block_field, type));
  }
  return OkStatus();
}

Status MapUserMessage(const JsonValue& content, const std::string& field,
                      const std::set<std::string>& open_calls, ChatMessage& out) {
  if (content.is_string()) {
    out.blocks.push_back({ChatBlock::Kind::kText, content.text, "", ""});
    return OkStatus();
  }
  DSV41_RETURN_IF_ERROR(ForEachBlock(
      content, field,
      [&](const JsonValue& block, const std::string& block_field,
          const std::string& type) -> Status {
        if (type == "text") {
          DSV41_ASSIGN_OR_RETURN(std::string text, BlockText(block, block_field));
          out.blocks.push_back({ChatBlock::Kind::kText, std::move(text), "", ""});
        } else if (type == "image") {
          DSV41_ASSIGN_OR_RETURN(ChatImage image, ImageBlock(block, block_field));
          out.blocks.push_back({ChatBlock::Kind::kImage, "", "", "", std::move(image)});
        } else if (type == "tool_result") {
          DSV41_ASSIGN_OR_RETURN(std::optional<std::string> id, StringField(block, "tool_use_id"));
          if (!id.has_value()) {
            return InvalidArgumentError("%s.tool_use_id: must be a string", block_field.c_str());
          }
          if (open_calls.count(*id) == 0) {
            return InvalidArgumentError(
                "%s.tool_use_id: '%s' answers no tool_use of the assistant message before it",
                block_field.c_str(), id->c_str());
          }
          ChatBlock result{ChatBlock::Kind::kToolResult, "", *id, ""};
          DSV41_RETURN_IF_ERROR(
              ToolResultContent(FieldOrNull(block, "content"), block_field + ".content", result));
          out.blocks.push_back(std::move(result));
        } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking") {
          return InvalidArgumentError("%s: %s blocks belong to assistant messages",
                                      block_field.c_str(), type.c_str());
        } else {
          out.blocks.push_back({ChatBlock::Kind::kUnsupported, "", "", type});
        }
        return OkStatus();
      },
      /*images=*/true));
  if (out.blocks.empty()) out.blocks.push_back({ChatBlock::Kind::kText, "", "", ""});
  return OkStatus();
}

Status MapAssistantMessage(const JsonValue& content, const std::string& field,
                           std::set<std::string>& calls, ChatMessage& out) {
  if (content.is_string()) {
    out.content = content.text;
    return OkStatus();
  }
  bool first_text = true;
  return ForEachBlock(
      content, field,
      [&](const JsonValue& block, const std::string& block_field,
          const std::string& type) -> Status {
        if (type == "text") {
          DSV41_ASSIGN_OR_RETURN(std::string text, BlockText(block, block_field));
          if (!first_text) out.content += "\n\n";
          out.content += text;
          first_text = false;
        } else if (type == "thinking") {
          DSV41_ASSIGN_OR_RETURN(std::optional<std::string> thinking,
                                 StringField(block, "thinking"));
          out.reasoning_content = out.reasoning_content.value_or("") + thinking.value_or("");
        } else if (type == "redacted_thinking") {
          return OkStatus();  // opaque; nothing the model can read
        } else if (type == "tool_use") {
          ChatToolCall call;
          DSV41_ASSIGN_OR_RETURN(std::optional<std::string> id, StringField(block, "id"));
          DSV41_ASSIGN_OR_RETURN(std::optional<std::string> name, StringField(block, "name"));
          if (!id.has_value() || !name.has_value()) {
            return InvalidArgumentError("%s: a tool_use block needs a string id and name",
                                        block_field.c_str());
          }
          const JsonValue* input = FieldOrNull(block, "input");
          if (input != nullptr && !input->is_object()) {
            return InvalidArgumentError("%s.input: must be an object", block_field.c_str());
          }
          call.id = *id;
          call.name = *name;
          call.arguments = input != nullptr ? *input : JsonObject();
          calls.insert(*id);
          out.tool_calls.push_back(std::move(call));
        } else if (type == "tool_result") {
          return InvalidArgumentError("%s: tool_result blocks belong to user messages",
                                      block_field.c_str());
        } else {
          return InvalidArgumentError("%s: unsupported block type '%s' in an assistant message",
                                      block_field.c_str(), type.c_str());
        }
        return OkStatus();
      });
}

Result<std::vector<JsonValue>> MapTools(const JsonValue& body) {
  std::vector<JsonValue> tools;
  const JsonValue* list = FieldOrNull(body, "tools");
  if (list == nullptr) return tools;
  if (!list->is_array()) return InvalidArgumentError("tools: must be an array");
  for (size_t t = 0; t < list->array.size(); ++t) {
    const JsonValue& tool = list->array[t];
    const std::string field = StrFormat("tools[%zu]", t);
    if (!tool.is_object()) return InvalidArgumentError("%s: must be an object", field.c_str());
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> name, StringField(tool, "name"));
    if (!name.has_value()) return InvalidArgumentError("%s.name: must be a string", field.c_str());
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> description,
                           StringField(tool, "description"));
    const JsonValue* schema = FieldOrNull(tool, "input_schema");
    if (schema != nullptr && !schema->is_object()) {
      return InvalidArgumentError("%s.input_schema: must be an object", field.c_str());
    }
    JsonValue function = JsonObject({{"name", JsonString(*name)}});
    if (description.has_value()) function.Set("description", JsonString(*description));
    function.Set("parameters", schema != nullptr ? *schema : JsonObject());
    tools.push_back(
        JsonObject({{"type", JsonString("function")}, {"function", std::move(function)}}));
  }
  return tools;
}

// tool_choice {"type": auto | any | tool | none, "name"}: none omits the tools; nothing forces a
// call (tokenizer-and-chat.md §6.9).
Result<bool> ToolChoiceNone(const JsonValue& body, const std::vector<JsonValue>& tools) {
  const JsonValue* choice = FieldOrNull(body, "tool_choice");
  if (choice == nullptr) return false;
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> type,
                         choice->is_object()
                             ? StringField(*choice, "type")
                             : Result<std::optional<std::string>>(
                                   InvalidArgumentError("tool_choice: must be an object")));
  if (type == "auto" || type == "any" || type == "none") return type == "none";
  if (type != "tool") {
    return InvalidArgumentError("tool_choice.type: must be auto, any, tool or none");
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> name, StringField(*choice, "name"));
  for (const JsonValue& tool : tools) {
    const JsonValue* n = tool.Find("function")->Find("name");
    if (name.has_value() && n->text == *name) return false;
  }
  return InvalidArgumentError("tool_choice.name: '%s' is not among the tools",
                              name.value_or("").c_str());
}

std::string_view StopReason(const OutputProcessor& t) {
  if (!t.tool_calls().empty()) return "tool_use";
  switch (t.finish()) {
    case FinishReason::kStopString:
      return "stop_sequence";
    case FinishReason::kLength:
      return "max_tokens";
    default:
      return "end_turn";
  }
}

JsonValue UsageJson(const OutputProcessor& t) {
  return JsonObject({{"input_tokens", JsonInt(t.prompt_tokens() - t.cached_tokens())},
                     {"cache_creation_input_tokens", JsonInt(0)},
                     {"cache_read_input_tokens", JsonInt(t.cached_tokens())},
                     {"output_tokens", JsonInt(t.completion_tokens())}});
}

// The tool_use input: the call's arguments (a JSON object text, §7.2 step 5) parsed.
JsonValue ToolInput(const ParsedToolCall& call) {
  Result<JsonValue> input = ParseJsonValue(call.arguments, "arguments");
  return input.ok() && input->is_object() ? std::move(input).value() : JsonObject();
}

class MessagesWriter final : public ResponseWriter {
 public:
  MessagesWriter(const GenerationRequest& request, const ServedModel& model)
      : request_(request), id_(RandomId("msg_", 24)), model_name_(model.NameFor(request.model)) {}

  // message_start goes out as soon as the request is admitted, so a long prefill shows the
  // client a live stream (pings follow); the prefix-cache hit is known only from the first
  // output, so its usage reports the cache read in message_delta.
  std::string StreamStart(const OutputProcessor& t) override { return Open(t); }

  std::string StreamDelta(const ProcessedOutput& d, const OutputProcessor& t) override {
    std::string out = Open(t);
    for (const OutputDelta& delta : d.deltas) {
      switch (delta.kind) {
        case OutputDelta::Kind::kReasoning:
          out += Block("thinking", JsonObject({{"type", JsonString("thinking")},
                                               {"thinking", JsonString("")},
                                               {"signature", JsonString("")}}));
          out += BlockDelta(JsonObject(
              {{"type", JsonString("thinking_delta")}, {"thinking", JsonString(delta.text)}}));
          break;
        case OutputDelta::Kind::kContent:
          out +=
              Block("text", JsonObject({{"type", JsonString("text")}, {"text", JsonString("")}}));
          out += BlockDelta(
              JsonObject({{"type", JsonString("text_delta")}, {"text", JsonString(delta.text)}}));
          break;
        case OutputDelta::Kind::kToolCall:
          out += CloseBlock();
          out += Block("tool_use", JsonObject({{"type", JsonString("tool_use")},
                                               {"id", JsonString(RandomId("toolu_", 24))},
                                               {"name", JsonString(delta.tool_call.name)},
                                               {"input", JsonObject()}}));
          out += BlockDelta(JsonObject({{"type", JsonString("input_json_delta")},
                                        {"partial_json", JsonString(delta.tool_call.arguments)}}));
          out += CloseBlock();
          break;
      }
    }
    return out;
  }

  std::string StreamEnd(const OutputProcessor& t) override {
    if (t.finish() == FinishReason::kError || t.finish() == FinishReason::kAbort) {
      return "event: error\ndata: " + AnthropicErrorBody(EndedRequestError(t)) + "\n\n";
    }
    std::string out = Open(t) + CloseBlock();
    const std::string_view reason = StopReason(t);
    out +=
        SseEvent("message_delta",
                 JsonObject({{"type", JsonString("message_delta")},
                             {"delta", JsonObject({{"stop_reason", JsonString(std::string(reason))},
                                                   {"stop_sequence", StopSequence(t)}})},
                             {"usage", UsageJson(t)}}));
    return out + SseEvent("message_stop", JsonObject({{"type", JsonString("message_stop")}}));
  }

  std::string Heartbeat() override {
    return SseEvent("ping", JsonObject({{"type", JsonString("ping")}}));
  }

  JsonValue Response(const OutputProcessor& t) override {
    JsonValue content = JsonArray();
    if (request_.starts_in_reasoning) {
      content.Push(JsonObject({{"type", JsonString("thinking")},
                               {"thinking", JsonString(t.reasoning())},
                               {"signature", JsonString("")}}));
    }
    if (!t.content().empty()) {
      content.Push(JsonObject({{"type", JsonString("text")}, {"text", JsonString(t.content())}}));
    }
    for (const ParsedToolCall& call : t.tool_calls()) {
      content.Push(JsonObject({{"type", JsonString("tool_use")},
                               {"id", JsonString(RandomId("toolu_", 24))},
                               {"name", JsonString(call.name)},
                               {"input", ToolInput(call)}}));
    }
    JsonValue message = Message(t, std::move(content));
    message.Set("stop_reason", JsonString(std::string(StopReason(t))));
    message.Set("stop_sequence", StopSequence(t));
    return message;
  }

 private:
  static JsonValue StopSequence(const OutputProcessor& t) {
    return t.finish() == FinishReason::kStopString && t.tool_calls().empty()
               ? JsonString(std::string(t.stop_sequence()))
               : JsonValue();
  }

  JsonValue Message(const OutputProcessor& t, JsonValue content) const {
    return JsonObject({{"id", JsonString(id_)},
                       {"type", JsonString("message")},
                       {"role", JsonString("assistant")},
                       {"model", JsonString(model_name_)},
                       {"content", std::move(content)},
                       {"stop_reason", JsonValue()},
                       {"stop_sequence", JsonValue()},
                       {"usage", UsageJson(t)}});
  }

  // message_start (and the thinking block of a thinking-mode prompt) before the first delta.
  std::string Open(const OutputProcessor& t) {
    if (started_) return "";
    started_ = true;
    JsonValue message = Message(t, JsonArray());
    JsonValue* usage = nullptr;
    for (JsonMember& m : message.object) {
      if (m.key == "usage") usage = &m.value;
    }
    usage->Set("output_tokens", JsonInt(0));
    std::string out = SseEvent("message_start", JsonObject({{"type", JsonString("message_start")},
                                                            {"message", std::move(message)}}));
    if (request_.starts_in_reasoning) {
      out += Block("thinking", JsonObject({{"type", JsonString("thinking")},
                                           {"thinking", JsonString("")},
                                           {"signature", JsonString("")}}));
    }
    return out;
  }

  // Opens a block of `kind` unless one is open already (closing another kind first).
  std::string Block(std::string_view kind, JsonValue start) {
    if (open_ == kind && kind != "tool_use") return "";
    std::string out = CloseBlock();
    open_ = std::string(kind);
    out += SseEvent("content_block_start", JsonObject({{"type", JsonString("content_block_start")},
                                                       {"index", JsonInt(index_)},
                                                       {"content_block", std::move(start)}}));
    return out;
  }

  std::string BlockDelta(JsonValue delta) const {
    return SseEvent("content_block_delta", JsonObject({{"type", JsonString("content_block_delta")},
                                                       {"index", JsonInt(index_)},
                                                       {"delta", std::move(delta)}}));
  }

  std::string CloseBlock() {
    if (open_.empty()) return "";
    open_.clear();
    return SseEvent("content_block_stop", JsonObject({{"type", JsonString("content_block_stop")},
                                                      {"index", JsonInt(index_++)}}));
  }

  const GenerationRequest& request_;
  const std::string id_;
  const std::string model_name_;
  bool started_ = false;
  std::string open_;  // the open block's type, or empty
  int64_t index_ = 0;
};

// `thinking` {type: enabled | adaptive | disabled, budget_tokens} and `output_config.effort`
// (low | medium | high | max, or the other names and numbers of §6.1) into the chat options.
Status MapThinking(const JsonValue& body, ChatOptions& options) {
  if (const JsonValue* thinking = FieldOrNull(body, "thinking"); thinking != nullptr) {
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> type,
                           thinking->is_object()
                               ? StringField(*thinking, "type")
                               : Result<std::optional<std::string>>(
                                     InvalidArgumentError("thinking: must be an object")));
    if (type == "enabled" || type == "adaptive") {
      options.mode = ChatMode::kThinking;
    } else if (type == "disabled") {
      options.mode = ChatMode::kChat;
    } else {
      return InvalidArgumentError("thinking.type: must be enabled, adaptive or disabled");
    }
    DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> budget, IntegerField(*thinking, "budget_tokens"));
    (void)budget;  // not enforced (engine policy, docs/server.md)
  }
  const JsonValue* config = FieldOrNull(body, "output_config");
  if (config == nullptr) return OkStatus();
  if (!config->is_object()) return InvalidArgumentError("output_config: must be an object");
  const JsonValue* effort = FieldOrNull(*config, "effort");
  if (effort == nullptr || effort->is_null()) return OkStatus();
  DSV41_ASSIGN_OR_RETURN(std::optional<int> level,
                         ParseReasoningEffort(*effort, "output_config.effort"));
  if (level.has_value()) {
    options.reasoning_effort = *level;
  } else {
    options.mode = ChatMode::kChat;  // "none"
  }
  return OkStatus();
}

// A system message of `messages` (Claude Code sends them between turns): rendered where it
// stands (§6.2; it counts as a user turn for the thinking rules).
Status MapSystemMessage(const JsonValue& content, const std::string& field, ChatMessage& out) {
  DSV41_ASSIGN_OR_RETURN(out.content, TextOrTextBlocks(&content, field));
  return OkStatus();
}

}  // namespace

Status MapMessagesRequest(const JsonValue& body, std::vector<ChatMessage>& messages,
                          ChatOptions& options) {
  if (!body.is_object()) return InvalidArgumentError("request body: must be a JSON object");
  DSV41_RETURN_IF_ERROR(MapThinking(body, options));
  DSV41_ASSIGN_OR_RETURN(std::vector<JsonValue> tools, MapTools(body));
  DSV41_ASSIGN_OR_RETURN(bool choice_none, ToolChoiceNone(body, tools));
  if (choice_none) tools.clear();

  const JsonValue* list = FieldOrNull(body, "messages");
  if (list == nullptr || !list->is_array() || list->array.empty()) {
    return InvalidArgumentError("messages: must be a non-empty array");
  }
  ChatMessage system;
  system.role = "system";
  DSV41_ASSIGN_OR_RETURN(system.content, TextOrTextBlocks(FieldOrNull(body, "system"), "system"));
  const bool has_system = FieldOrNull(body, "system") != nullptr;
  if (has_system || !tools.empty()) {
    system.tools = std::move(tools);
    messages.push_back(std::move(system));
  }
  std::set<std::string> open_calls;  // tool_use ids of the last assistant message
  for (size_t i = 0; i < list->array.size(); ++i) {
    const JsonValue& m = list->array[i];
    const std::string field = StrFormat("messages[%zu]", i);
    if (!m.is_object()) return InvalidArgumentError("%s: must be an object", field.c_str());
    DSV41_ASSIGN_OR_RETURN(std::optional<std::string> role, StringField(m, "role"));
    const JsonValue* content = FieldOrNull(m, "content");
    if (content == nullptr || !(content->is_string() || content->is_array())) {
      return InvalidArgumentError("%s.content: must be a string or an array of blocks",
                                  field.c_str());
    }
    ChatMessage out;
    out.role = role.value_or("");
    if (out.role == "user") {
      DSV41_RETURN_IF_ERROR(MapUserMessage(*content, field + ".content", open_calls, out));
      open_calls.clear();
    } else if (out.role == "assistant") {
      open_calls.clear();
      DSV41_RETURN_IF_ERROR(MapAssistantMessage(*content, field + ".content", open_calls, out));
    } else if (out.role == "system") {
      DSV41_RETURN_IF_ERROR(MapSystemMessage(*content, field + ".content", out));
    } else {
      return InvalidArgumentError("%s.role: unknown role '%s' (want user, assistant or system)",
                                  field.c_str(), out.role.c_str());
    }
    messages.push_back(std::move(out));
  }
  return OkStatus();
}

namespace {

struct RenderedMessages {
  Submission submission;  // the prompt ids (image placeholders expanded) and the images
  bool ends_in_reasoning = false;
};

Result<RenderedMessages> RenderMessages(const JsonValue& body, const ServedModel& model) {
  std::vector<ChatMessage> messages;
  ChatOptions options;
  DSV41_RETURN_IF_ERROR(MapMessagesRequest(body, messages, options));
  DSV41_ASSIGN_OR_RETURN(ChatPrompt prompt, RenderChatMessages(std::move(messages), options));
  RenderedMessages rendered;
  rendered.ends_in_reasoning = prompt.ends_in_reasoning;
  DSV41_ASSIGN_OR_RETURN(rendered.submission.prompt_ids,
                         EncodeChatPrompt(*model.tokenizer, prompt));
  DSV41_RETURN_IF_ERROR(AttachImages(prompt.images, model.images, rendered.submission));
  return rendered;
}

}  // namespace

Result<GenerationRequest> ParseMessagesRequest(const JsonValue& body, const ServedModel& model) {
  DSV41_ASSIGN_OR_RETURN(RenderedMessages rendered, RenderMessages(body, model));
  GenerationRequest r;
  r.api = Api::kMessages;
  r.parse_chat = true;
  r.submission.params.skip_special_tokens = true;
  r.submission.params.keep_chat_markers = true;
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> name, StringField(body, "model"));
  r.model = name.value_or("");
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> stream, BoolField(body, "stream"));
  r.stream = stream.value_or(false);
  SamplingParams& params = r.submission.params;
  DSV41_RETURN_IF_ERROR(ReadSamplingFields(body, params));
  DSV41_ASSIGN_OR_RETURN(r.submission.params.stop, StringListField(body, "stop_sequences"));
  for (size_t i = 0; i < r.submission.params.stop.size(); ++i) {
    if (r.submission.params.stop[i].empty()) {
      return InvalidArgumentError("stop_sequences[%zu]: must not be empty", i);
    }
  }
  r.starts_in_reasoning = rendered.ends_in_reasoning;
  r.submission.prompt_ids = std::move(rendered.submission.prompt_ids);
  r.submission.options.images = std::move(rendered.submission.options.images);
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, IntegerField(body, "max_tokens"));
  if (!max_tokens.has_value()) return InvalidArgumentError("max_tokens: is required");
  DSV41_ASSIGN_OR_RETURN(params.max_tokens,
                         OutputBudget(static_cast<int64_t>(r.submission.prompt_ids.size()),
                                      max_tokens, model, "messages", "max_tokens"));
  DSV41_RETURN_IF_ERROR(ValidateSamplingParams(params, model.vocab_size));
  return r;
}

Result<JsonValue> CountMessagesTokens(const JsonValue& body, const ServedModel& model) {
  DSV41_ASSIGN_OR_RETURN(RenderedMessages rendered, RenderMessages(body, model));
  return JsonObject(
      {{"input_tokens", JsonInt(static_cast<int64_t>(rendered.submission.prompt_ids.size()))}});
}

std::unique_ptr<ResponseWriter> MakeMessagesWriter(const GenerationRequest& request,
                                                   const ServedModel& model) {
  return std::make_unique<MessagesWriter>(request, model);
}

}  // namespace dsv41

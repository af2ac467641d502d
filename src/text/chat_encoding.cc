#include "text/chat_encoding.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/log.h"
#include "text/special_tokens.h"

namespace dsv41 {
namespace {

// §6.7: task names, parallel to kTaskTokens (text/special_tokens.h).
constexpr std::array<std::string_view, 6> kTasks = {"action", "query", "authority",
                                                    "domain", "title", "read_url"};
// Every literal above that may appear inside template text.
constexpr std::array<std::string_view, 16> kTemplateSpecials = {
    kBos,           kEos,           kSystemToken,   kUserToken,           kAssistantToken,
    kThinkOpen,     kThinkClose,    kDsml,          kLatestReminderToken, kTaskTokens[0],
    kTaskTokens[1], kTaskTokens[2], kTaskTokens[3], kTaskTokens[4],       kTaskTokens[5],
    kImageToken};

constexpr std::string_view kEffortPrefix = "Reasoning Effort: ";
constexpr std::string_view kEffortSuffix =
    " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";

// §6.6, up to {SCHEMAS} and after it.
constexpr std::string_view kToolsBlockHead =
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<｜DSML｜ calls>\" block like the following:\n"
    "\n"
    "<｜DSML｜ calls>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜ parameter>\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜ invoke>\n"
    "</｜DSML｜ calls>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n";
constexpr std::string_view kToolsBlockTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";
constexpr std::string_view kResponseFormatHead =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// Collects the prompt as text and special-token pieces (§6.10).
class PromptBuilder {
 public:
  // Text the template writes: special-token literals in it become special pieces.
  void Template(std::string_view text) {
    while (!text.empty()) {
      size_t best_pos = std::string_view::npos;
      size_t best_len = 0;
      for (const std::string_view special : kTemplateSpecials) {
        const size_t pos = text.find(special);
        if (pos < best_pos ||
            (pos == best_pos && pos != std::string_view::npos && special.size() > best_len)) {
          best_pos = pos;
          best_len = special.size();
        }
      }
      if (best_pos == std::string_view::npos) {
        User(text);
        return;
      }
      User(text.substr(0, best_pos));
      Special(text.substr(best_pos, best_len));
      text.remove_prefix(best_pos + best_len);
    }
  }
  // Text the client supplied: never a special token.
  void User(std::string_view text) {
    if (text.empty()) return;
    prompt_.text.append(text);
    if (prompt_.pieces.empty() || prompt_.pieces.back().kind != PromptPiece::Kind::kText) {
      prompt_.pieces.push_back({PromptPiece::Kind::kText, std::string()});
    }
    prompt_.pieces.back().text.append(text);
  }
  void Special(std::string_view token) {
    prompt_.text.append(token);
    prompt_.pieces.push_back({PromptPiece::Kind::kSpecialToken, std::string(token)});
  }
  // vision.md §3.2: an image part is the placeholder token; its source is listed in order.
  void Image(const ChatImage& image) {
    Special(kImageToken);
    prompt_.images.push_back(image);
  }

  ChatPrompt Finish(ChatMode mode) && {
    prompt_.mode = mode;
    prompt_.ends_in_reasoning = prompt_.text.ends_with(kThinkOpen);
    return std::move(prompt_);
  }

 private:
  ChatPrompt prompt_;
};

bool IsUserLike(const ChatMessage& message, size_t index) {
  return message.role == "user" || message.role == "developer" ||
         (message.role == "system" && index > 0);
}

// §6.3: the index of the last user-like message, or -1.
long LastUserLikeIndex(const std::vector<ChatMessage>& messages) {
  long last = -1;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (IsUserLike(messages[i], i)) last = static_cast<long>(i);
  }
  return last;
}

bool ContainsImageToken(std::string_view text) { return text.find(kImageToken) != text.npos; }

Status ValidateMessages(const std::vector<ChatMessage>& messages) {
  static constexpr std::array<std::string_view, 6> kRoles = {
      "system", "developer", "user", "assistant", "tool", "latest_reminder"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (std::find(kRoles.begin(), kRoles.end(), m.role) == kRoles.end()) {
      return InvalidArgumentError("messages[%zu].role: unknown role '%s'", i, m.role.c_str());
    }
    if (!m.task.empty() && std::find(kTasks.begin(), kTasks.end(), m.task) == kTasks.end()) {
      return InvalidArgumentError("messages[%zu].task: unknown task '%s'", i, m.task.c_str());
    }
    const auto image_error = [&](const char* field) {
      return InvalidArgumentError(
          "messages[%zu].%s: contains the image placeholder <｜deepseek_image｜>, but this "
          "deployment is text-only",
          i, field);
    };
    if (ContainsImageToken(m.content)) return image_error("content");
    for (const ChatBlock& block : m.blocks) {
      if (ContainsImageToken(block.text)) return image_error("content");
      for (const ChatBlock& part : block.result_parts) {
        if (ContainsImageToken(part.text)) return image_error("content");
      }
    }
    if (m.reasoning_content.has_value() && ContainsImageToken(*m.reasoning_content)) {
      return image_error("reasoning_content");
    }
    if (m.role == "developer" && m.content.empty()) {
      return InvalidArgumentError("messages[%zu].content: a developer message must not be empty",
                                  i);
    }
    for (size_t k = 0; k < m.tool_calls.size(); ++k) {
      if (!m.tool_calls[k].arguments.is_object()) {
        return InvalidArgumentError(
            "messages[%zu].tool_calls[%zu].function.arguments: must be a JSON object", i, k);
      }
    }
  }
  return OkStatus();
}

std::vector<ChatBlock> UserBlocks(ChatMessage& message) {
  if (!message.blocks.empty()) return std::move(message.blocks);
  return {ChatBlock{ChatBlock::Kind::kText, std::move(message.content), "", ""}};
}

// §6.2 step 2: tool messages become tool_result blocks of user messages; consecutive user
// messages merge (unless the earlier carries a task).
std::vector<ChatMessage> MergeToolAndUserMessages(std::vector<ChatMessage> messages) {
  std::vector<ChatMessage> merged;
  merged.reserve(messages.size());
  for (ChatMessage& m : messages) {
    const bool after_user = !merged.empty() && merged.back().role == "user";
    if (m.role == "tool") {
      ChatBlock block{ChatBlock::Kind::kToolResult, std::move(m.content), std::move(m.tool_call_id),
                      ""};
      if (after_user) {
        merged.back().blocks.push_back(std::move(block));
      } else {
        ChatMessage user;
        user.role = "user";
        user.blocks.push_back(std::move(block));
        merged.push_back(std::move(user));
      }
    } else if (m.role == "user") {
      std::vector<ChatBlock> blocks = UserBlocks(m);
      if (after_user && merged.back().task.empty()) {
        for (ChatBlock& block : blocks) merged.back().blocks.push_back(std::move(block));
      } else {
        m.blocks = std::move(blocks);
        merged.push_back(std::move(m));
      }
    } else {
      merged.push_back(std::move(m));
    }
  }
  return merged;
}

// §6.2 step 3: order the tool results of each user message by the call order of the most recent
// earlier assistant message with tool calls.
void SortToolResults(std::vector<ChatMessage>& messages) {
  const ChatMessage* last_caller = nullptr;
  for (ChatMessage& m : messages) {
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      last_caller = &m;
      continue;
    }
    if (m.role != "user" || last_caller == nullptr) continue;
    std::vector<size_t> slots;
    for (size_t k = 0; k < m.blocks.size(); ++k) {
      if (m.blocks[k].kind == ChatBlock::Kind::kToolResult) slots.push_back(k);
    }
    if (slots.size() < 2) continue;
    std::map<std::string, size_t> rank_of_id;  // a repeated id takes its last position
    for (size_t c = 0; c < last_caller->tool_calls.size(); ++c) {
      if (last_caller->tool_calls[c].id.has_value()) {
        rank_of_id[*last_caller->tool_calls[c].id] = c;
      }
    }
    std::vector<ChatBlock> results;
    for (const size_t slot : slots) results.push_back(std::move(m.blocks[slot]));
    const auto rank = [&](const ChatBlock& block) {
      const auto it = rank_of_id.find(block.tool_use_id);
      return it == rank_of_id.end() ? size_t{0} : it->second;
    };
    std::stable_sort(results.begin(), results.end(),
                     [&](const ChatBlock& a, const ChatBlock& b) { return rank(a) < rank(b); });
    for (size_t k = 0; k < slots.size(); ++k) m.blocks[slots[k]] = std::move(results[k]);
  }
}

void RenderToolCalls(const std::vector<ChatToolCall>& calls, PromptBuilder& out) {
  out.Template("\n\n<｜DSML｜ calls>\n");
  for (size_t k = 0; k < calls.size(); ++k) {
    if (k > 0) out.Template("\n");
    out.Template("<｜DSML｜ invoke name=\"");
    out.User(calls[k].name);
    out.Template("\">\n");
    const auto& members = calls[k].arguments.object;
    for (size_t p = 0; p < members.size(); ++p) {
      if (p > 0) out.Template("\n");
      out.Template("<｜DSML｜ parameter name=\"");
      out.User(members[p].key);
      const JsonValue& value = members[p].value;
      if (value.is_string()) {
        out.Template("\" string=\"true\">");
        out.User(value.text);
      } else {
        out.Template("\" string=\"false\">");
        out.User(FormatJson(value));
      }
      out.Template("</｜DSML｜ parameter>");
    }
    out.Template("\n</｜DSML｜ invoke>");
  }
  out.Template("\n</｜DSML｜ calls>");
}

// The tools and response-format suffixes of system and developer messages (§6.4, §6.6).
void RenderSystemSuffixes(const ChatMessage& m, PromptBuilder& out) {
  if (!m.tools.empty()) {
    out.Template("\n\n");
    out.Template(kToolsBlockHead);
    for (size_t t = 0; t < m.tools.size(); ++t) {
      if (t > 0) out.Template("\n");
      const JsonValue* function = m.tools[t].Find("function");
      out.User(FormatJson(function != nullptr ? *function : m.tools[t]));
    }
    out.Template(kToolsBlockTail);
  }
  if (m.response_format.has_value()) {
    out.Template(kResponseFormatHead);
    out.User(FormatJson(*m.response_format));
  }
}

// §6.2 step 5: before the last user-like message, assistant messages lose their reasoning and
// messages of roles other than user, system, tool and latest_reminder are dropped.
std::vector<ChatMessage> DropPastThinking(std::vector<ChatMessage> messages) {
  const long last = LastUserLikeIndex(messages);
  std::vector<ChatMessage> kept;
  for (size_t i = 0; i < messages.size(); ++i) {
    ChatMessage& m = messages[i];
    const bool at_or_after_last = static_cast<long>(i) >= last;
    if (at_or_after_last || m.role == "user" || m.role == "system" || m.role == "tool" ||
        m.role == "latest_reminder") {
      kept.push_back(std::move(m));
    } else if (m.role == "assistant") {
      m.reasoning_content.reset();
      kept.push_back(std::move(m));
    }
  }
  return kept;
}

// What every message's rendering depends on beyond the message itself (§6.2 step 4, §6.3).
struct RenderSettings {
  bool thinking = false;     // thinking mode
  bool drop = false;         // the effective drop of past reasoning
  long last_user = -1;       // L, of the list as rendered
  int reasoning_effort = 0;  // 1..100
};

// §6.4 step 3 for a user message: its blocks joined by "\n\n".
void RenderUserBlocks(const ChatMessage& m, PromptBuilder& out) {
  for (size_t k = 0; k < m.blocks.size(); ++k) {
    if (k > 0) out.Template("\n\n");
    const ChatBlock& block = m.blocks[k];
    switch (block.kind) {
      case ChatBlock::Kind::kText:
        out.User(block.text);
        break;
      case ChatBlock::Kind::kToolResult:
        out.Template("<tool_result>");
        if (block.result_parts.empty()) out.User(block.text);
        for (size_t p = 0; p < block.result_parts.size(); ++p) {
          if (p > 0) out.User("\n\n");  // as the text-only content's blocks are joined
          const ChatBlock& part = block.result_parts[p];
          if (part.kind == ChatBlock::Kind::kImage) {
            out.Image(part.image);
          } else {
            out.User(part.text);
          }
        }
        out.Template("</tool_result>");
        break;
      case ChatBlock::Kind::kUnsupported:
        out.Template("[Unsupported ");
        out.User(block.type);
        out.Template("]");
        break;
      case ChatBlock::Kind::kImage:
        out.Image(block.image);
        break;
    }
  }
}

// §6.4 steps 1–3: the system header and effort line of message 0, then message i by its role.
void RenderMessage(const std::vector<ChatMessage>& messages, size_t i,
                   const RenderSettings& settings, PromptBuilder& out) {
  const ChatMessage& m = messages[i];
  if (i == 0 && (settings.thinking || m.role == "system")) out.Special(kSystemToken);
  if (i == 0 && settings.thinking) {
    out.Template(kEffortPrefix);
    out.Template(std::to_string(settings.reasoning_effort));
    out.Template(kEffortSuffix);
  }
  if (m.role == "system") {
    if (i > 0) out.Special(kSystemToken);
    out.User(m.content);
    RenderSystemSuffixes(m, out);
  } else if (m.role == "developer") {
    out.Special(kUserToken);
    out.User(m.content);
    RenderSystemSuffixes(m, out);
  } else if (m.role == "user") {
    out.Special(kUserToken);
    RenderUserBlocks(m, out);
  } else if (m.role == "latest_reminder") {
    out.Special(kLatestReminderToken);
    out.User(m.content);
  } else if (m.role == "assistant") {
    const bool after_task = i > 0 && !messages[i - 1].task.empty();
    if (settings.thinking && !after_task &&
        (!settings.drop || static_cast<long>(i) > settings.last_user)) {
      out.User(m.reasoning_content.value_or(""));
      out.Special(kThinkClose);
    }
    out.User(m.content);
    if (!m.tool_calls.empty()) RenderToolCalls(m.tool_calls, out);
    out.Special(kEos);
  }
}

// Transition (§6.4 step 4, §6.7): the task tokens or assistant header after message i, unless a
// message other than assistant or latest_reminder follows.
void RenderTransition(const std::vector<ChatMessage>& messages, size_t i,
                      const RenderSettings& settings, PromptBuilder& out) {
  if (i + 1 < messages.size() && messages[i + 1].role != "assistant" &&
      messages[i + 1].role != "latest_reminder") {
    return;
  }
  const ChatMessage& m = messages[i];
  if (!m.task.empty()) {
    const size_t task_idx =
        static_cast<size_t>(std::find(kTasks.begin(), kTasks.end(), m.task) - kTasks.begin());
    if (m.task == "action") {
      out.Special(kAssistantToken);
      out.Special(settings.thinking ? kThinkOpen : kThinkClose);
    }
    out.Special(kTaskTokens[task_idx]);
  } else if (IsUserLike(m, i)) {
    out.Special(kAssistantToken);
    out.Special(settings.thinking && (!settings.drop || static_cast<long>(i) >= settings.last_user)
                    ? kThinkOpen
                    : kThinkClose);
  }
}

}  // namespace

Result<ChatPrompt> RenderChatMessages(std::vector<ChatMessage> messages,
                                      const ChatOptions& options) {
  DSV41_RETURN_IF_ERROR(ValidateMessages(messages));
  if (options.reasoning_effort < 1 || options.reasoning_effort > 100) {
    return InvalidArgumentError("reasoning_effort %d out of range 1..100",
                                options.reasoning_effort);
  }
  RenderSettings settings;
  settings.thinking = options.mode == ChatMode::kThinking;
  settings.reasoning_effort = options.reasoning_effort;

  messages = MergeToolAndUserMessages(std::move(messages));
  SortToolResults(messages);
  const bool any_tools = std::any_of(messages.begin(), messages.end(),
                                     [](const ChatMessage& m) { return !m.tools.empty(); });
  settings.drop = options.drop_thinking && !any_tools;
  if (settings.thinking && settings.drop) messages = DropPastThinking(std::move(messages));
  settings.last_user = LastUserLikeIndex(messages);

  PromptBuilder out;
  out.Special(kBos);
  for (size_t i = 0; i < messages.size(); ++i) {
    RenderMessage(messages, i, settings, out);
    RenderTransition(messages, i, settings, out);
  }
  return std::move(out).Finish(options.mode);
}

Result<std::optional<int>> ParseReasoningEffort(const JsonValue& value, std::string_view field) {
  const int field_len = static_cast<int>(field.size());
  if (value.kind == JsonValue::Kind::kInteger) {
    const std::string& digits = value.text;
    const bool in_range = digits.size() <= 3 && digits[0] != '-' &&
                          std::atoi(digits.c_str()) >= 1 && std::atoi(digits.c_str()) <= 100;
    if (!in_range) {
      return InvalidArgumentError("%.*s: %s is out of range 1..100", field_len, field.data(),
                                  digits.c_str());
    }
    return std::optional<int>(std::atoi(digits.c_str()));
  }
  if (value.kind != JsonValue::Kind::kString) {
    return InvalidArgumentError(
        "%.*s: must be an integer 1..100 or one of none, minimal, low, medium, high, xhigh, max",
        field_len, field.data());
  }
  static const std::map<std::string, int, std::less<>> kLevels = {
      {"low", 50},   {"high", 75},   {"max", 100},
      {"xhigh", 75}, {"medium", 75}, {"minimal", 50},  // engine aliases (§6.1)
  };
  if (value.text == "none") return std::optional<int>();
  const auto it = kLevels.find(value.text);
  if (it == kLevels.end()) {
    return InvalidArgumentError(
        "%.*s: unknown level '%s' (want an integer 1..100 or one of none, minimal, low, medium, "
        "high, xhigh, max)",
        field_len, field.data(), value.text.c_str());
  }
  if (value.text == "xhigh" || value.text == "medium" || value.text == "minimal") {
    DSV41_LOG_DEBUG("reasoning_effort '%s' maps to %d", value.text.c_str(), it->second);
  }
  return std::optional<int>(it->second);
}

namespace {

bool IsImagePartType(std::string_view type) {
  return type == "image_url" || type == "image" || type == "input_image";
}

// A member that is absent or JSON null reads as nullptr.
const JsonValue* Member(const JsonValue& object, std::string_view key) {
  const JsonValue* value = object.Find(key);
  return value == nullptr || value->is_null() ? nullptr : value;
}

// Content of a non-user message (or a tool result): a string, null, or text parts joined by
// "\n\n" (§6.9).
// The `type` of content part `p`: an object with a string type.
Result<const JsonValue*> ContentPartType(const JsonValue& part, const std::string& field,
                                         size_t p) {
  const JsonValue* type = part.Find("type");
  if (!part.is_object() || type == nullptr || !type->is_string()) {
    return InvalidArgumentError("%s[%zu]: a content part must be an object with a string 'type'",
                                field.c_str(), p);
  }
  return type;
}

// The field an image part's errors name: its own, or the input field a part the Responses
// endpoint made carries.
std::string ImagePartField(const JsonValue& part, std::string field) {
  const JsonValue* named = part.Find("dsv41_field");
  return named != nullptr && named->is_string() ? named->text : std::move(field);
}

// vision.md §3.1: an image_url part's url (a string, or an object with a string `url`); an image
// part without a source is a request error.
Result<ChatImage> ImagePart(const JsonValue& part, const std::string& field) {
  ChatImage image;
  image.field = field;
  const JsonValue* source = part.Find("image_url");
  if (source != nullptr && source->is_object()) source = source->Find("url");
  if (source == nullptr || !source->is_string() || source->text.empty()) {
    return InvalidArgumentError("%s.image_url: an image part needs a url (a data: URL)",
                                image.field.c_str());
  }
  image.url = source->text;
  return image;
}

Result<std::string> JoinedTextContent(const JsonValue* content, const std::string& field) {
  if (content == nullptr) return std::string();
  if (content->is_string()) return content->text;
  if (!content->is_array()) {
    return InvalidArgumentError("%s: must be a string, null or an array of parts", field.c_str());
  }
  std::string joined;
  for (size_t p = 0; p < content->array.size(); ++p) {
    const JsonValue& part = content->array[p];
    DSV41_ASSIGN_OR_RETURN(const JsonValue* type, ContentPartType(part, field, p));
    if (IsImagePartType(type->text)) {
      return InvalidArgumentError(
          "%s[%zu]: image parts are only allowed in user messages (vision.md §3.4)", field.c_str(),
          p);
    }
    const JsonValue* text = part.Find("text");
    if (type->text != "text" || text == nullptr || !text->is_string()) {
      return InvalidArgumentError("%s[%zu]: unsupported content part type '%s' (want text)",
                                  field.c_str(), p, type->text.c_str());
    }
    if (p > 0) joined += "\n\n";
    joined += text->text;
  }
  return joined;
}

// User content: one text block per string or text part, one image block per image part; other
// part types render "[Unsupported <type>]" (release behaviour).
Result<std::vector<ChatBlock>> UserContentBlocks(const JsonValue* content, const std::string& field,
                                                 bool images) {
  std::vector<ChatBlock> blocks;
  if (content == nullptr) {
    blocks.push_back({ChatBlock::Kind::kText, "", "", ""});
    return blocks;
  }
  if (content->is_string()) {
    blocks.push_back({ChatBlock::Kind::kText, content->text, "", ""});
    return blocks;
  }
  if (!content->is_array()) {
    return InvalidArgumentError("%s: must be a string, null or an array of parts", field.c_str());
  }
  for (size_t p = 0; p < content->array.size(); ++p) {
    const JsonValue& part = content->array[p];
    DSV41_ASSIGN_OR_RETURN(const JsonValue* type, ContentPartType(part, field, p));
    if (type->text == "text") {
      const JsonValue* text = part.Find("text");
      if (text == nullptr || !text->is_string()) {
        return InvalidArgumentError("%s[%zu].text: must be a string", field.c_str(), p);
      }
      blocks.push_back({ChatBlock::Kind::kText, text->text, "", ""});
    } else if (IsImagePartType(type->text)) {
      const std::string part_field = ImagePartField(part, StrFormat("%s[%zu]", field.c_str(), p));
      if (!images) {
        return InvalidArgumentError("%s: image content is not supported (text-only deployment)",
                                    part_field.c_str());
      }
      DSV41_ASSIGN_OR_RETURN(ChatImage image, ImagePart(part, part_field));
      blocks.push_back({ChatBlock::Kind::kImage, "", "", "", std::move(image)});
    } else {
      blocks.push_back({ChatBlock::Kind::kUnsupported, "", "", type->text});
    }
  }
  if (blocks.empty()) blocks.push_back({ChatBlock::Kind::kText, "", "", ""});
  return blocks;
}

Result<ChatToolCall> MapToolCall(const JsonValue& call, const std::string& field) {
  if (!call.is_object()) return InvalidArgumentError("%s: must be an object", field.c_str());
  ChatToolCall out;
  if (const JsonValue* id = Member(call, "id"); id != nullptr) {
    if (!id->is_string()) return InvalidArgumentError("%s.id: must be a string", field.c_str());
    out.id = id->text;
  }
  const JsonValue* function = Member(call, "function");
  if (function == nullptr || !function->is_object()) {
    return InvalidArgumentError("%s.function: must be an object", field.c_str());
  }
  const JsonValue* name = Member(*function, "name");
  if (name == nullptr || !name->is_string()) {
    return InvalidArgumentError("%s.function.name: must be a string", field.c_str());
  }
  out.name = name->text;
  const JsonValue* arguments = Member(*function, "arguments");
  const std::string arguments_field = field + ".function.arguments";
  if (arguments != nullptr && arguments->is_string()) {
    Result<JsonValue> parsed = ParseJsonValue(arguments->text, arguments_field);
    if (!parsed.ok()) return parsed.status();
    out.arguments = std::move(parsed).value();
  } else if (arguments != nullptr) {
    out.arguments = *arguments;
  }
  if (!out.arguments.is_object()) {
    return InvalidArgumentError("%s: must be a JSON object (or a string holding one)",
                                arguments_field.c_str());
  }
  return out;
}

Result<ChatMessage> MapMessage(const JsonValue& message, size_t index, bool images) {
  const std::string field = StrFormat("messages[%zu]", index);
  if (!message.is_object()) return InvalidArgumentError("%s: must be an object", field.c_str());
  const JsonValue* role = Member(message, "role");
  if (role == nullptr || !role->is_string()) {
    return InvalidArgumentError("%s.role: must be a string", field.c_str());
  }
  ChatMessage out;
  out.role = role->text;
  const JsonValue* content = Member(message, "content");
  const std::string content_field = field + ".content";
  if (out.role == "user") {
    DSV41_ASSIGN_OR_RETURN(out.blocks, UserContentBlocks(content, content_field, images));
  } else if (out.role == "system" || out.role == "developer" || out.role == "assistant" ||
             out.role == "tool" || out.role == "latest_reminder") {
    DSV41_ASSIGN_OR_RETURN(out.content, JoinedTextContent(content, content_field));
  } else {
    return InvalidArgumentError("%s.role: unknown role '%s'", field.c_str(), out.role.c_str());
  }
  if (out.role == "assistant") {
    if (const JsonValue* reasoning = Member(message, "reasoning_content"); reasoning != nullptr) {
      if (!reasoning->is_string()) {
        return InvalidArgumentError("%s.reasoning_content: must be a string", field.c_str());
      }
      out.reasoning_content = reasoning->text;
    }
    if (const JsonValue* calls = Member(message, "tool_calls"); calls != nullptr) {
      if (!calls->is_array()) {
        return InvalidArgumentError("%s.tool_calls: must be an array", field.c_str());
      }
      for (size_t k = 0; k < calls->array.size(); ++k) {
        DSV41_ASSIGN_OR_RETURN(
            ChatToolCall call,
            MapToolCall(calls->array[k], StrFormat("%s.tool_calls[%zu]", field.c_str(), k)));
        out.tool_calls.push_back(std::move(call));
      }
    }
  }
  if (out.role == "tool") {
    if (const JsonValue* id = Member(message, "tool_call_id"); id != nullptr) {
      if (!id->is_string()) {
        return InvalidArgumentError("%s.tool_call_id: must be a string", field.c_str());
      }
      out.tool_call_id = id->text;
    }
  }
  return out;
}

Result<bool> OptionalBool(const JsonValue* object, std::string_view key, std::string_view field,
                          bool fallback) {
  const JsonValue* value = object == nullptr ? nullptr : Member(*object, key);
  if (value == nullptr) return fallback;
  if (value->kind != JsonValue::Kind::kBool) {
    return InvalidArgumentError("%.*s: must be a boolean", static_cast<int>(field.size()),
                                field.data());
  }
  return value->bool_value;
}

}  // namespace

Result<ChatPrompt> RenderChatCompletionsRequest(const JsonValue& request) {
  return RenderChatCompletionsRequest(request, ChatRequestOptions{});
}

Result<ChatPrompt> RenderChatCompletionsRequest(const JsonValue& request,
                                                const ChatRequestOptions& request_options) {
  if (!request.is_object()) return InvalidArgumentError("request: must be a JSON object");
  ChatOptions options;

  const JsonValue* kwargs = Member(request, "chat_template_kwargs");
  if (kwargs != nullptr && !kwargs->is_object()) {
    return InvalidArgumentError("chat_template_kwargs: must be an object");
  }
  // Thinking switch (§6.9): first match wins.
  if (const JsonValue* thinking = Member(request, "thinking"); thinking != nullptr) {
    const JsonValue* type = thinking->Find("type");
    if (type == nullptr || !type->is_string() ||
        (type->text != "enabled" && type->text != "disabled")) {
      return InvalidArgumentError("thinking.type: must be \"enabled\" or \"disabled\"");
    }
    options.mode = type->text == "enabled" ? ChatMode::kThinking : ChatMode::kChat;
  } else if (kwargs != nullptr && Member(*kwargs, "thinking") != nullptr) {
    DSV41_ASSIGN_OR_RETURN(bool on,
                           OptionalBool(kwargs, "thinking", "chat_template_kwargs.thinking", true));
    options.mode = on ? ChatMode::kThinking : ChatMode::kChat;
  } else if (kwargs != nullptr) {
    DSV41_ASSIGN_OR_RETURN(bool on, OptionalBool(kwargs, "enable_thinking",
                                                 "chat_template_kwargs.enable_thinking", true));
    options.mode = on ? ChatMode::kThinking : ChatMode::kChat;
  }
  // Reasoning effort: top level first, then chat_template_kwargs; validated in chat mode too.
  const JsonValue* effort = Member(request, "reasoning_effort");
  std::string_view effort_field = "reasoning_effort";
  if (effort == nullptr && kwargs != nullptr) {
    effort = Member(*kwargs, "reasoning_effort");
    effort_field = "chat_template_kwargs.reasoning_effort";
  }
  if (effort != nullptr) {
    DSV41_ASSIGN_OR_RETURN(std::optional<int> level, ParseReasoningEffort(*effort, effort_field));
    if (level.has_value()) {
      options.reasoning_effort = *level;
    } else {
      options.mode = ChatMode::kChat;
    }
  }
  DSV41_ASSIGN_OR_RETURN(
      options.drop_thinking,
      OptionalBool(kwargs, "drop_thinking", "chat_template_kwargs.drop_thinking", true));

  const JsonValue* messages = Member(request, "messages");
  if (messages == nullptr || !messages->is_array() || messages->array.empty()) {
    return InvalidArgumentError("messages: must be a non-empty array");
  }
  std::vector<ChatMessage> mapped;
  mapped.reserve(messages->array.size() + 1);
  for (size_t i = 0; i < messages->array.size(); ++i) {
    DSV41_ASSIGN_OR_RETURN(ChatMessage message,
                           MapMessage(messages->array[i], i, request_options.images));
    mapped.push_back(std::move(message));
  }

  // Validated before a system message may be inserted, so errors keep the client's indexes.
  DSV41_RETURN_IF_ERROR(ValidateMessages(mapped));

  // Tools and response_format ride on the system message at index 0 (§6.9).
  std::vector<JsonValue> tools;
  if (const JsonValue* list = Member(request, "tools"); list != nullptr) {
    if (!list->is_array()) return InvalidArgumentError("tools: must be an array");
    const JsonValue* choice = Member(request, "tool_choice");
    const bool choice_none = choice != nullptr && choice->is_string() && choice->text == "none";
    for (size_t t = 0; t < list->array.size(); ++t) {
      const JsonValue& tool = list->array[t];
      const JsonValue* function = tool.Find("function");
      if (!tool.is_object() || function == nullptr || !function->is_object()) {
        return InvalidArgumentError("tools[%zu].function: must be an object", t);
      }
      if (!choice_none) tools.push_back(tool);
    }
  }
  std::optional<JsonValue> response_format;
  if (const JsonValue* format = Member(request, "response_format"); format != nullptr) {
    const JsonValue* type = format->Find("type");
    if (!format->is_object() || type == nullptr || !type->is_string()) {
      return InvalidArgumentError("response_format: must be an object with a string 'type'");
    }
    if (type->text != "text") response_format = *format;
  }
  if (!tools.empty() || response_format.has_value()) {
    if (mapped.front().role != "system") {
      ChatMessage system;
      system.role = "system";
      mapped.insert(mapped.begin(), std::move(system));
    }
    mapped.front().tools = std::move(tools);
    mapped.front().response_format = std::move(response_format);
  }
  return RenderChatMessages(std::move(mapped), options);
}

Result<ChatPrompt> RenderChatCompletionsRequestText(std::string_view body) {
  DSV41_ASSIGN_OR_RETURN(JsonValue request, ParseJsonValue(body, "request body"));
  return RenderChatCompletionsRequest(request);
}

}  // namespace dsv41

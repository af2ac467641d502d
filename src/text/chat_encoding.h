#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/json_format.h"

namespace dsv41 {

// tokenizer-and-chat.md §6: DeepSeek-V4.1 chat encoding. Pure functions; thread-safe.

enum class ChatMode { kThinking, kChat };

// Reasoning effort of §6.1: 1..100.
inline constexpr int kDefaultReasoningEffort = 75;

// One rendered piece: a special token the template inserted (role tokens, <think>, ｜DSML｜, ...),
// or text. §6.10: special pieces are looked up by string; text pieces (template text and
// everything the user supplied, merged) are tokenised with added-token matching off, so a typed
// `<｜User｜>` stays text. Text between two special pieces is one piece, so when the user's text
// holds no literal this equals tokenising `text` whole with added-token matching on.
struct PromptPiece {
  enum class Kind { kText, kSpecialToken };
  Kind kind = Kind::kText;
  std::string text;
};

// An image part of a user message (vision.md §3): where its bytes come from, as the request gave
// it. The frontend resolves, decodes and checks it; the prompt holds the placeholder.
struct ChatImage {
  std::string field;       // the part's field, for errors: "messages[0].content[1]"
  std::string url;         // OpenAI image_url.url, Responses image_url: data:, http(s), file
  std::string media_type;  // Anthropic base64 source: its media type
  std::string data;        // and its base64 data
};

struct ChatPrompt {
  std::string text;                 // the whole prompt, BOS included (pieces concatenated)
  std::vector<PromptPiece> pieces;  // concatenate to `text`; no empty piece
  // The image parts in prompt order; each rendered as the special piece <｜deepseek_image｜>,
  // so the k-th image token id of the prompt belongs to images[k].
  std::vector<ChatImage> images;
  ChatMode mode = ChatMode::kThinking;
  // True when the prompt ends with "<think>": the output parser (§7) starts in REASONING.
  bool ends_in_reasoning = false;
};

// The message model of §6.1 (after the API mapping of §6.9), for callers that build messages
// directly (tests, the Anthropic endpoint, task classification).
struct ChatToolCall {
  std::optional<std::string> id;
  std::string name;
  JsonValue arguments;  // a JSON object
};

struct ChatBlock {
  enum class Kind { kText, kToolResult, kUnsupported, kImage };
  Kind kind = Kind::kText;
  std::string text;         // kText: the text; kToolResult: the result content (text joined)
  std::string tool_use_id;  // kToolResult
  std::string type;         // kUnsupported: the part type, rendered "[Unsupported <type>]"
  ChatImage image = {};     // kImage: its source, rendered as the image placeholder
  // kToolResult whose content holds images (vision.md §3.2): its kText and kImage blocks in
  // order, joined by "\n\n" as a user turn's are; empty: the content is `text`.
  std::vector<ChatBlock> result_parts = {};
};

struct ChatMessage {
  // "system", "developer", "user", "assistant", "tool", "latest_reminder".
  std::string role;
  std::string content;            // every role but user (and tool results, see below)
  std::vector<ChatBlock> blocks;  // user content; empty means `content` as one text block
  std::optional<std::string> reasoning_content;  // assistant
  std::vector<ChatToolCall> tool_calls;          // assistant
  std::string tool_call_id;                      // tool: its content is `content`
  std::vector<JsonValue> tools;                  // OpenAI tool objects (with a "function" member)
  std::optional<JsonValue> response_format;      // rendered as the whole object
  std::string task;  // §6.7: "", action, query, authority, domain, title, read_url
};

struct ChatOptions {
  ChatMode mode = ChatMode::kThinking;
  int reasoning_effort = kDefaultReasoningEffort;
  bool drop_thinking = true;
};

// Renders messages per §6.2–§6.4 (preprocessing, rendering, transitions, BOS); image blocks of
// user messages render as the placeholder and are listed in ChatPrompt::images (vision.md §3).
// Errors (InvalidArgument naming the message index and field): an image placeholder literal
// in any text, an empty developer message, an unknown role or task.
Result<ChatPrompt> RenderChatMessages(std::vector<ChatMessage> messages,
                                      const ChatOptions& options);

// Maps an OpenAI /v1/chat/completions body (§6.9) to messages and options: thinking switch,
// reasoning effort (named or 1..100), drop_thinking, tools / tool_choice, response_format,
// developer role, text parts, image_url parts of user messages (a string or {"url": ...}; images
// in other roles are refused, vision.md §3.4), tool calls with string or object arguments. Bad
// requests (HTTP 400) return InvalidArgument naming the field, e.g.
// "messages[2].tool_calls[0].function.arguments".
Result<ChatPrompt> RenderChatCompletionsRequest(const JsonValue& request);

// What a deployment accepts beyond text.
struct ChatRequestOptions {
  // Image parts of user messages render as placeholders (ChatPrompt::images); false, a text-only
  // deployment, refuses them (tokenizer-and-chat.md §6 rule 1).
  bool images = false;
};
// The same for a deployment that takes `options` (the form above is text-only).
Result<ChatPrompt> RenderChatCompletionsRequest(const JsonValue& request,
                                                const ChatRequestOptions& options);
// The same from the request body text (parsed keeping number spellings' values, §6.5).
Result<ChatPrompt> RenderChatCompletionsRequestText(std::string_view body);

// The reasoning effort named or given by `value` (§6.1, §6.9): 1..100, or nullopt for "none"
// (chat mode). `field` names the request field in errors.
Result<std::optional<int>> ParseReasoningEffort(const JsonValue& value, std::string_view field);

}  // namespace dsv41

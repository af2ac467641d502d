#include "server/openai_api.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "server/api_common.h"
#include "server/api_error.h"
#include "server/request_fields.h"
#include "text/chat_encoding.h"
#include "text/chat_tokens.h"

namespace dsv41 {
namespace {

// --- Requests ----------------------------------------------------------------------------------

Status CheckObject(const JsonValue& body) {
  if (!body.is_object()) return InvalidArgumentError("request body: must be a JSON object");
  return OkStatus();
}

Status ReadCommonFields(const JsonValue& body, GenerationRequest& r) {
  DSV41_ASSIGN_OR_RETURN(std::optional<std::string> model, StringField(body, "model"));
  r.model = model.value_or("");
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> n, IntegerField(body, "n"));
  if (n.has_value() && *n != 1) {
    return InvalidArgumentError("n: %lld is not supported (only n = 1)",
                                static_cast<long long>(*n));
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> stream, BoolField(body, "stream"));
  r.stream = stream.value_or(false);
  if (const JsonValue* options = FieldOrNull(body, "stream_options"); options != nullptr) {
    if (!options->is_object()) return InvalidArgumentError("stream_options: must be an object");
    if (!r.stream) {
      return InvalidArgumentError("stream_options: only allowed when stream is true");
    }
    DSV41_ASSIGN_OR_RETURN(std::optional<bool> usage, BoolField(*options, "include_usage"));
    if (!usage.has_value() && options->Find("include_usage") != nullptr &&
        !options->Find("include_usage")->is_null()) {
      return InvalidArgumentError("stream_options.include_usage: must be a boolean");
    }
    r.include_usage = usage.value_or(false);
  }
  return ReadSamplingFields(body, r.submission.params);
}

// Tool calls belong to assistant messages; a tool message answers the assistant message with
// tool_calls right before it (other tool messages may sit between), as the OpenAI API requires.
Status CheckToolPlacement(const JsonValue& body) {
  const JsonValue* messages = FieldOrNull(body, "messages");
  if (messages == nullptr || !messages->is_array()) return OkStatus();  // the encoder reports it
  bool after_calls = false;
  for (size_t i = 0; i < messages->array.size(); ++i) {
    const JsonValue& m = messages->array[i];
    if (!m.is_object()) return OkStatus();
    const JsonValue* role = FieldOrNull(m, "role");
    if (role == nullptr || !role->is_string()) return OkStatus();
    const JsonValue* calls = FieldOrNull(m, "tool_calls");
    const bool has_calls = calls != nullptr && calls->is_array() && !calls->array.empty();
    if (calls != nullptr && role->text != "assistant") {
      return InvalidArgumentError(
          "messages[%zu].tool_calls: only assistant messages may carry tool calls (role '%s')", i,
          role->text.c_str());
    }
    if (role->text == "tool") {
      if (!after_calls) {
        return InvalidArgumentError(
            "messages[%zu]: a tool message must answer an assistant message with tool_calls", i);
      }
      const JsonValue* id = FieldOrNull(m, "tool_call_id");
      if (id == nullptr || !id->is_string()) {
        return InvalidArgumentError("messages[%zu].tool_call_id: must be a string", i);
      }
      continue;
    }
    after_calls = has_calls;
  }
  return OkStatus();
}

// tool_choice: "none", "auto", "required", or {"type": "function", "function": {"name"}} naming a
// declared tool. Nothing forces a call (the format has no mechanism; tokenizer-and-chat.md §6.9).
Status CheckToolChoice(const JsonValue& body) {
  const JsonValue* choice = FieldOrNull(body, "tool_choice");
  if (choice == nullptr) return OkStatus();
  if (choice->is_string()) {
    if (choice->text == "none" || choice->text == "auto" || choice->text == "required") {
      return OkStatus();
    }
    return InvalidArgumentError(
        "tool_choice: unknown value '%s' (want none, auto, required or "
        "a function)",
        choice->text.c_str());
  }
  const JsonValue* function = choice->is_object() ? FieldOrNull(*choice, "function") : nullptr;
  const JsonValue* name = function != nullptr ? FieldOrNull(*function, "name") : nullptr;
  if (name == nullptr || !name->is_string()) {
    return InvalidArgumentError("tool_choice.function.name: must be a string");
  }
  const JsonValue* tools = FieldOrNull(body, "tools");
  if (tools != nullptr && tools->is_array()) {
    for (const JsonValue& tool : tools->array) {
      const JsonValue* f = tool.Find("function");
      const JsonValue* n = f != nullptr ? f->Find("name") : nullptr;
      if (n != nullptr && n->is_string() && n->text == name->text) return OkStatus();
    }
  }
  return InvalidArgumentError("tool_choice.function.name: '%s' is not among the tools",
                              name->text.c_str());
}

Status CheckStops(const std::vector<std::string>& stops) {
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) return InvalidArgumentError("stop[%zu]: must not be empty", i);
  }
  return OkStatus();
}

// --- Responses ---------------------------------------------------------------------------------

JsonValue UsageJson(const OutputProcessor& t, bool with_reasoning) {
  JsonValue usage = JsonObject({
      {"prompt_tokens", JsonInt(t.prompt_tokens())},
      {"completion_tokens", JsonInt(t.completion_tokens())},
      {"total_tokens", JsonInt(int64_t{t.prompt_tokens()} + t.completion_tokens())},
      {"prompt_tokens_details", JsonObject({{"cached_tokens", JsonInt(t.cached_tokens())}})},
  });
  if (with_reasoning) {
    usage.Set("completion_tokens_details",
              JsonObject({{"reasoning_tokens", JsonInt(t.reasoning_tokens())}}));
  }
  return usage;
}

std::string_view FinishWord(const OutputProcessor& t) {
  switch (t.finish()) {
    case FinishReason::kStop:
    case FinishReason::kStopString:
      return t.tool_calls().empty() ? "stop" : "tool_calls";
    case FinishReason::kLength:
      return t.tool_calls().empty() ? "length" : "tool_calls";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "";
}

JsonValue IdsJson(std::span<const int32_t> ids) {
  JsonValue out = JsonArray();
  for (int32_t id : ids) out.Push(JsonInt(id));
  return out;
}

// An error event inside a stream (the status line is sent already).
std::string StreamError(const OutputProcessor& t) {
  return "data: " + OpenAiErrorBody(EndedRequestError(t)) + "\n\n";
}

class ChatCompletionsWriter final : public ResponseWriter {
 public:
  ChatCompletionsWriter(const GenerationRequest& request, const ServedModel& model)
      : request_(request),
        model_(model),
        id_(RandomId("chatcmpl-", 24)),
        created_(UnixSeconds()),
        model_name_(model.NameFor(request.model)) {}

  std::string StreamStart(const OutputProcessor&) override {
    return Chunk(JsonObject({{"role", JsonString("assistant")}, {"content", JsonString("")}}),
                 JsonValue(), JsonValue());
  }

  std::string StreamDelta(const ProcessedOutput& d, const OutputProcessor&) override {
    std::string out;
    JsonValue logprobs = request_.logprobs && !d.logprobs.empty()
                             ? JsonObject({{"content", LogprobsContent(d.logprobs)}})
                             : JsonValue();
    for (const OutputDelta& delta : d.deltas) {
      JsonValue body;
      switch (delta.kind) {
        case OutputDelta::Kind::kReasoning:
          body = JsonObject({{"reasoning_content", JsonString(delta.text)}});
          break;
        case OutputDelta::Kind::kContent:
          body = JsonObject({{"content", JsonString(delta.text)}});
          break;
        case OutputDelta::Kind::kToolCall:
          call_ids_.push_back(RandomId("call_", 24));
          body =
              JsonObject({{"tool_calls", JsonArray({ToolCallJson(delta.tool_call, call_ids_.back(),
                                                                 delta.tool_call_idx)})}});
          break;
      }
      out += Chunk(std::move(body), std::move(logprobs), JsonValue());
      logprobs = JsonValue();
    }
    if (!logprobs.is_null()) out += Chunk(JsonObject(), std::move(logprobs), JsonValue());
    return out;
  }

  std::string StreamEnd(const OutputProcessor& t) override {
    if (t.finish() == FinishReason::kError) return StreamError(t) + "data: [DONE]\n\n";
    std::string out = Chunk(JsonObject(), JsonValue(), JsonString(std::string(FinishWord(t))));
    if (request_.include_usage) {
      out += SseData(JsonObject({{"id", JsonString(id_)},
                                 {"object", JsonString("chat.completion.chunk")},
                                 {"created", JsonInt(created_)},
                                 {"model", JsonString(model_name_)},
                                 {"choices", JsonArray()},
                                 {"usage", UsageJson(t, true)}}));
    }
    return out + "data: [DONE]\n\n";
  }

  std::string Heartbeat() override { return ": ping\n\n"; }

  JsonValue Response(const OutputProcessor& t) override {
    JsonValue message = JsonObject({
        {"role", JsonString("assistant")},
        {"content", t.content().empty() ? JsonValue() : JsonString(t.content())},
        {"reasoning_content",
         request_.starts_in_reasoning ? JsonString(t.reasoning()) : JsonValue()},
    });
    if (!t.tool_calls().empty()) {
      JsonValue calls = JsonArray();
      for (size_t i = 0; i < t.tool_calls().size(); ++i) {
        JsonValue call = ToolCallJson(t.tool_calls()[i], RandomId("call_", 24), -1);
        calls.Push(std::move(call));
      }
      message.Set("tool_calls", std::move(calls));
    }
    JsonValue choice = JsonObject({
        {"index", JsonInt(0)},
        {"message", std::move(message)},
        {"logprobs", request_.logprobs ? JsonObject({{"content", LogprobsContent(t.logprobs())}})
                                       : JsonValue()},
        {"finish_reason", JsonString(std::string(FinishWord(t)))},
    });
    return JsonObject({{"id", JsonString(id_)},
                       {"object", JsonString("chat.completion")},
                       {"created", JsonInt(created_)},
                       {"model", JsonString(model_name_)},
                       {"choices", JsonArray({std::move(choice)})},
                       {"usage", UsageJson(t, true)}});
  }

 private:
  // index < 0: the non-streaming form (no index member).
  static JsonValue ToolCallJson(const ParsedToolCall& call, std::string id, int index) {
    JsonValue out;
    if (index >= 0) out.Set("index", JsonInt(index));
    out.Set("id", JsonString(std::move(id)))
        .Set("type", JsonString("function"))
        .Set("function", JsonObject({{"name", JsonString(call.name)},
                                     {"arguments", JsonString(call.arguments)}}));
    return out;
  }

  JsonValue LogprobsContent(const std::vector<SampledToken>& tokens) const {
    const Tokenizer& tok = *model_.tokenizer;
    JsonValue content = JsonArray();
    for (const SampledToken& s : tokens) {
      JsonValue top = JsonArray();
      const size_t n = std::min<size_t>(s.top_logprobs.size(), request_.top_logprobs);
      for (size_t k = 0; k < n; ++k) {
        const TokenLogprob& e = s.top_logprobs[k];
        top.Push(JsonObject({{"token", JsonString(TokenText(tok, e.token_id))},
                             {"logprob", LogprobJson(e.logprob)},
                             {"bytes", TokenBytesJson(tok, e.token_id)}}));
      }
      content.Push(JsonObject({{"token", JsonString(TokenText(tok, s.token_id))},
                               {"logprob", LogprobJson(s.logprob)},
                               {"bytes", TokenBytesJson(tok, s.token_id)},
                               {"top_logprobs", std::move(top)}}));
    }
    return content;
  }

  std::string Chunk(JsonValue delta, JsonValue logprobs, JsonValue finish_reason) const {
    JsonValue chunk = JsonObject({
        {"id", JsonString(id_)},
        {"object", JsonString("chat.completion.chunk")},
        {"created", JsonInt(created_)},
        {"model", JsonString(model_name_)},
        {"choices", JsonArray({JsonObject({{"index", JsonInt(0)},
                                           {"delta", std::move(delta)},
                                           {"logprobs", std::move(logprobs)},
                                           {"finish_reason", std::move(finish_reason)}})})},
    });
    if (request_.include_usage) chunk.Set("usage", JsonValue());
    return SseData(chunk);
  }

  const GenerationRequest& request_;
  const ServedModel& model_;
  const std::string id_;
  const int64_t created_;
  const std::string model_name_;
  std::vector<std::string> call_ids_;
};

// Completions logprobs ({"tokens", "token_logprobs", "top_logprobs", "text_offset"}), built token
// by token; prompt tokens (echo) first, the first of them without a value.
class CompletionLogprobs {
 public:
  CompletionLogprobs(const Tokenizer& tokenizer, int32_t top) : tokenizer_(tokenizer), top_(top) {}

  void AddToken(int32_t id, std::optional<float> logprob, std::vector<TokenLogprob> top) {
    const std::string text = TokenText(tokenizer_, id);
    tokens_.Push(JsonString(text));
    text_offset_.Push(JsonInt(offset_));
    for (unsigned char c : text) offset_ += (c & 0xC0) != 0x80 ? 1 : 0;  // code points
    token_logprobs_.Push(logprob.has_value() ? LogprobJson(*logprob) : JsonValue());
    if (!logprob.has_value()) {
      top_logprobs_.Push(JsonValue());
      return;
    }
    JsonValue entries = JsonObject();
    for (size_t k = 0; k < top.size() && k < static_cast<size_t>(top_); ++k) {
      const std::string key = TokenText(tokenizer_, top[k].token_id);
      if (entries.Find(key) == nullptr) entries.Set(key, LogprobJson(top[k].logprob));
    }
    top_logprobs_.Push(std::move(entries));
  }

  void AddSampled(const std::vector<SampledToken>& tokens) {
    for (const SampledToken& s : tokens) AddToken(s.token_id, s.logprob, s.top_logprobs);
  }

  // The prompt's tokens with the log-probabilities of `logits` rows ([len, vocab], row i predicts
  // token i + 1); the first token has none.
  void AddPrompt(std::span<const int32_t> ids, std::span<const float> logits, size_t vocab) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i == 0 || logits.size() < i * vocab) {
        AddToken(ids[i], std::nullopt, {});
        continue;
      }
      const std::span<const float> row = logits.subspan((i - 1) * vocab, vocab);
      double max = -INFINITY;
      for (float v : row) max = std::max(max, static_cast<double>(v));
      double sum = 0.0;
      for (float v : row) sum += std::exp(static_cast<double>(v) - max);
      const double log_z = max + std::log(sum);
      std::vector<TokenLogprob> top;
      std::vector<int32_t> order(vocab);
      for (size_t v = 0; v < vocab; ++v) order[v] = static_cast<int32_t>(v);
      const size_t k = std::min<size_t>(static_cast<size_t>(top_), vocab);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      for (size_t j = 0; j < k; ++j) {
        top.push_back({order[j], static_cast<float>(row[order[j]] - log_z)});
      }
      AddToken(ids[i], static_cast<float>(row[ids[i]] - log_z), std::move(top));
    }
  }

  JsonValue Take() {
    JsonValue out = JsonObject({{"tokens", std::move(tokens_)},
                                {"token_logprobs", std::move(token_logprobs_)},
                                {"top_logprobs", std::move(top_logprobs_)},
                                {"text_offset", std::move(text_offset_)}});
    tokens_ = JsonArray();
    token_logprobs_ = JsonArray();
    top_logprobs_ = JsonArray();
    text_offset_ = JsonArray();
    return out;
  }

 private:
  const Tokenizer& tokenizer_;
  const int32_t top_;
  int64_t offset_ = 0;
  JsonValue tokens_ = JsonArray();
  JsonValue token_logprobs_ = JsonArray();
  JsonValue top_logprobs_ = JsonArray();
  JsonValue text_offset_ = JsonArray();
};

class CompletionsWriter final : public ResponseWriter {
 public:
  CompletionsWriter(const GenerationRequest& request, const ServedModel& model)
      : request_(request),
        model_(model),
        id_(RandomId("cmpl-", 24)),
        created_(UnixSeconds()),
        model_name_(model.NameFor(request.model)),
        stream_logprobs_(*model.tokenizer, request.top_logprobs) {}

  std::string StreamStart(const OutputProcessor&) override { return ""; }

  std::string StreamDelta(const ProcessedOutput& d, const OutputProcessor& t) override {
    std::string text;
    JsonValue choice = JsonObject({{"index", JsonInt(0)}});
    const bool first = !started_;
    if (first) {
      // The first chunk carries the echoed prompt (with its logprobs) and the prompt's ids.
      started_ = true;
      if (request_.echo) {
        text = request_.prompt_text;
        if (request_.logprobs) {
          stream_logprobs_.AddPrompt(request_.submission.prompt_ids, t.prompt_logits(),
                                     static_cast<size_t>(model_.vocab_size));
        }
      }
      if (request_.return_token_ids) {
        choice.Set("prompt_token_ids", IdsJson(request_.submission.prompt_ids));
      }
    }
    for (const OutputDelta& delta : d.deltas) text += delta.text;
    if (request_.logprobs) stream_logprobs_.AddSampled(d.logprobs);
    if (text.empty() && d.token_ids.empty() && !(first && request_.echo)) return "";
    choice.Set("text", JsonString(std::move(text)))
        .Set("logprobs", request_.logprobs ? stream_logprobs_.Take() : JsonValue())
        .Set("finish_reason", JsonValue());
    if (request_.return_token_ids) choice.Set("token_ids", IdsJson(d.token_ids));
    return SseData(Body(JsonArray({std::move(choice)})));
  }

  std::string StreamEnd(const OutputProcessor& t) override {
    if (t.finish() == FinishReason::kError) return StreamError(t) + "data: [DONE]\n\n";
    std::string out;
    JsonValue choice = JsonObject({{"index", JsonInt(0)}});
    if (!started_ && request_.return_token_ids) {
      choice.Set("prompt_token_ids", IdsJson(request_.submission.prompt_ids));
    }
    choice.Set("text", JsonString(!started_ && request_.echo ? request_.prompt_text : ""))
        .Set("logprobs", JsonValue())
        .Set("finish_reason", JsonString(std::string(FinishWord(t))));
    if (request_.return_token_ids) choice.Set("token_ids", JsonArray());
    out += SseData(Body(JsonArray({std::move(choice)})));
    if (request_.include_usage) {
      JsonValue usage = Body(JsonArray());
      usage.Set("usage", UsageJson(t, false));
      out += SseData(usage);
    }
    return out + "data: [DONE]\n\n";
  }

  std::string Heartbeat() override { return ": ping\n\n"; }

  JsonValue Response(const OutputProcessor& t) override {
    JsonValue choice = JsonObject({{"index", JsonInt(0)}});
    std::string text = request_.echo ? request_.prompt_text : "";
    text += t.content();
    choice.Set("text", JsonString(std::move(text)));
    if (request_.logprobs) {
      CompletionLogprobs logprobs(*model_.tokenizer, request_.top_logprobs);
      if (request_.echo) {
        logprobs.AddPrompt(request_.submission.prompt_ids, t.prompt_logits(),
                           static_cast<size_t>(model_.vocab_size));
      }
      logprobs.AddSampled(t.logprobs());
      choice.Set("logprobs", logprobs.Take());
    } else {
      choice.Set("logprobs", JsonValue());
    }
    choice.Set("finish_reason", JsonString(std::string(FinishWord(t))));
    if (request_.return_token_ids) {
      choice.Set("prompt_token_ids", IdsJson(request_.submission.prompt_ids));
      choice.Set("token_ids", IdsJson(t.token_ids()));
    }
    JsonValue body = Body(JsonArray({std::move(choice)}));
    body.Set("usage", UsageJson(t, false));
    return body;
  }

 private:
  JsonValue Body(JsonValue choices) const {
    JsonValue body = JsonObject({{"id", JsonString(id_)},
                                 {"object", JsonString("text_completion")},
                                 {"created", JsonInt(created_)},
                                 {"model", JsonString(model_name_)},
                                 {"choices", std::move(choices)}});
    if (request_.include_usage) body.Set("usage", JsonValue());
    return body;
  }

  const GenerationRequest& request_;
  const ServedModel& model_;
  const std::string id_;
  const int64_t created_;
  const std::string model_name_;
  CompletionLogprobs stream_logprobs_;
  bool started_ = false;
};

}  // namespace

Result<GenerationRequest> ParseChatBody(const JsonValue& body, const ServedModel& model,
                                        const ChatBudget& budget) {
  DSV41_RETURN_IF_ERROR(CheckObject(body));
  GenerationRequest r;
  r.api = Api::kChatCompletions;
  r.parse_chat = true;
  r.submission.params.skip_special_tokens = true;
  r.submission.params.keep_chat_markers = true;
  DSV41_RETURN_IF_ERROR(ReadCommonFields(body, r));
  DSV41_RETURN_IF_ERROR(CheckToolPlacement(body));
  DSV41_RETURN_IF_ERROR(CheckToolChoice(body));
  DSV41_ASSIGN_OR_RETURN(r.submission.params.stop, StringListField(body, "stop"));
  DSV41_RETURN_IF_ERROR(CheckStops(r.submission.params.stop));
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> logprobs, BoolField(body, "logprobs"));
  r.logprobs = logprobs.value_or(false);
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> top, IntegerField(body, "top_logprobs"));
  if (top.has_value()) {
    if (*top < 0 || *top > kMaxLogprobs) {
      return InvalidArgumentError("top_logprobs: %lld is outside [0, %d]",
                                  static_cast<long long>(*top), kMaxLogprobs);
    }
    if (!r.logprobs && *top > 0) {
      return InvalidArgumentError("top_logprobs: needs logprobs set to true");
    }
    r.top_logprobs = static_cast<int32_t>(*top);
  }
  if (r.logprobs) r.submission.params.logprobs = std::max(1, r.top_logprobs);

  DSV41_ASSIGN_OR_RETURN(
      ChatPrompt prompt,
      RenderChatCompletionsRequest(body, ChatRequestOptions{.images = model.images.enabled}));
  r.starts_in_reasoning = prompt.ends_in_reasoning;
  DSV41_ASSIGN_OR_RETURN(r.submission.prompt_ids, EncodeChatPrompt(*model.tokenizer, prompt));
  // vision.md §3: the images expand their placeholders first, so the budget and usage count the
  // spans' positions.
  DSV41_RETURN_IF_ERROR(AttachImages(prompt.images, model.images, r.submission));
  DSV41_ASSIGN_OR_RETURN(
      r.submission.params.max_tokens,
      OutputBudget(static_cast<int64_t>(r.submission.prompt_ids.size()), budget.max_tokens, model,
                   budget.prompt_field, budget.max_tokens_field));
  DSV41_RETURN_IF_ERROR(ValidateSamplingParams(r.submission.params, model.vocab_size));
  return r;
}

Result<GenerationRequest> ParseChatCompletionsRequest(const JsonValue& body,
                                                      const ServedModel& model) {
  DSV41_RETURN_IF_ERROR(CheckObject(body));
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> max_completion,
                         IntegerField(body, "max_completion_tokens"));
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, IntegerField(body, "max_tokens"));
  const bool completion_named = max_completion.has_value();
  return ParseChatBody(body, model,
                       {completion_named ? max_completion : max_tokens, "messages",
                        completion_named ? "max_completion_tokens" : "max_tokens"});
}

Result<GenerationRequest> ParseCompletionsRequest(const JsonValue& body, const ServedModel& model) {
  DSV41_RETURN_IF_ERROR(CheckObject(body));
  GenerationRequest r;
  r.api = Api::kCompletions;
  DSV41_RETURN_IF_ERROR(ReadCommonFields(body, r));
  if (FieldOrNull(body, "suffix") != nullptr) {
    return InvalidArgumentError("suffix: is not supported");
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> best_of, IntegerField(body, "best_of"));
  if (best_of.has_value() && *best_of != 1) {
    return InvalidArgumentError("best_of: only 1 is supported");
  }
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> echo, BoolField(body, "echo"));
  r.echo = echo.value_or(false);
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> ids, BoolField(body, "return_token_ids"));
  r.return_token_ids = ids.value_or(false);
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> skip, BoolField(body, "skip_special_tokens"));
  r.submission.params.skip_special_tokens = skip.value_or(true);
  DSV41_ASSIGN_OR_RETURN(std::optional<bool> add_special, BoolField(body, "add_special_tokens"));
  DSV41_ASSIGN_OR_RETURN(r.submission.params.stop, StringListField(body, "stop"));
  DSV41_RETURN_IF_ERROR(CheckStops(r.submission.params.stop));
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> logprobs, IntegerField(body, "logprobs"));
  if (logprobs.has_value()) {
    if (*logprobs < 0 || *logprobs > kMaxLogprobs) {
      return InvalidArgumentError("logprobs: %lld is outside [0, %d]",
                                  static_cast<long long>(*logprobs), kMaxLogprobs);
    }
    r.logprobs = true;
    r.top_logprobs = static_cast<int32_t>(*logprobs);
    r.submission.params.logprobs = std::max<int32_t>(1, r.top_logprobs);
  }

  // prompt: a string, token ids, or a one-element list of either.
  const JsonValue* prompt = FieldOrNull(body, "prompt");
  if (prompt != nullptr && prompt->is_array() && prompt->array.size() == 1 &&
      (prompt->array[0].is_string() || prompt->array[0].is_array())) {
    prompt = &prompt->array[0];
  }
  if (prompt == nullptr) return InvalidArgumentError("prompt: is required");
  if (prompt->is_string()) {
    r.prompt_text = prompt->text;
    EncodeOptions options;
    options.add_bos = add_special.value_or(true) && model.tokenizer->bos_id().has_value();
    DSV41_ASSIGN_OR_RETURN(r.submission.prompt_ids, model.tokenizer->Encode(prompt->text, options));
  } else if (prompt->is_array()) {
    for (size_t i = 0; i < prompt->array.size(); ++i) {
      const JsonValue& id = prompt->array[i];
      int64_t value = -1;
      if (id.kind == JsonValue::Kind::kInteger && id.text.size() <= 11) {
        value = std::strtoll(id.text.c_str(), nullptr, 10);
      } else if (id.kind != JsonValue::Kind::kInteger) {
        return InvalidArgumentError(
            "prompt[%zu]: must be a token id (prompt is a string or an array of token ids)", i);
      }
      if (value < 0 || value >= model.vocab_size) {
        return InvalidArgumentError("prompt[%zu]: token id %s is outside [0, %d)", i,
                                    id.text.c_str(), model.vocab_size);
      }
      r.submission.prompt_ids.push_back(static_cast<int32_t>(value));
    }
    r.prompt_text = model.tokenizer->Decode(
        r.submission.prompt_ids,
        DecodeOptions{.skip_special_tokens = r.submission.params.skip_special_tokens});
  } else {
    return InvalidArgumentError("prompt: must be a string or an array of token ids");
  }
  if (r.submission.prompt_ids.empty()) return InvalidArgumentError("prompt: must not be empty");
  DSV41_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, IntegerField(body, "max_tokens"));
  DSV41_ASSIGN_OR_RETURN(r.submission.params.max_tokens,
                         OutputBudget(static_cast<int64_t>(r.submission.prompt_ids.size()),
                                      max_tokens.value_or(16), model, "prompt", "max_tokens"));
  r.submission.options.prompt_logits = r.echo && r.logprobs;
  DSV41_RETURN_IF_ERROR(ValidateSamplingParams(r.submission.params, model.vocab_size));
  return r;
}

std::unique_ptr<ResponseWriter> MakeChatCompletionsWriter(const GenerationRequest& request,
                                                          const ServedModel& model) {
  return std::make_unique<ChatCompletionsWriter>(request, model);
}

std::unique_ptr<ResponseWriter> MakeCompletionsWriter(const GenerationRequest& request,
                                                      const ServedModel& model) {
  return std::make_unique<CompletionsWriter>(request, model);
}

JsonValue ModelsResponse(const ServedModel& model) {
  JsonValue data = JsonArray();
  for (const std::string& name : model.names) {
    data.Push(
        JsonObject({{"id", JsonString(name)},
                    {"object", JsonString("model")},
                    {"created", JsonInt(model.created)},
                    {"owned_by", JsonString("dsv41")},
                    {"root", JsonString(model.names.front())},
                    {"max_model_len", JsonInt(model.max_model_len)},
                    {"vision", JsonBool(model.images.enabled)},
                    {"input_modalities", model.images.enabled
                                             ? JsonArray({JsonString("text"), JsonString("image")})
                                             : JsonArray({JsonString("text")})}}));
  }
  return JsonObject({{"object", JsonString("list")}, {"data", std::move(data)}});
}

}  // namespace dsv41

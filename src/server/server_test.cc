// The HTTP layer end to end over loopback against a scripted engine output (ScriptedBackend):
// reasoning, content and DSML tool calls split at every byte through both APIs, streaming and
// not (tokenizer-and-chat.md §7); content stop strings; errors naming the field, in the OpenAI or
// Anthropic shape; overload answered at once; a client that goes away aborts its request; load
// state on /health; metrics. Expected values come from the spec's grammar and hand counts.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "base/base64.h"
#include "base/mapped_file.h"
#include "server/engine_loop.h"
#include "server/http_client.h"
#include "server/http_server.h"
#include "server/json_path.h"
#include "server/metrics.h"
#include "server/scripted_backend.h"
#include "text/json_format.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"
#include "tiny/synthetic_tokenizer.h"
#include "vision/image_testing.h"

namespace dsv41 {
namespace {

JsonValue Parse(const std::string& body) {
  Result<JsonValue> v = ParseJsonValue(body, "response");
  EXPECT_TRUE(v.ok()) << v.status().ToString() << "\n" << body;
  return v.ok() ? std::move(v).value() : JsonValue();
}

// The generated text of the tool-call script and what §7.2 makes of it.
const std::string kReasoning = "Need the ｜weather｜ first.";
const std::string kContent = "Checking now.";
const std::string kBlock =
    "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
    "name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" "
    "string=\"false\">3</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
const std::string kScript = kReasoning + "</think>" + kContent + kBlock;
const std::string kArguments = R"({"city": "Paris", "days": 3})";

const std::string kChatBody =
    R"({"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}}}}]})";
const std::string kMessagesBody =
    R"({"model": "tiny", "max_tokens": 500, "messages": [{"role": "user", "content":
        "Weather in Paris?"}], "tools": [{"name": "get_weather", "input_schema": {"type":
        "object"}}]})";

// `body` with `"stream": true` (and more members) added at the front.
std::string WithMembers(const std::string& body, const std::string& members) {
  return "{" + members + ", " + body.substr(body.find('{') + 1);
}

// What an OpenAI chat stream adds up to.
struct ChatStream {
  std::string reasoning, content, finish_reason;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool done = false;
  bool first_is_role = false;
  JsonValue usage;
};

ChatStream CollectChat(const std::vector<SseMessage>& events) {
  ChatStream s;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].data == "[DONE]") {
      s.done = true;
      continue;
    }
    const JsonValue chunk = Parse(events[i].data);
    if (const JsonValue* usage = JsonAt(chunk, "usage"); usage != nullptr && !usage->is_null()) {
      s.usage = *usage;
    }
    const JsonValue* delta = JsonAt(chunk, "choices.0.delta");
    if (delta == nullptr) continue;
    if (i == 0) s.first_is_role = JsonText(*delta, "role") == "assistant";
    if (const JsonValue* r = delta->Find("reasoning_content")) s.reasoning += r->text;
    if (const JsonValue* c = delta->Find("content")) s.content += c->text;
    if (const JsonValue* calls = delta->Find("tool_calls")) {
      for (const JsonValue& call : calls->array) {
        const size_t idx = static_cast<size_t>(std::atoi(JsonText(call, "index").c_str()));
        if (s.calls.size() <= idx) s.calls.resize(idx + 1);
        s.calls[idx].first += JsonText(call, "function.name");
        s.calls[idx].second += JsonText(call, "function.arguments");
      }
    }
    if (const JsonValue* f = JsonAt(chunk, "choices.0.finish_reason");
        f != nullptr && !f->is_null()) {
      s.finish_reason = f->text;
    }
  }
  return s;
}

// What an Anthropic stream adds up to: blocks (type, text) and the stop reason.
struct MessagesStream {
  std::vector<std::string> event_names;
  std::vector<std::pair<std::string, std::string>> blocks;  // type, text / thinking / input json
  std::vector<std::string> tool_names;
  std::string stop_reason;
  JsonValue stop_sequence;
  JsonValue usage;
};

MessagesStream CollectMessages(const std::vector<SseMessage>& events) {
  MessagesStream s;
  for (const SseMessage& e : events) {
    s.event_names.push_back(e.event);
    const JsonValue data = Parse(e.data);
    EXPECT_EQ(JsonText(data, "type"), e.event) << "event name and data type agree";
    if (e.event == "content_block_start") {
      s.blocks.emplace_back(JsonText(data, "content_block.type"), "");
      if (JsonText(data, "content_block.type") == "tool_use") {
        s.tool_names.push_back(JsonText(data, "content_block.name"));
      }
    } else if (e.event == "content_block_delta") {
      const std::string type = JsonText(data, "delta.type");
      const std::string key = type == "thinking_delta" ? "delta.thinking"
                              : type == "text_delta"   ? "delta.text"
                                                       : "delta.partial_json";
      s.blocks.back().second += JsonText(data, key);
    } else if (e.event == "message_delta") {
      s.stop_reason = JsonText(data, "delta.stop_reason");
      s.stop_sequence = *JsonAt(data, "delta.stop_sequence");
      s.usage = *JsonAt(data, "usage");
    }
  }
  return s;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<SyntheticTokenizer> synthetic = BuildSyntheticTokenizer(512, 7);
    ASSERT_TRUE(synthetic.ok()) << synthetic.status().ToString();
    Result<Tokenizer> tokenizer = Tokenizer::FromJson(synthetic->json);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    tokenizer_ = new Tokenizer(std::move(tokenizer).value());
  }
  static void TearDownTestSuite() { delete tokenizer_; }

  void Start(std::vector<ScriptedBackend::ScriptStep> script, HttpServerOptions options = {},
             int32_t max_live = 8, bool ready = true) {
    Start(std::make_unique<ScriptedBackend>(std::move(script)), options, max_live, ready);
  }
  void Start(std::unique_ptr<ScriptedBackend> backend, HttpServerOptions options = {},
             int32_t max_live = 8, bool ready = true) {
    backend_ = std::move(backend);
    loop_ = std::make_unique<EngineLoop>(*backend_, metrics_,
                                         EngineLoopOptions{.max_live_requests = max_live});
    loop_->Start();
    served_.tokenizer = tokenizer_;
    served_.names = {"tiny", "tiny-alias"};
    served_.max_model_len = 4096;
    served_.vocab_size = tokenizer_->vocab_size();
    served_.think_close_id = tokenizer_->IdOf(kThinkClose).value_or(-1);
    options.port = 0;
    options.heartbeat = std::chrono::milliseconds(50);
    Result<std::unique_ptr<HttpServer>> server = HttpServer::Bind(options, metrics_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_TRUE(server_->Start().ok());
    if (ready) server_->SetReady(served_, *loop_);
    client_ = std::make_unique<HttpClient>("127.0.0.1", server_->port());
  }

  void TearDown() override {
    if (backend_ != nullptr) backend_->set_hold(false);
    if (loop_ != nullptr) loop_->Shutdown(std::chrono::milliseconds(0));
    if (server_ != nullptr) server_->Stop();
  }

  HttpResponse Post(const std::string& path, const std::string& body,
                    const HttpHeaders& headers = {}) {
    Result<HttpResponse> r = client_->Post(path, body, headers);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : HttpResponse();
  }

  HttpResponse Get(const std::string& path, const HttpHeaders& headers = {}) {
    Result<HttpResponse> r = client_->Get(path, headers);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : HttpResponse();
  }

  // Its own client, so other threads may call it while the main thread talks to the server.
  std::vector<SseMessage> PostSse(const std::string& path, const std::string& body) {
    SseReader reader;
    HttpClient client("127.0.0.1", server_->port());
    Result<HttpResponse> r = client.PostStreaming(path, body, {}, [&](std::string_view piece) {
      reader.Push(piece);
      return true;
    });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.ok() ? r->status : 0, 200);
    EXPECT_NE(r.ok() ? r->content_type.find("text/event-stream") : 0, std::string::npos);
    return reader.Take();
  }

  // Checks one response of the tool-call script through all four paths.
  void ExpectToolCallScriptEverywhere() {
    // OpenAI, non-streaming.
    const HttpResponse chat = Post("/v1/chat/completions", kChatBody);
    ASSERT_EQ(chat.status, 200) << chat.body;
    const JsonValue c = Parse(chat.body);
    EXPECT_EQ(JsonText(c, "choices.0.message.reasoning_content"), kReasoning);
    EXPECT_EQ(JsonText(c, "choices.0.message.content"), kContent);
    EXPECT_EQ(JsonText(c, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    EXPECT_EQ(JsonText(c, "choices.0.message.tool_calls.0.function.arguments"), kArguments);
    EXPECT_EQ(JsonText(c, "choices.0.message.tool_calls.0.type"), "function");
    EXPECT_TRUE(JsonText(c, "choices.0.message.tool_calls.0.id").starts_with("call_"));
    EXPECT_EQ(JsonText(c, "choices.0.finish_reason"), "tool_calls");
    EXPECT_EQ(JsonText(c, "object"), "chat.completion");
    EXPECT_EQ(JsonText(c, "model"), "tiny");

    // OpenAI, streaming: the deltas add up to the same message.
    const ChatStream s = CollectChat(PostSse(
        "/v1/chat/completions",
        WithMembers(kChatBody, R"("stream": true, "stream_options": {"include_usage": true})")));
    EXPECT_TRUE(s.first_is_role);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.reasoning, kReasoning);
    EXPECT_EQ(s.content, kContent);
    ASSERT_EQ(s.calls.size(), 1u);
    EXPECT_EQ(s.calls[0].first, "get_weather");
    EXPECT_EQ(s.calls[0].second, kArguments);
    EXPECT_EQ(s.finish_reason, "tool_calls");
    EXPECT_EQ(JsonText(s.usage, "completion_tokens"), JsonText(c, "usage.completion_tokens"));

    // Anthropic, non-streaming: thinking, text, tool_use blocks.
    const HttpResponse msg = Post("/v1/messages", kMessagesBody);
    ASSERT_EQ(msg.status, 200) << msg.body;
    const JsonValue m = Parse(msg.body);
    EXPECT_EQ(JsonText(m, "type"), "message");
    EXPECT_EQ(JsonText(m, "content.0.type"), "thinking");
    EXPECT_EQ(JsonText(m, "content.0.thinking"), kReasoning);
    EXPECT_EQ(JsonText(m, "content.1.type"), "text");
    EXPECT_EQ(JsonText(m, "content.1.text"), kContent);
    EXPECT_EQ(JsonText(m, "content.2.type"), "tool_use");
    EXPECT_EQ(JsonText(m, "content.2.name"), "get_weather");
    EXPECT_TRUE(JsonText(m, "content.2.id").starts_with("toolu_"));
    EXPECT_EQ(JsonText(m, "content.2.input.city"), "Paris");
    EXPECT_EQ(JsonText(m, "content.2.input.days"), "3");
    EXPECT_EQ(JsonText(m, "stop_reason"), "tool_use");

    // Anthropic, streaming: the event sequence of §7.4 and the same blocks.
    const MessagesStream a =
        CollectMessages(PostSse("/v1/messages", WithMembers(kMessagesBody, R"("stream": true)")));
    ASSERT_GE(a.event_names.size(), 4u);
    EXPECT_EQ(a.event_names.front(), "message_start");
    EXPECT_EQ(a.event_names[a.event_names.size() - 2], "message_delta");
    EXPECT_EQ(a.event_names.back(), "message_stop");
    ASSERT_EQ(a.blocks.size(), 3u);
    EXPECT_EQ(a.blocks[0], std::make_pair(std::string("thinking"), kReasoning));
    EXPECT_EQ(a.blocks[1], std::make_pair(std::string("text"), kContent));
    EXPECT_EQ(a.blocks[2], std::make_pair(std::string("tool_use"), kArguments));
    EXPECT_EQ(a.tool_names, std::vector<std::string>{"get_weather"});
    EXPECT_EQ(a.stop_reason, "tool_use");
    int starts = 0, stops = 0;
    for (const std::string& e : a.event_names) {
      starts += e == "content_block_start";
      stops += e == "content_block_stop";
    }
    EXPECT_EQ(starts, 3);
    EXPECT_EQ(stops, 3);
  }

  static Tokenizer* tokenizer_;
  ServerMetrics metrics_;
  ServedModel served_;
  std::unique_ptr<ScriptedBackend> backend_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<HttpClient> client_;
};

Tokenizer* ServerTest::tokenizer_ = nullptr;

TEST_F(ServerTest, ReasoningContentAndToolCallsSplitAtEveryByteThroughBothApis) {
  Start(ScriptedBackend::ByteSteps(kScript, *tokenizer_));
  ExpectToolCallScriptEverywhere();
}

TEST_F(ServerTest, WholeScriptInOneStepGivesTheSameResult) {
  // Every byte's token in the one step.
  ScriptedBackend::ScriptStep all;
  for (const ScriptedBackend::ScriptStep& step : ScriptedBackend::ByteSteps(kScript, *tokenizer_)) {
    all.insert(all.end(), step.begin(), step.end());
  }
  Start({all});
  ExpectToolCallScriptEverywhere();
}

TEST_F(ServerTest, TokenizedScriptCountsReasoningTokensBeforeThinkClose) {
  Result<std::vector<int32_t>> ids = tokenizer_->Encode(kScript);
  ASSERT_TRUE(ids.ok());
  std::vector<ScriptedBackend::ScriptStep> script;
  for (int32_t id : *ids) script.push_back({id});
  Result<std::vector<int32_t>> reasoning_ids = tokenizer_->Encode(kReasoning);
  ASSERT_TRUE(reasoning_ids.ok());
  Start(script);
  ExpectToolCallScriptEverywhere();
  const JsonValue c = Parse(Post("/v1/chat/completions", kChatBody).body);
  EXPECT_EQ(JsonText(c, "usage.completion_tokens"), std::to_string(ids->size()));
  EXPECT_EQ(JsonText(c, "usage.completion_tokens_details.reasoning_tokens"),
            std::to_string(reasoning_ids->size()));
  const std::string prompt_tokens = JsonText(c, "usage.prompt_tokens");
  EXPECT_EQ(prompt_tokens, std::to_string(backend_->last_prompt().size()));
  EXPECT_EQ(JsonText(c, "usage.total_tokens"),
            std::to_string(backend_->last_prompt().size() + ids->size()));
}

TEST_F(ServerTest, TruncatedToolBlockIsContentWithFinishLength) {
  Start(ScriptedBackend::ByteSteps(kScript, *tokenizer_));
  // Stops 10 bytes before the end of the block: §7.6, the raw text after </think> is content.
  const size_t max_tokens = kScript.size() - 10;
  const std::string members = "\"max_tokens\": " + std::to_string(max_tokens);
  const JsonValue c = Parse(Post("/v1/chat/completions", WithMembers(kChatBody, members)).body);
  EXPECT_EQ(JsonText(c, "choices.0.finish_reason"), "length");
  EXPECT_EQ(JsonText(c, "choices.0.message.content"),
            kContent + kBlock.substr(0, kBlock.size() - 10));
  EXPECT_EQ(JsonAt(c, "choices.0.message.tool_calls"), nullptr);
  const ChatStream s = CollectChat(
      PostSse("/v1/chat/completions", WithMembers(kChatBody, members + R"(, "stream": true)")));
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.content, kContent + kBlock.substr(0, kBlock.size() - 10));
  EXPECT_TRUE(s.calls.empty());
  std::string messages_body = kMessagesBody;
  messages_body.replace(messages_body.find("500"), 3, std::to_string(max_tokens));
  const JsonValue m = Parse(Post("/v1/messages", messages_body).body);
  EXPECT_EQ(JsonText(m, "stop_reason"), "max_tokens");
  EXPECT_EQ(JsonText(m, "content.1.text"), kContent + kBlock.substr(0, kBlock.size() - 10));
  EXPECT_NE(metrics_.RenderPrometheus().find("dsv41_malformed_tool_outputs_total 3"),
            std::string::npos);
}

TEST_F(ServerTest, ContentStopStringEndsTheRequestAndIsNotMatchedInReasoning) {
  Start(ScriptedBackend::ByteSteps(kScript, *tokenizer_));
  // "first" occurs in the reasoning only, "now" in the content.
  const JsonValue c = Parse(
      Post("/v1/chat/completions", WithMembers(kChatBody, R"("stop": ["first", " now"])")).body);
  EXPECT_EQ(JsonText(c, "choices.0.message.reasoning_content"), kReasoning);
  EXPECT_EQ(JsonText(c, "choices.0.message.content"), "Checking");
  EXPECT_EQ(JsonText(c, "choices.0.finish_reason"), "stop");
  const ChatStream s = CollectChat(
      PostSse("/v1/chat/completions", WithMembers(kChatBody, R"("stop": " now", "stream": true)")));
  EXPECT_EQ(s.content, "Checking");
  EXPECT_EQ(s.finish_reason, "stop");
  const JsonValue m =
      Parse(Post("/v1/messages", WithMembers(kMessagesBody, R"("stop_sequences": [" now"])")).body);
  EXPECT_EQ(JsonText(m, "stop_reason"), "stop_sequence");
  EXPECT_EQ(JsonText(m, "stop_sequence"), " now");
  const MessagesStream a = CollectMessages(PostSse(
      "/v1/messages", WithMembers(kMessagesBody, R"("stop_sequences": [" now"], "stream": true)")));
  EXPECT_EQ(a.stop_reason, "stop_sequence");
  EXPECT_EQ(a.stop_sequence.text, " now");
  ASSERT_EQ(a.blocks.size(), 2u);
  EXPECT_EQ(a.blocks[1].second, "Checking");
  // Each request ended (the server aborts it in the engine when the stop string matched first).
  EXPECT_EQ(loop_->num_live(), 0);
}

TEST_F(ServerTest, ChatModeHasNoReasoningAndCompletionsReturnRawText) {
  Start(ScriptedBackend::ByteSteps("plain ｜ answer", *tokenizer_));
  const JsonValue c =
      Parse(Post("/v1/chat/completions",
                 WithMembers(kChatBody, R"("chat_template_kwargs": {"thinking": false})"))
                .body);
  EXPECT_EQ(JsonText(c, "choices.0.message.content"), "plain ｜ answer");
  ASSERT_NE(JsonAt(c, "choices.0.message.reasoning_content"), nullptr);
  EXPECT_TRUE(JsonAt(c, "choices.0.message.reasoning_content")->is_null());
  EXPECT_EQ(JsonText(c, "choices.0.finish_reason"), "stop");
  const JsonValue m = Parse(
      Post("/v1/messages", WithMembers(kMessagesBody, R"("thinking": {"type": "disabled"})")).body);
  EXPECT_EQ(JsonText(m, "content.0.type"), "text");
  EXPECT_EQ(JsonText(m, "stop_reason"), "end_turn");
  const HttpResponse r =
      Post("/v1/completions",
           R"({"prompt": [5, 6, 7], "max_tokens": 100, "return_token_ids": true, "echo": false})");
  ASSERT_EQ(r.status, 200) << r.body;
  const JsonValue p = Parse(r.body);
  EXPECT_EQ(JsonText(p, "object"), "text_completion");
  EXPECT_EQ(JsonText(p, "choices.0.text"), "plain ｜ answer");
  EXPECT_EQ(FormatJson(*JsonAt(p, "choices.0.prompt_token_ids")), "[5, 6, 7]");
  EXPECT_EQ(JsonAt(p, "choices.0.token_ids")->array.size(), std::string("plain ｜ answer").size());
  EXPECT_EQ(backend_->last_prompt(), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(backend_->last_params().skip_special_tokens);
  EXPECT_EQ(backend_->last_params().max_tokens, 100);
}

// A request that sets no output budget gets --default-max-tokens (capped by what the context
// leaves); one that sets it keeps its own.
TEST_F(ServerTest, RequestsWithoutABudgetGetTheDefaultMaxTokens) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  ASSERT_EQ(Post("/v1/chat/completions", kChatBody).status, 200);
  const int64_t context_left = 4096 - static_cast<int64_t>(backend_->last_prompt().size());
  EXPECT_EQ(backend_->last_params().max_tokens, context_left);
  served_.default_max_tokens = 50;
  server_->SetReady(served_, *loop_);
  ASSERT_EQ(Post("/v1/chat/completions", kChatBody).status, 200);
  EXPECT_EQ(backend_->last_params().max_tokens, 50);
  ASSERT_EQ(Post("/v1/responses", R"({"model": "tiny", "input": "Hi"})").status, 200);
  EXPECT_EQ(backend_->last_params().max_tokens, 50);
  ASSERT_EQ(Post("/v1/chat/completions", WithMembers(kChatBody, R"("max_tokens": 200)")).status,
            200);
  EXPECT_EQ(backend_->last_params().max_tokens, 200);
  served_.default_max_tokens = 100000;
  server_->SetReady(served_, *loop_);
  ASSERT_EQ(Post("/v1/chat/completions", kChatBody).status, 200);
  EXPECT_EQ(backend_->last_params().max_tokens, context_left);
}

// `serve --scripted-replies`: the reply is chosen by what the prompt contains (the first rule
// that matches), encoded by the tokenizer and streamed through the engine's detokenizer, so the
// output parser sees reasoning, text and a tool call; a prompt no rule matches is a 400 naming
// the file, and a malformed file an error naming the field.
TEST_F(ServerTest, ScriptedRepliesAreChosenByWhatThePromptContains) {
  const std::string path = ::testing::TempDir() + "/scripted_replies.json";
  const auto write = [&](const std::string& text) {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(text.c_str(), f);
    std::fclose(f);
  };
  write(
      R"({"replies": [{"when_prompt_contains": ["get_weather", "sunny"], "text": "Done.</think>It is<｜deepseek_image｜> sunny."},
                        {"when_prompt_contains": ["get_weather"], "text": )" +
      FormatJsonString(kScript) + "}]}");
  Result<std::vector<ScriptedBackend::Reply>> replies =
      ScriptedBackend::LoadReplies(path, *tokenizer_);
  ASSERT_TRUE(replies.ok()) << replies.status().ToString();
  ASSERT_EQ(replies->size(), 2u);
  EXPECT_LT(replies->at(1).token_ids.size(), kScript.size()) << "encoded, not one id per byte";
  Start(std::make_unique<ScriptedBackend>(std::move(replies).value(), *tokenizer_, path));

  const JsonValue first = Parse(Post("/v1/chat/completions", kChatBody).body);
  EXPECT_EQ(JsonText(first, "choices.0.message.reasoning_content"), kReasoning);
  EXPECT_EQ(JsonText(first, "choices.0.message.content"), kContent);
  EXPECT_EQ(JsonText(first, "choices.0.message.tool_calls.0.function.arguments"), kArguments);
  const std::string with_result = R"({"model": "tiny", "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}}}}]})";
  const JsonValue second = Parse(Post("/v1/chat/completions", with_result).body);
  EXPECT_EQ(JsonText(second, "choices.0.message.content"), "It is sunny.")
      << "a sampled special token other than the chat markers is not part of the text";
  EXPECT_EQ(JsonText(second, "choices.0.finish_reason"), "stop");

  const HttpResponse unmatched =
      Post("/v1/chat/completions",
           R"({"model": "tiny", "messages": [{"role": "user", "content": "no tools here"}]})");
  EXPECT_EQ(unmatched.status, 400) << unmatched.body;
  EXPECT_NE(unmatched.body.find("matches no reply of " + path), std::string::npos)
      << unmatched.body;

  write(R"({"replies": [{"when_prompt_contains": "x", "text": "y"}]})");
  Result<std::vector<ScriptedBackend::Reply>> bad = ScriptedBackend::LoadReplies(path, *tokenizer_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("replies[0].when_prompt_contains"), std::string::npos)
      << bad.status().ToString();
  write(R"({"replies": [{"text": "y"}, {"text": 3}]})");
  bad = ScriptedBackend::LoadReplies(path, *tokenizer_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("replies[1].text"), std::string::npos)
      << bad.status().ToString();
}

TEST_F(ServerTest, SamplingFieldsReachTheEngine) {
  Start(ScriptedBackend::ByteSteps("x", *tokenizer_));
  const HttpResponse r =
      Post("/v1/chat/completions",
           WithMembers(kChatBody, R"("temperature": 0.5, "top_p": 0.9, "top_k": 7, "min_p": 0.05,
                  "seed": 42, "presence_penalty": 0.25, "frequency_penalty": -0.5,
                  "max_completion_tokens": 33, "stop": "zz", "logprobs": true,
                  "top_logprobs": 3)"));
  ASSERT_EQ(r.status, 200) << r.body;
  const SamplingParams& p = backend_->last_params();
  EXPECT_EQ(p.temperature, 0.5f);
  EXPECT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 7);
  EXPECT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.seed, std::optional<uint64_t>(42));
  EXPECT_EQ(p.presence_penalty, 0.25f);
  EXPECT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_EQ(p.max_tokens, 33);
  EXPECT_EQ(p.logprobs, 3);
  // The output processor matches them on the content; the engine does no text work.
  EXPECT_EQ(p.stop, std::vector<std::string>{"zz"});
  EXPECT_TRUE(p.skip_special_tokens && p.keep_chat_markers)
      << "the output parser needs </think> and ｜DSML｜, and nothing else special";
}

struct BadRequest {
  std::string name;
  std::string path;
  std::string body;
  int status;
  std::string message_part;  // the field the message names
};

void PrintTo(const BadRequest& bad, std::ostream* os) {
  *os << bad.name << ": POST " << bad.path << " -> " << bad.status << " naming '"
      << bad.message_part << "'";
}

class ServerErrorTest : public ServerTest, public ::testing::WithParamInterface<BadRequest> {};

TEST_P(ServerErrorTest, AnswersWithTheErrorShapeNamingTheField) {
  const BadRequest& bad = GetParam();
  HttpServerOptions options;
  options.max_request_bytes = 16384;
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_), options);
  const HttpResponse r = Post(bad.path, bad.body);
  EXPECT_EQ(r.status, bad.status) << r.body;
  const JsonValue e = Parse(r.body);
  if (bad.path == "/v1/messages") {
    EXPECT_EQ(JsonText(e, "type"), "error");
    EXPECT_NE(JsonText(e, "error.message").find(bad.message_part), std::string::npos) << r.body;
    EXPECT_FALSE(JsonText(e, "error.type").empty());
  } else {
    EXPECT_NE(JsonText(e, "error.message").find(bad.message_part), std::string::npos) << r.body;
    EXPECT_FALSE(JsonText(e, "error.type").empty());
  }
  // A failing request fails alone: the next good one is served.
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody).status, 200);
  EXPECT_EQ(backend_->num_added(), 1);
}

std::string Repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ServerErrorTest,
    ::testing::Values(
        BadRequest{"MalformedJson", "/v1/chat/completions", R"({"messages": [)", 400,
                   "invalid JSON"},
        BadRequest{"NotAnObject", "/v1/chat/completions", "[1]", 400, "request body"},
        BadRequest{"MessagesWrongType", "/v1/chat/completions", R"({"messages": "hi"})", 400,
                   "messages"},
        BadRequest{"TemperatureWrongType", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", 400,
                   "temperature"},
        BadRequest{"TopPOutOfRange", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5})", 400,
                   "top_p"},
        BadRequest{"UnknownRole", "/v1/chat/completions",
                   R"({"messages": [{"role": "wizard", "content": "x"}]})", 400,
                   "messages[0].role"},
        BadRequest{"NotOne", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}], "n": 2})", 400, "n:"},
        BadRequest{"ToolCallsOnUser", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", 400,
                   "messages[0].tool_calls"},
        BadRequest{"ToolWithoutCall", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"},
                       {"role": "tool", "tool_call_id": "a", "content": "r"}]})",
                   400, "messages[1]"},
        BadRequest{"BadToolArguments", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant",
                       "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f",
                       "arguments": "[1]"}}]}]})",
                   400, "messages[1].tool_calls[0].function.arguments"},
        BadRequest{"UnknownToolChoice", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}],
                       "tool_choice": {"type": "function", "function": {"name": "nope"}}})",
                   400, "tool_choice"},
        BadRequest{"BadEffort", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}],
                       "reasoning_effort": "extreme"})",
                   400, "reasoning_effort"},
        BadRequest{"MaxTokensBeyondContext", "/v1/chat/completions",
                   R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 9000})", 400,
                   "max_tokens"},
        BadRequest{"PromptTooLong", "/v1/completions",
                   "{\"prompt\": [" + Repeat("5, ", 4100) + "5]}", 400, "prompt"},
        BadRequest{"InvalidUtf8", "/v1/chat/completions",
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}", 400,
                   "UTF-8"},
        BadRequest{
            "BodyTooLarge", "/v1/chat/completions",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"" + Repeat("a", 20000) + "\"}]}",
            413, "max-request-bytes"},
        BadRequest{"UnknownModel", "/v1/chat/completions",
                   R"({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]})", 404,
                   "gpt-9"},
        BadRequest{"TokenIdOutOfVocab", "/v1/completions", R"({"prompt": [5, 99999]})", 400,
                   "prompt[1]"},
        BadRequest{"AnthropicNoMaxTokens", "/v1/messages",
                   R"({"messages": [{"role": "user", "content": "x"}]})", 400, "max_tokens"},
        BadRequest{"AnthropicUnknownRole", "/v1/messages",
                   R"({"max_tokens": 5, "messages": [{"role": "wizard", "content": "x"}]})", 400,
                   "messages[0].role"},
        BadRequest{"AnthropicToolResultImage", "/v1/messages",
                   R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"},
                   {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name":
                   "Read", "input": {}}]}, {"role": "user", "content": [{"type": "tool_result",
                   "tool_use_id": "t1", "content": [{"type": "text", "text": "ok"}, {"type":
                   "image", "source": {"type": "base64", "media_type": "image/png", "data":
                   "AA=="}}]}]}]})",
                   400, "messages[2].content[0].content[1]"},
        BadRequest{"AnthropicBadEffort", "/v1/messages",
                   R"({"max_tokens": 5, "output_config": {"effort": "extreme"},
                   "messages": [{"role": "user", "content": "x"}]})",
                   400, "output_config.effort"},
        BadRequest{"AnthropicCountTokensNoMessages", "/v1/messages/count_tokens",
                   R"({"model": "tiny"})", 400, "messages"},
        BadRequest{"AnthropicToolResultWithoutUse", "/v1/messages",
                   R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
                       "tool_result", "tool_use_id": "t1", "content": "r"}]}]})",
                   400, "messages[0].content[0].tool_use_id"},
        BadRequest{"AnthropicToolUseInUser", "/v1/messages",
                   R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
                       "tool_use", "id": "t", "name": "f", "input": {}}]}]})",
                   400, "messages[0].content[0]"},
        BadRequest{"AnthropicImage", "/v1/messages",
                   R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
                       "image", "source": {}}]}]})",
                   400, "image"},
        BadRequest{"AnthropicMalformedJson", "/v1/messages", "{", 400, "invalid JSON"},
        BadRequest{"ResponsesHostedTool", "/v1/responses",
                   R"({"input": "x", "tools": [{"type": "function", "name": "f"}, {"type":
                       "custom", "name": "apply_patch"}]})",
                   400, "tools[1].type: 'custom' is not supported"},
        BadRequest{"ResponsesNamespaceToolNotFunction", "/v1/responses",
                   R"({"input": "x", "tools": [{"type": "namespace", "name": "n", "tools":
                       [{"type": "local_shell"}]}]})",
                   400, "tools[0].tools[0].type"},
        BadRequest{"ResponsesUnknownPreviousId", "/v1/responses",
                   R"({"input": "x", "previous_response_id": "resp_nope"})", 404, "resp_nope"},
        BadRequest{"ResponsesNoInput", "/v1/responses", R"({"instructions": "x"})", 400, "input"},
        BadRequest{"ResponsesImage", "/v1/responses",
                   R"({"input": [{"role": "user", "content": [{"type": "input_text", "text":
                       "a"}, {"type": "input_image", "image_url": "data:"}]}]})",
                   400, "input[0].content[1]"},
        BadRequest{"ResponsesOutputWithoutCall", "/v1/responses",
                   R"({"input": [{"role": "user", "content": "a"}, {"type":
                       "function_call_output", "call_id": "c9", "output": "r"}]})",
                   400, "input[1].call_id"},
        BadRequest{"ResponsesUnknownItem", "/v1/responses",
                   R"({"input": [{"type": "web_search_call", "id": "w"}]})", 400, "input[0].type"},
        BadRequest{"ResponsesBudgetBeyondContext", "/v1/responses",
                   R"({"input": "x", "max_output_tokens": 100000})", 400, "max_output_tokens"},
        BadRequest{"ResponsesBadEffort", "/v1/responses",
                   R"({"input": "x", "reasoning": {"effort": "extreme"}})", 400,
                   "reasoning.effort"},
        BadRequest{"ResponsesBackground", "/v1/responses", R"({"input": "x", "background": true})",
                   400, "background"},
        BadRequest{"UnknownRoute", "/v1/nothing", "{}", 404, "/v1/nothing"}),
    [](const ::testing::TestParamInfo<BadRequest>& info) { return info.param.name; });

// `curl -d` sends Content-Type application/x-www-form-urlencoded: a small body is read as JSON
// all the same; a large one (cpp-httplib caps form bodies at 8192 bytes) gets a 413 that says
// which header to send instead of blaming --max-request-bytes.
TEST_F(ServerTest, FormEncodedBodiesAreJsonAndALargeOneSaysToSendJson) {
  HttpServerOptions options;
  options.max_request_bytes = 1 << 20;
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_), options);
  const std::string form = "application/x-www-form-urlencoded";
  Result<HttpResponse> small = client_->Post("/v1/chat/completions", kChatBody, {}, form);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->status, 200) << small->body;
  const std::string large =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"" + Repeat("a", 9000) + "\"}]}";
  Result<HttpResponse> refused = client_->Post("/v1/chat/completions", large, {}, form);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status, 413);
  EXPECT_NE(refused->body.find("Content-Type: application/json"), std::string::npos)
      << refused->body;
  // As JSON the same body is read (and refused only for the context it needs).
  const HttpResponse as_json = Post("/v1/chat/completions", large);
  EXPECT_EQ(as_json.status, 400) << as_json.body;
  EXPECT_NE(as_json.body.find("the context holds"), std::string::npos) << as_json.body;
}

TEST_F(ServerTest, ApiKeyGuardsEveryEndpointButHealth) {
  HttpServerOptions options;
  options.api_key = "sekret";
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_), options);
  EXPECT_EQ(Get("/health").status, 200);
  const HttpResponse none = Post("/v1/chat/completions", kChatBody);
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(JsonText(Parse(none.body), "error.type"), "authentication_error");
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody, {{"Authorization", "Bearer wrong"}}).status,
            401);
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody, {{"Authorization", "Bearer sekret"}}).status,
            200);
  EXPECT_EQ(Get("/v1/models").status, 401);
  EXPECT_EQ(Get("/metrics").status, 401);
  EXPECT_EQ(Get("/v1/models", {{"Authorization", "Bearer sekret"}}).status, 200);
  EXPECT_EQ(Post("/tokenize", R"({"prompt": "a"})").status, 401);
  // /v1/messages takes x-api-key (Anthropic's header); OpenAI routes do not.
  const HttpResponse anthropic = Post("/v1/messages", kMessagesBody);
  EXPECT_EQ(anthropic.status, 401);
  EXPECT_EQ(JsonText(Parse(anthropic.body), "error.type"), "authentication_error");
  EXPECT_EQ(Post("/v1/messages", kMessagesBody, {{"x-api-key", "sekret"}}).status, 200);
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody, {{"x-api-key", "sekret"}}).status, 401);
}

TEST_F(ServerTest, FullQueueAnswers429And529AtOnce) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_), {}, /*max_live=*/2);
  backend_->set_hold(true);
  // Two streams fill the server; each stays open (held) until the hold is released.
  std::vector<std::thread> holders;
  std::atomic<int> opened{0};
  for (int i = 0; i < 2; ++i) {
    holders.emplace_back([&] {
      HttpClient c("127.0.0.1", server_->port());
      Result<HttpResponse> r =
          c.PostStreaming("/v1/chat/completions", WithMembers(kChatBody, R"("stream": true)"), {},
                          [&](std::string_view) {
                            ++opened;
                            return true;
                          });
      EXPECT_TRUE(r.ok() && r->status == 200);
    });
  }
  while (loop_->num_live() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const HttpResponse openai = Post("/v1/chat/completions", kChatBody);
  EXPECT_EQ(openai.status, 429);
  EXPECT_EQ(JsonText(Parse(openai.body), "error.type"), "rate_limit_error");
  const HttpResponse anthropic = Post("/v1/messages", kMessagesBody);
  EXPECT_EQ(anthropic.status, 529);
  EXPECT_EQ(JsonText(Parse(anthropic.body), "error.type"), "overloaded_error");
  backend_->set_hold(false);
  for (std::thread& t : holders) t.join();
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody).status, 200);
  EXPECT_EQ(metrics_.num_errors(RequestErrorType::kOverloaded), 2u);
}

TEST_F(ServerTest, ClientThatGoesAwayMidStreamAbortsItsRequest) {
  Start(ScriptedBackend::ByteSteps(Repeat("long answer ", 500), *tokenizer_));
  backend_->set_step_delay(std::chrono::milliseconds(1));  // 6000 steps: seconds, not done soon
  SseReader reader;
  int pieces = 0;
  Result<HttpResponse> r =
      client_->PostStreaming("/v1/chat/completions", WithMembers(kChatBody, R"("stream": true)"),
                             {}, [&](std::string_view piece) {
                               reader.Push(piece);
                               return ++pieces < 5;  // read a few pieces, then hang up
                             });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->cancelled);
  // The server notices at its next write and aborts the request in the engine.
  while (backend_->num_aborted() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  while (loop_->num_live() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(backend_->num_live(), 0);
  EXPECT_NE(
      metrics_.RenderPrometheus().find("dsv41_request_success_total{finished_reason=\"abort\"} 1"),
      std::string::npos);
}

TEST_F(ServerTest, HeldStreamGetsHeartbeatsAndAbortsWhenTheClientLeaves) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  backend_->set_hold(true);  // no output at all: only heartbeats reach the client
  std::string received;
  Result<HttpResponse> r =
      client_->PostStreaming("/v1/messages", WithMembers(kMessagesBody, R"("stream": true)"), {},
                             [&](std::string_view piece) {
                               received += piece;
                               return received.find("event: ping") == std::string::npos;
                             });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(received.find("event: ping"), std::string::npos);
  while (backend_->num_aborted() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(backend_->num_live(), 0);
}

TEST_F(ServerTest, ShutdownAbortsStreamsInFlightAndRefusesNewRequests) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  backend_->set_hold(true);
  std::thread holder([&] {
    const ChatStream s =
        CollectChat(PostSse("/v1/chat/completions", WithMembers(kChatBody, R"("stream": true)")));
    EXPECT_EQ(s.finish_reason, "abort");
    EXPECT_TRUE(s.done);
  });
  while (loop_->num_live() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_->SetShuttingDown();
  EXPECT_EQ(Get("/health").status, 503);
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody).status, 503);
  loop_->Shutdown(std::chrono::milliseconds(0));
  holder.join();
  EXPECT_EQ(backend_->num_aborted(), 1);
}

TEST_F(ServerTest, AFailedEngineStepFailsItsRequestsWith500AndTheServerGoesOn) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  backend_->FailNextStep();
  const HttpResponse failed = Post("/v1/chat/completions", kChatBody);
  EXPECT_EQ(failed.status, 500);
  EXPECT_NE(JsonText(Parse(failed.body), "error.message").find("scripted step failure"),
            std::string::npos)
      << failed.body;
  backend_->FailNextStep();
  const MessagesStream s =
      CollectMessages(PostSse("/v1/messages", WithMembers(kMessagesBody, R"("stream": true)")));
  ASSERT_FALSE(s.event_names.empty());
  EXPECT_EQ(s.event_names.back(), "error");
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody).status, 200);
  EXPECT_EQ(metrics_.num_errors(RequestErrorType::kInternal), 2u);
  EXPECT_EQ(loop_->num_live(), 0);
}

TEST_F(ServerTest, HealthShowsLoadProgressUntilReady) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_), {}, 8, /*ready=*/false);
  server_->SetLoadProgress(
      Progress{.stage = "mapping shards", .done = 3, .total = 7, .unit = "shards"});
  const HttpResponse loading = Get("/health");
  EXPECT_EQ(loading.status, 503);
  const JsonValue h = Parse(loading.body);
  EXPECT_EQ(JsonText(h, "status"), "loading");
  EXPECT_EQ(JsonText(h, "stage"), "mapping shards");
  EXPECT_EQ(JsonText(h, "done"), "3");
  EXPECT_EQ(JsonText(h, "total"), "7");
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody).status, 503);
  server_->SetReady(served_, *loop_);
  EXPECT_EQ(Get("/health").status, 200);
  EXPECT_EQ(Post("/v1/chat/completions", kChatBody).status, 200);
}

TEST_F(ServerTest, ModelsTokenizeAndDetokenize) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  const JsonValue models = Parse(Get("/v1/models").body);
  EXPECT_EQ(JsonText(models, "object"), "list");
  EXPECT_EQ(JsonText(models, "data.0.id"), "tiny");
  EXPECT_EQ(JsonText(models, "data.1.id"), "tiny-alias");
  EXPECT_EQ(JsonText(models, "data.0.max_model_len"), "4096");
  // Either served name reaches the model.
  EXPECT_EQ(Post("/v1/chat/completions",
                 R"({"model": "tiny-alias", "messages": [{"role": "user", "content": "x"}]})")
                .status,
            200);
  Result<std::vector<int32_t>> ids = tokenizer_->Encode("hello world");
  ASSERT_TRUE(ids.ok());
  const JsonValue t =
      Parse(Post("/tokenize", R"({"prompt": "hello world", "add_special_tokens": false})").body);
  EXPECT_EQ(JsonText(t, "count"), std::to_string(ids->size()));
  ASSERT_NE(JsonAt(t, "tokens"), nullptr);
  std::string tokens_json = "[";
  for (size_t i = 0; i < ids->size(); ++i)
    tokens_json += (i ? ", " : "") + std::to_string((*ids)[i]);
  tokens_json += "]";
  EXPECT_EQ(FormatJson(*JsonAt(t, "tokens")), tokens_json);
  const JsonValue d = Parse(Post("/detokenize", "{\"tokens\": " + tokens_json + "}").body);
  EXPECT_EQ(JsonText(d, "prompt"), "hello world");
  // With BOS (the default) one more token; chat messages go through the template.
  EXPECT_EQ(JsonText(Parse(Post("/tokenize", R"({"prompt": "hello world"})").body), "count"),
            std::to_string(ids->size() + 1));
  const JsonValue chat = Parse(Post("/tokenize", kChatBody).body);
  EXPECT_GT(std::atoi(JsonText(chat, "count").c_str()), 5);
  EXPECT_EQ(Post("/detokenize", R"({"tokens": [-1]})").status, 400);
}

TEST_F(ServerTest, MetricsCountRequestsTokensAndLatencies) {
  Start(ScriptedBackend::ByteSteps("abc", *tokenizer_));
  ASSERT_EQ(Post("/v1/chat/completions", kChatBody).status, 200);
  ASSERT_EQ(Post("/v1/chat/completions", R"({"messages": "bad"})").status, 400);
  const HttpResponse m = Get("/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.content_type.find("text/plain"), std::string::npos);
  for (const char* line : {
           "dsv41_kv_blocks_total 64\n",
           "dsv41_kv_blocks_used 0\n",
           "dsv41_kv_blocks_cached 0\n",
           "dsv41_generation_tokens_total 3\n",
           "dsv41_request_success_total{finished_reason=\"stop\"} 1\n",
           "dsv41_request_errors_total{type=\"invalid_request\"} 1\n",
           "dsv41_time_to_first_token_seconds_count 1\n",
           "dsv41_inter_token_latency_seconds_count 2\n",
           "dsv41_e2e_request_latency_seconds_count 1\n",
           "# TYPE dsv41_step_time_seconds histogram\n",
           "# TYPE dsv41_num_requests_running gauge\n",
           "# TYPE dsv41_prefix_cache_hit_tokens_total counter\n",
       }) {
    EXPECT_NE(m.body.find(line), std::string::npos) << line << "\n" << m.body;
  }
}

// Connections that complete their handshake against a listener that never accepts: the accept
// queue's length bounds them.
int ConnectsQueuedWithoutAccept(int listen_fd, int attempts) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  EXPECT_EQ(getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::vector<pollfd> clients;
  for (int i = 0; i < attempts; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    clients.push_back({fd, POLLOUT, 0});
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  int connected = 0;
  for (pollfd& c : clients) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    int error = 0;
    socklen_t error_len = sizeof(error);
    if (poll(&c, 1, std::max<int>(0, left.count())) == 1 &&
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &error_len) == 0 && error == 0) {
      ++connected;
    }
    close(c.fd);
  }
  return connected;
}

int LoopbackListener(int backlog) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(listen(fd, backlog), 0);
  return fd;
}

TEST(ListenBacklogTest, WideningTheBacklogQueuesABurstOfConnections) {
  constexpr int kBurst = 32;
  const int narrow = LoopbackListener(2);
  EXPECT_LT(ConnectsQueuedWithoutAccept(narrow, kBurst), kBurst);  // the burst overflows
  close(narrow);
  const int widened = LoopbackListener(2);
  ASSERT_TRUE(SetListenBacklog(widened, 128).ok());
  EXPECT_EQ(ConnectsQueuedWithoutAccept(widened, kBurst), kBurst);
  close(widened);
  EXPECT_FALSE(SetListenBacklog(-1, 128).ok());
}

// ---- What Claude Code sends
// ----------------------------------------------------------------------

// The prompt the backend received, as text (special tokens kept).
std::string LastPromptText(const ScriptedBackend& backend, const Tokenizer& tokenizer) {
  return tokenizer.Decode(backend.last_prompt(), DecodeOptions{.skip_special_tokens = false});
}

TEST_F(ServerTest, SystemMessagesMidConversationRenderWhereTheyStand) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  // tokenizer-and-chat.md §6.8 example: a system message between turns renders <｜System｜> and
  // its text at that point; it counts as a user turn.
  const HttpResponse r = Post("/v1/messages", R"({"max_tokens": 5, "system": "S",
      "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "q1"},
      {"role": "assistant", "content": "a1"}, {"role": "system", "content": "mid"},
      {"role": "user", "content": "q2"}]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(LastPromptText(*backend_, *tokenizer_),
            "<｜begin▁of▁sentence｜><｜System｜>S<｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁"
            "sentence｜><｜System｜>mid<｜User｜>q2<｜Assistant｜></think>");
}

TEST_F(ServerTest, ThinkingTypesAndOutputConfigEffortSetTheMode) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  const std::string user = R"("messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5)";
  auto prompt_of = [&](const std::string& members) {
    const HttpResponse r = Post("/v1/messages", "{" + members + ", " + user + "}");
    EXPECT_EQ(r.status, 200) << members << ": " << r.body;
    return LastPromptText(*backend_, *tokenizer_);
  };
  const std::string adaptive_max =
      prompt_of(R"("thinking": {"type": "adaptive"}, "output_config": {"effort": "max"})");
  EXPECT_NE(adaptive_max.find("Reasoning Effort: 100 "), std::string::npos) << adaptive_max;
  EXPECT_TRUE(adaptive_max.ends_with("<｜Assistant｜><think>")) << adaptive_max;
  const std::string enabled_low = prompt_of(
      R"("thinking": {"type": "enabled", "budget_tokens": 1024}, "output_config": {"effort": "low"})");
  EXPECT_NE(enabled_low.find("Reasoning Effort: 50 "), std::string::npos) << enabled_low;
  const std::string disabled = prompt_of(R"("thinking": {"type": "disabled"})");
  EXPECT_EQ(disabled.find("Reasoning Effort"), std::string::npos) << disabled;
  EXPECT_TRUE(disabled.ends_with("<｜Assistant｜></think>")) << disabled;
}

TEST_F(ServerTest, FieldsClaudeCodeSendsThatDoNotChangeThePromptAreIgnored) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  const std::string plain = R"({"model": "tiny", "max_tokens": 5, "system": [{"type": "text",
      "text": "S"}], "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})";
  ASSERT_EQ(Post("/v1/messages", plain).status, 200);
  const std::vector<int32_t> expected = backend_->last_prompt();
  const std::string decorated = R"({"model": "tiny", "max_tokens": 5, "system": [{"type": "text",
      "text": "S", "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user",
      "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral",
      "ttl": "1h"}}]}], "metadata": {"user_id": "u"}, "context_management": {"edits": [{"type":
      "clear_thinking_20251015", "keep": "all"}]}, "service_tier": "auto"})";
  const HttpResponse r =
      Post("/v1/messages?beta=true", decorated,
           {{"anthropic-beta", "claude-code-20250219,mid-conversation-system-2026-04-07"},
            {"anthropic-version", "2023-06-01"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(backend_->last_prompt(), expected);
}

TEST_F(ServerTest, CountTokensGivesThePromptLengthTheEngineGets) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  const HttpResponse counted = Post("/v1/messages/count_tokens?beta=true", kMessagesBody);
  ASSERT_EQ(counted.status, 200) << counted.body;
  ASSERT_EQ(Post("/v1/messages", kMessagesBody).status, 200);
  EXPECT_EQ(JsonText(Parse(counted.body), "input_tokens"),
            std::to_string(backend_->last_prompt().size()));
  const HttpResponse bad = Post("/v1/messages/count_tokens", R"({"messages": []})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(JsonText(Parse(bad.body), "type"), "error") << "the Anthropic error shape";
}

// A raw HTTP/1.1 exchange (the client here has no HEAD): the response's status line.
std::string RawStatusLine(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "connect failed";
  }
  EXPECT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string got;
  char buf[512];
  ssize_t n = 0;
  while (got.find("\r\n") == std::string::npos && (n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return got.substr(0, got.find("\r\n"));
}

TEST_F(ServerTest, BaseUrlAnswersGetAndHead) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  EXPECT_EQ(Get("/").status, 200);
  EXPECT_EQ(
      RawStatusLine(server_->port(), "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
      "HTTP/1.1 200 OK");
  EXPECT_EQ(Get("/nowhere").status, 404);
}

TEST_F(ServerTest, StreamsSendTheirFirstEventBeforeAnyOutput) {
  HttpServerOptions options;
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_), options);
  backend_->set_hold(true);  // a prefill that does not end: no output at all
  // The fixture's heartbeat is 50 ms; what must arrive at once is the stream's first event.
  struct Case {
    std::string path, body, first_event;
  };
  const std::vector<Case> cases = {
      {"/v1/messages", WithMembers(kMessagesBody, R"("stream": true)"), "event: message_start"},
      {"/v1/chat/completions", WithMembers(kChatBody, R"("stream": true)"), "\"role\""},
  };
  for (const Case& c : cases) {
    std::string first;
    Result<HttpResponse> r =
        client_->PostStreaming(c.path, c.body, {}, [&](std::string_view piece) {
          first = std::string(piece);
          return false;  // hang up after the first piece
        });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_NE(first.find(c.first_event), std::string::npos) << c.path << ": " << first;
  }
  // Both hang-ups abort their requests in the engine although no token was ever produced.
  while (backend_->num_aborted() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(backend_->num_live(), 0);
}

TEST_F(ServerTest, ASecondServerOnAPortInUseFailsNamingIt) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  HttpServerOptions options;
  options.port = server_->port();
  ServerMetrics metrics;
  Result<std::unique_ptr<HttpServer>> second = HttpServer::Bind(options, metrics);
  ASSERT_FALSE(second.ok()) << "bound beside the first (SO_REUSEPORT?)";
  EXPECT_NE(second.status().message().find("address already in use"), std::string::npos)
      << second.status().message();
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(server_->port())),
            std::string::npos)
      << second.status().message();
  EXPECT_EQ(Get("/health").status, 200) << "the first keeps serving";
}

// A loopback connection to `port` (-1 when refused).
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_F(ServerTest, StalledAndSilentConnectionsDoNotStarveTheRest) {
  // Each connection takes two descriptors here (client and server side) and a server thread.
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  const int per_kind = static_cast<int>(std::min<rlim_t>(1000, (files.rlim_cur - 200) / 4));
  ASSERT_GE(per_kind, 100) << "too few file descriptors for the test: " << files.rlim_cur;
  HttpServerOptions options;
  // Long enough that no stalled connection is freed by its deadline while a fresh one is served
  // (a sanitizer build on a loaded machine took 5.2 s against a 6 s deadline).
  options.read_timeout_seconds = 12;
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_), options);
  std::vector<int> stalled;
  const std::string half =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 400"
      "\r\nContent-Type: application/json\r\n\r\n{\"messages\": [";
  for (int i = 0; i < 2 * per_kind; ++i) {
    const int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0) << "connection " << i << " refused";
    if (i % 2 == 1) {
      ASSERT_EQ(send(fd, half.data(), half.size(), 0), static_cast<ssize_t>(half.size()));
    }
    stalled.push_back(fd);
  }
  using Clock = std::chrono::steady_clock;
  for (int round = 0; round < 3; ++round) {
    const Clock::time_point t0 = Clock::now();
    HttpClient fresh("127.0.0.1", server_->port());
    Result<HttpResponse> health = fresh.Get("/health");
    ASSERT_TRUE(health.ok()) << health.status().ToString();
    EXPECT_EQ(health->status, 200);
    Result<HttpResponse> chat = fresh.Post("/v1/chat/completions", kChatBody);
    ASSERT_TRUE(chat.ok()) << chat.status().ToString();
    EXPECT_EQ(chat->status, 200);
    // Served before any stalled connection's read deadline could have freed a thread for it.
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(options.read_timeout_seconds - 1))
        << "round " << round;
  }
  // Every stalled connection is closed by its read deadline (EOF or reset on the client side).
  const Clock::time_point deadline =
      Clock::now() + std::chrono::seconds(options.read_timeout_seconds + 8);
  size_t closed = 0;
  size_t closed_silent = 0;
  for (size_t k = 0; k < stalled.size(); ++k) {
    bool eof = false;
    while (!eof) {
      pollfd p{stalled[k], POLLIN, 0};
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (poll(&p, 1, std::max(left, 0)) != 1) break;  // the deadline passed
      char buf[256];
      const ssize_t n = recv(stalled[k], buf, sizeof(buf), MSG_DONTWAIT);
      eof = n == 0 || (n < 0 && errno != EAGAIN);  // an error answer may come first
    }
    closed += eof ? 1 : 0;
    closed_silent += eof && k % 2 == 0 ? 1 : 0;
    close(stalled[k]);
  }
  EXPECT_EQ(closed_silent, stalled.size() / 2) << "silent connections closed";
  EXPECT_EQ(closed, stalled.size());
}

// ---- The Responses API (Codex CLI)
// ------------------------------------------------------------------------

const std::string kResponsesBody =
    R"({"model": "tiny", "instructions": "Be brief.", "input": [{"role": "user", "content":
        [{"type": "input_text", "text": "Weather in Paris?"}]}], "tools": [{"type": "function",
        "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type":
        "string"}}}}], "store": true, "include": ["reasoning.encrypted_content"]})";

// A response's output items without their ids (which differ between two runs).
std::string OutputWithoutIds(const JsonValue& response) {
  JsonValue output = *JsonAt(response, "output");
  for (JsonValue& item : output.array) {
    for (JsonMember& m : item.object) {
      if (m.key == "id" || m.key == "call_id") m.value = JsonString("-");
    }
  }
  return FormatJson(output);
}

// What a Responses stream adds up to.
struct ResponsesStream {
  std::vector<std::string> types;
  std::string reasoning, text, arguments;
  JsonValue final_response;
  bool sequence_in_order = true;
};

ResponsesStream CollectResponses(const std::vector<SseMessage>& events) {
  ResponsesStream s;
  for (size_t i = 0; i < events.size(); ++i) {
    const JsonValue data = Parse(events[i].data);
    EXPECT_EQ(JsonText(data, "type"), events[i].event) << "event name and data type agree";
    s.types.push_back(events[i].event);
    if (JsonText(data, "sequence_number") != std::to_string(i)) s.sequence_in_order = false;
    if (events[i].event == "response.reasoning_text.delta") s.reasoning += JsonText(data, "delta");
    if (events[i].event == "response.output_text.delta") s.text += JsonText(data, "delta");
    if (events[i].event == "response.function_call_arguments.delta") {
      s.arguments += JsonText(data, "delta");
    }
    if (events[i].event.starts_with("response.") && data.Find("response") != nullptr) {
      s.final_response = *data.Find("response");
    }
  }
  return s;
}

TEST_F(ServerTest, ResponsesGivesReasoningMessageAndFunctionCallItemsStreamingOrNot) {
  Start(ScriptedBackend::ByteSteps(kScript, *tokenizer_));
  const HttpResponse r = Post("/v1/responses", kResponsesBody);
  ASSERT_EQ(r.status, 200) << r.body;
  const JsonValue v = Parse(r.body);
  EXPECT_EQ(JsonText(v, "object"), "response");
  EXPECT_TRUE(JsonText(v, "id").starts_with("resp_"));
  EXPECT_EQ(JsonText(v, "status"), "completed");
  EXPECT_EQ(JsonText(v, "instructions"), "Be brief.");
  EXPECT_EQ(JsonText(v, "output.0.type"), "reasoning");
  EXPECT_EQ(JsonText(v, "output.0.content.0.text"), kReasoning);
  EXPECT_EQ(JsonText(v, "output.0.summary.0.text"), kReasoning);
  EXPECT_EQ(JsonText(v, "output.0.encrypted_content"), kReasoning) << "include asked for it";
  EXPECT_EQ(JsonText(v, "output.1.type"), "message");
  EXPECT_EQ(JsonText(v, "output.1.role"), "assistant");
  EXPECT_EQ(JsonText(v, "output.1.content.0.type"), "output_text");
  EXPECT_EQ(JsonText(v, "output.1.content.0.text"), kContent);
  EXPECT_EQ(JsonText(v, "output.2.type"), "function_call");
  EXPECT_EQ(JsonText(v, "output.2.name"), "get_weather");
  EXPECT_EQ(JsonText(v, "output.2.arguments"), kArguments);
  EXPECT_TRUE(JsonText(v, "output.2.call_id").starts_with("call_"));
  EXPECT_EQ(JsonText(v, "usage.output_tokens"), std::to_string(kScript.size()));
  EXPECT_NE(JsonAt(v, "usage.output_tokens_details.reasoning_tokens"), nullptr);
  EXPECT_EQ(JsonText(v, "usage.input_tokens"), std::to_string(backend_->last_prompt().size()));
  EXPECT_NE(JsonAt(v, "usage.input_tokens_details.cached_tokens"), nullptr);

  const ResponsesStream s =
      CollectResponses(PostSse("/v1/responses", WithMembers(kResponsesBody, R"("stream": true)")));
  EXPECT_TRUE(s.sequence_in_order);
  ASSERT_GE(s.types.size(), 3u);
  EXPECT_EQ(s.types[0], "response.created");
  EXPECT_EQ(s.types[1], "response.in_progress");
  EXPECT_EQ(s.types.back(), "response.completed");
  EXPECT_EQ(s.reasoning, kReasoning);
  EXPECT_EQ(s.text, kContent);
  EXPECT_EQ(s.arguments, kArguments);
  EXPECT_EQ(OutputWithoutIds(s.final_response), OutputWithoutIds(v));
  EXPECT_EQ(JsonText(s.final_response, "usage.output_tokens"), JsonText(v, "usage.output_tokens"));
  // Every item is announced, then finished; text parts open and close around their deltas.
  const std::vector<std::string> expected_order = {"response.output_item.added",
                                                   "response.content_part.added",
                                                   "response.reasoning_text.done",
                                                   "response.content_part.done",
                                                   "response.output_item.done",
                                                   "response.output_item.added",
                                                   "response.content_part.added",
                                                   "response.output_text.done",
                                                   "response.content_part.done",
                                                   "response.output_item.done",
                                                   "response.output_item.added",
                                                   "response.function_call_arguments.delta",
                                                   "response.function_call_arguments.done",
                                                   "response.output_item.done"};
  std::vector<std::string> structural;
  for (const std::string& type : s.types) {
    if (type != "response.reasoning_text.delta" && type != "response.output_text.delta" &&
        type != "response.created" && type != "response.in_progress" &&
        type != "response.completed") {
      structural.push_back(type);
    }
  }
  EXPECT_EQ(structural, expected_order);
}

TEST_F(ServerTest, ResponsesInputItemsRenderAsTheSameChatConversation) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  const HttpResponse chat = Post("/v1/chat/completions", R"({"messages": [
      {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "Looking.", "reasoning_content": "think",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather",
       "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
      {"role": "developer", "content": "Answer now."}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
      "reasoning_effort": "high"})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  const std::vector<int32_t> expected = backend_->last_prompt();
  const HttpResponse responses = Post("/v1/responses", R"({"instructions": "Be brief.",
      "input": [{"type": "message", "role": "user", "content": "Weather?"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "think"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text":
       "Looking.", "annotations": []}]},
      {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments":
       "{\"city\": \"Paris\"}"},
      {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
      {"role": "developer", "content": [{"type": "input_text", "text": "Answer now."}]}],
      "tools": [{"type": "function", "name": "get_weather", "parameters": {}, "strict": false}],
      "tool_choice": "auto", "parallel_tool_calls": false, "reasoning": {"effort": "high",
      "summary": "auto"}, "store": false, "stream": false, "prompt_cache_key": "k",
      "metadata": {"a": "b"}, "user": "u", "truncation": "disabled", "service_tier": "auto",
      "text": {"format": {"type": "text"}, "verbosity": "medium"}})");
  ASSERT_EQ(responses.status, 200) << responses.body;
  EXPECT_EQ(backend_->last_prompt(), expected) << LastPromptText(*backend_, *tokenizer_);
  EXPECT_EQ(JsonText(Parse(responses.body), "output.0.content.0.text"), "ok");

  // reasoning.effort none is chat mode (§6.9).
  ASSERT_EQ(Post("/v1/responses", R"({"input": "Hi", "reasoning": {"effort": "none"}})").status,
            200);
  EXPECT_TRUE(LastPromptText(*backend_, *tokenizer_).ends_with("<｜Assistant｜></think>"));
}

TEST_F(ServerTest, StoredResponsesAreReadDeletedAndContinuedByPreviousResponseId) {
  HttpServerOptions options;
  options.responses_store = 2;
  Start(ScriptedBackend::ByteSteps(kScript, *tokenizer_), options);
  const JsonValue first = Parse(Post("/v1/responses", kResponsesBody).body);
  const std::string id = JsonText(first, "id");
  const HttpResponse got = Get("/v1/responses/" + id);
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(FormatJson(Parse(got.body)), FormatJson(first));

  // Continuing the stored response renders the whole conversation, as if sent in full.
  const std::string call_id = JsonText(first, "output.2.call_id");
  const HttpResponse next = Post("/v1/responses", R"({"previous_response_id": ")" + id +
                                                      R"(", "input": [{"type":
      "function_call_output", "call_id": ")" + call_id +
                                                      R"(", "output": "sunny"}],
      "instructions": "Be brief.", "tools": [{"type": "function", "name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]})");
  ASSERT_EQ(next.status, 200) << next.body;
  const std::vector<int32_t> continued = backend_->last_prompt();
  const JsonValue output = *JsonAt(first, "output");
  std::string full_input = R"([{"role": "user", "content": [{"type": "input_text", "text":
      "Weather in Paris?"}]}, )";
  for (const JsonValue& item : output.array) full_input += FormatJson(item) + ", ";
  full_input +=
      R"({"type": "function_call_output", "call_id": ")" + call_id + R"(", "output": "sunny"}])";
  ASSERT_EQ(Post("/v1/responses",
                 R"({"store": false, "input": )" + full_input + R"(, "instructions": "Be brief.",
      "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}}}]})")
                .status,
            200);
  EXPECT_EQ(continued, backend_->last_prompt());

  // DELETE removes it; the store keeps the 2 most recently used.
  const HttpResponse deleted = client_->Delete("/v1/responses/" + id).value();
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  const JsonValue deleted_body = Parse(deleted.body);
  ASSERT_NE(JsonAt(deleted_body, "deleted"), nullptr);
  EXPECT_TRUE(JsonAt(deleted_body, "deleted")->bool_value);
  EXPECT_EQ(Get("/v1/responses/" + id).status, 404);
  EXPECT_EQ(client_->Delete("/v1/responses/" + id).value().status, 404);
  const std::string second = JsonText(Parse(next.body), "id");
  for (int i = 0; i < 2; ++i) ASSERT_EQ(Post("/v1/responses", kResponsesBody).status, 200);
  EXPECT_EQ(Get("/v1/responses/" + second).status, 404) << "evicted, least recently used";
  const HttpResponse unstored =
      Post("/v1/responses", WithMembers(R"({"input": "x"})", R"("store": false)"));
  EXPECT_EQ(Get("/v1/responses/" + JsonText(Parse(unstored.body), "id")).status, 404);
}

TEST_F(ServerTest, ResponsesOfferNamespacedFunctionsAndSkipHostedTools) {
  Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  // What Codex CLI lists: functions, a namespace of functions, and the hosted web_search.
  ASSERT_EQ(Post("/v1/responses", R"({"input": "x", "tools": [{"type": "function", "name": "a"},
      {"type": "namespace", "name": "ns", "description": "d", "tools": [{"type": "function",
      "name": "b", "parameters": {"type": "object"}}]}, {"type": "web_search",
      "external_web_access": false}]})")
                .status,
            200);
  const std::vector<int32_t> listed = backend_->last_prompt();
  ASSERT_EQ(Post("/v1/responses", R"({"input": "x", "tools": [{"type": "function", "name": "a"},
      {"type": "function", "name": "b", "parameters": {"type": "object"}}]})")
                .status,
            200);
  EXPECT_EQ(listed, backend_->last_prompt());
  EXPECT_NE(LastPromptText(*backend_, *tokenizer_).find("\"name\": \"b\""), std::string::npos);
}

TEST_F(ServerTest, ResponsesCutByTheBudgetAreIncomplete) {
  Start(ScriptedBackend::ByteSteps(kScript, *tokenizer_));
  const std::string body = WithMembers(kResponsesBody, R"("max_output_tokens": 5)");
  const JsonValue v = Parse(Post("/v1/responses", body).body);
  EXPECT_EQ(JsonText(v, "status"), "incomplete");
  EXPECT_EQ(JsonText(v, "incomplete_details.reason"), "max_output_tokens");
  const ResponsesStream s =
      CollectResponses(PostSse("/v1/responses", WithMembers(body, R"("stream": true)")));
  ASSERT_FALSE(s.types.empty());
  EXPECT_EQ(s.types.back(), "response.incomplete");
  EXPECT_EQ(JsonText(s.final_response, "incomplete_details.reason"), "max_output_tokens");
}

// The stream's id is the engine's: a backend whose own ids have moved on (a request it ran
// before the loop started) still reports the loop's requests under their streams' ids.
TEST(EngineLoopTest, OutputsCarryTheStreamsRequestId) {
  ScriptedBackend backend(std::vector<ScriptedBackend::ScriptStep>{{5}, {6}});
  Result<uint64_t> earlier = backend.AddRequest({1, 2}, SamplingParams{}, {});
  ASSERT_TRUE(earlier.ok());
  std::vector<RequestOutput> outputs;
  while (backend.HasUnfinished()) ASSERT_TRUE(backend.Step(outputs).ok());
  ServerMetrics metrics;
  EngineLoop loop(backend, metrics, EngineLoopOptions{});
  loop.Start();
  SubmitRefusal refusal = SubmitRefusal::kNone;
  Submission submission;
  submission.prompt_ids = {3, 4};
  const std::shared_ptr<RequestStream> stream = loop.Submit(std::move(submission), &refusal);
  ASSERT_NE(stream, nullptr);
  ASSERT_TRUE(stream->WaitAdmitted().ok());
  RequestOutput out;
  bool finished = false;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 200 && !finished; ++i) {
    if (!stream->Wait(out, std::chrono::milliseconds(50))) continue;
    EXPECT_EQ(out.request_id, stream->id());
    tokens.insert(tokens.end(), out.new_token_ids.begin(), out.new_token_ids.end());
    finished = out.finish != FinishReason::kNone;
  }
  loop.Shutdown(std::chrono::milliseconds(0));
  EXPECT_TRUE(finished);
  EXPECT_EQ(tokens, (std::vector<int32_t>{5, 6}));
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// Image input through the three APIs (vision.md §3) on the scripted backend: the server
// resolves, decodes and plans each image on the HTTP thread, expands its placeholder to the span
// and hands the images to the backend; bad images are 400s naming the part and the reason.
class ServerImageTest : public ServerTest {
 protected:
  // tiny-v's plan parameters (goldens/vision/README.md).
  static constexpr ImagePlanParams kPlan = {
      .patch_size = 14, .downsample_ratio = 3, .max_image_tokens = 120, .min_pixels = 40000};

  void StartWithImages(bool enabled = true, bool local_files = false) {
    served_.images.enabled = enabled;
    served_.images.image_token_id = tokenizer_->IdOf(kImageToken).value_or(-1);
    served_.images.plan = kPlan;
    served_.images.allow_local_files = local_files;
    ASSERT_GE(served_.images.image_token_id, 0);
    Start(ScriptedBackend::ByteSteps("ok", *tokenizer_));
  }

  static std::string DataUrl(const std::vector<uint8_t>& bytes) {
    return "data:image/png;base64," + EncodeBase64(bytes);
  }
  static std::string ChatBody(const std::string& url) {
    return R"({"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": [)"
           R"({"type": "image_url", "image_url": {"url": ")" +
           url + R"("}}, {"type": "text", "text": "describe"}]}]})";
  }
  static std::string MessagesBody(const std::string& base64) {
    return R"({"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": [)"
           R"({"type": "image", "source": {"type": "base64", "media_type": "image/png", )"
           R"("data": ")" +
           base64 + R"("}}, {"type": "text", "text": "describe"}]}]})";
  }
  static std::string ResponsesBody(const std::string& url) {
    return R"({"model": "tiny", "max_output_tokens": 2, "input": [{"role": "user", "content": [)"
           R"({"type": "input_text", "text": "describe"}, {"type": "input_image", )"
           R"("image_url": ")" +
           url + R"("}]}]})";
  }

  // The backend saw one image of `width` × `height` whose span (L image token ids) starts where
  // the placeholder was, and the response's usage counts the expanded prompt.
  void ExpectOneImageSpan(int32_t width, int32_t height, int64_t usage_prompt_tokens) {
    const Result<ImagePlan> plan = PlanImage(width, height, kPlan);
    ASSERT_TRUE(plan.ok());
    const std::vector<RequestImage>& images = backend_->last_images();
    ASSERT_EQ(images.size(), 1u);
    EXPECT_EQ(images[0].plan.span_length, plan->span_length);
    EXPECT_EQ(images[0].plan.bw, plan->bw);
    ASSERT_NE(images[0].canvas, nullptr);
    EXPECT_EQ(images[0].canvas->size(), static_cast<size_t>(plan->bw) * plan->bh * 3);
    const std::vector<int32_t>& prompt = backend_->last_prompt();
    const int32_t image_id = served_.images.image_token_id;
    EXPECT_EQ(std::count(prompt.begin(), prompt.end(), image_id), plan->span_length);
    ASSERT_LT(static_cast<size_t>(images[0].span_start), prompt.size());
    EXPECT_EQ(prompt[images[0].span_start], image_id);
    EXPECT_NE(prompt[images[0].span_start - 1], image_id);
    EXPECT_EQ(usage_prompt_tokens, static_cast<int64_t>(prompt.size()));
  }
};

TEST_F(ServerImageTest, AnImageThroughEachApiBecomesItsSpan) {
  StartWithImages();
  const std::vector<uint8_t> png = SmallPng(100, 60);
  const HttpResponse chat = Post("/v1/chat/completions", ChatBody(DataUrl(png)));
  ASSERT_EQ(chat.status, 200) << chat.body;
  ExpectOneImageSpan(100, 60, std::stoll(JsonText(Parse(chat.body), "usage.prompt_tokens")));

  const HttpResponse messages = Post("/v1/messages", MessagesBody(EncodeBase64(png)));
  ASSERT_EQ(messages.status, 200) << messages.body;
  ExpectOneImageSpan(100, 60, std::stoll(JsonText(Parse(messages.body), "usage.input_tokens")));

  const std::vector<uint8_t> jpeg = SmallJpeg(300, 220);
  const HttpResponse responses = Post("/v1/responses", ResponsesBody(DataUrl(jpeg)));
  ASSERT_EQ(responses.status, 200) << responses.body;
  ExpectOneImageSpan(300, 220, std::stoll(JsonText(Parse(responses.body), "usage.input_tokens")));

  const JsonValue models = Parse(Get("/v1/models").body);
  ASSERT_NE(JsonAt(models, "data.0.vision"), nullptr);
  EXPECT_TRUE(JsonAt(models, "data.0.vision")->bool_value);
  EXPECT_EQ(JsonText(models, "data.0.input_modalities.1"), "image");
  EXPECT_NE(Get("/metrics").body.find("dsv41_images_encoded_total"), std::string::npos);
}

// Issue 21's bad images through both chat APIs: a 400 naming the part and the reason; the
// server keeps serving.
TEST_F(ServerImageTest, BadImagesAre400sNamingThePart) {
  StartWithImages();
  for (const BadImageCase& bad : BadImageCases()) {
    SCOPED_TRACE(bad.name);
    const HttpResponse chat = Post("/v1/chat/completions", ChatBody(DataUrl(bad.bytes)));
    EXPECT_EQ(chat.status, 400) << chat.body;
    const std::string chat_message = JsonText(Parse(chat.body), "error.message");
    EXPECT_NE(chat_message.find("messages[0].content[0]: "), std::string::npos) << chat_message;
    EXPECT_NE(chat_message.find(bad.reason), std::string::npos) << chat_message;
    const HttpResponse messages = Post("/v1/messages", MessagesBody(EncodeBase64(bad.bytes)));
    EXPECT_EQ(messages.status, 400) << messages.body;
    const std::string messages_message = JsonText(Parse(messages.body), "error.message");
    EXPECT_NE(messages_message.find("messages[0].content[0]"), std::string::npos);
    EXPECT_NE(messages_message.find(bad.reason), std::string::npos) << messages_message;
  }
  EXPECT_EQ(Post("/v1/chat/completions", ChatBody(DataUrl(SmallPng(40, 30)))).status, 200);
}

// §3.5: sources and limits.
TEST_F(ServerImageTest, SourcesAndLimits) {
  StartWithImages();
  const auto error_of = [&](const std::string& path, const std::string& body) {
    const HttpResponse r = Post(path, body);
    EXPECT_EQ(r.status, 400) << r.body;
    return JsonText(Parse(r.body), "error.message");
  };
  EXPECT_NE(error_of("/v1/chat/completions", ChatBody("https://example.com/cat.png"))
                .find("are not fetched"),
            std::string::npos);
  EXPECT_NE(error_of("/v1/chat/completions", ChatBody("file:///etc/hostname"))
                .find("--allow-local-image-files"),
            std::string::npos);
  EXPECT_NE(error_of("/v1/chat/completions", ChatBody("data:image/png,abc")).find("base64"),
            std::string::npos);
  EXPECT_NE(error_of("/v1/chat/completions", ChatBody("data:image/png;base64,@@@@"))
                .find("invalid base64"),
            std::string::npos);
  std::string many = R"({"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", )"
                     R"("content": [)";
  const std::string url = DataUrl(SmallPng(20, 20));
  for (int i = 0; i < 17; ++i) {
    many +=
        std::string(i > 0 ? ", " : "") + R"({"type": "image_url", "image_url": ")" + url + R"("})";
  }
  many += "]}]}";
  EXPECT_NE(error_of("/v1/chat/completions", many)
                .find("17 images in one request, over the "
                      "limit of 16"),
            std::string::npos);
  EXPECT_NE(error_of("/v1/chat/completions",
                     R"({"model": "tiny", "messages": [{"role": "system", "content": [{"type":)"
                     R"( "image_url", "image_url": "x"}]}, {"role": "user", "content": "q"}]})")
                .find("only allowed in user messages"),
            std::string::npos);
}

// vision.md §3.2: an image inside an Anthropic tool_result (what a coding agent's file reader
// returns for a picture) is the placeholder within the result's content, joined by "\n\n".
TEST_F(ServerImageTest, AnImageInsideAnAnthropicToolResultBecomesItsSpan) {
  StartWithImages();
  const std::vector<uint8_t> png = SmallPng(100, 60);
  const std::string body =
      R"({"model": "tiny", "max_tokens": 2, "messages": [)"
      R"({"role": "user", "content": "open the picture"},)"
      R"({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read",)"
      R"( "input": {"path": "a.png"}}]},)"
      R"({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",)"
      R"( "content": [{"type": "text", "text": "the file:"}, {"type": "image", "source": )"
      R"({"type": "base64", "media_type": "image/png", "data": ")" +
      EncodeBase64(png) + R"("}}]}]}]})";
  const HttpResponse r = Post("/v1/messages", body);
  ASSERT_EQ(r.status, 200) << r.body;
  ExpectOneImageSpan(100, 60, std::stoll(JsonText(Parse(r.body), "usage.input_tokens")));
  const std::vector<int32_t>& prompt = backend_->last_prompt();
  const int32_t start = backend_->last_images()[0].span_start;
  const std::string before = tokenizer_->Decode(std::span(prompt).first(start));
  EXPECT_TRUE(before.ends_with("<tool_result>the file:\n\n")) << before;
  // A block other than text or image inside the result is still a 400 naming it.
  std::string other = body;
  other.replace(other.find(R"({"type": "text", "text": "the file:"})"),
                std::string(R"({"type": "text", "text": "the file:"})").size(),
                R"({"type": "document", "source": {}})");
  const HttpResponse refused = Post("/v1/messages", other);
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("messages[2].content[0].content[0]"), std::string::npos)
      << refused.body;
}

TEST_F(ServerImageTest, LocalFilesOnlyWhenAllowed) {
  StartWithImages(/*enabled=*/true, /*local_files=*/true);
  const std::string path = ::testing::TempDir() + "/dsv41_server_image.png";
  const std::vector<uint8_t> png = SmallPng(100, 60);
  ASSERT_TRUE(WriteStringToFile(path, std::string(png.begin(), png.end())).ok());
  const HttpResponse r = Post("/v1/chat/completions", ChatBody("file://" + path));
  ASSERT_EQ(r.status, 200) << r.body;
  ExpectOneImageSpan(100, 60, std::stoll(JsonText(Parse(r.body), "usage.prompt_tokens")));
}

// A model without a vision tower answers 400 for images on every API, and says so in /v1/models.
TEST_F(ServerImageTest, ATextOnlyModelRefusesImages) {
  StartWithImages(/*enabled=*/false);
  const std::string url = DataUrl(SmallPng(40, 30));
  const HttpResponse chat = Post("/v1/chat/completions", ChatBody(url));
  EXPECT_EQ(chat.status, 400);
  EXPECT_NE(chat.body.find("text-only deployment"), std::string::npos) << chat.body;
  const HttpResponse messages = Post("/v1/messages", MessagesBody(EncodeBase64(SmallPng(40, 30))));
  EXPECT_EQ(messages.status, 400);
  EXPECT_NE(messages.body.find("no vision tower"), std::string::npos) << messages.body;
  const HttpResponse responses = Post("/v1/responses", ResponsesBody(url));
  EXPECT_EQ(responses.status, 400);
  EXPECT_NE(responses.body.find("input[0].content[1]"), std::string::npos) << responses.body;
  const JsonValue models = Parse(Get("/v1/models").body);
  ASSERT_NE(JsonAt(models, "data.0.vision"), nullptr);
  EXPECT_FALSE(JsonAt(models, "data.0.vision")->bool_value);
}

}  // namespace
}  // namespace dsv41

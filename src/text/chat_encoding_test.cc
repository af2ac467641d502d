#include "text/chat_encoding.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "text/json_format.h"

namespace dsv41 {
namespace {

const std::string kEffort75 =
    "Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n";

std::string EffortLine(int effort) {
  return "Reasoning Effort: " + std::to_string(effort) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

Result<ChatPrompt> Render(const std::string& body) {
  return RenderChatCompletionsRequestText(body);
}

std::string RenderText(const std::string& body) {
  Result<ChatPrompt> prompt = Render(body);
  EXPECT_TRUE(prompt.ok()) << body << "\n" << prompt.status().ToString();
  return prompt.ok() ? prompt->text : "";
}

std::vector<std::string> ReadLines(const std::string& path) {
  Result<std::string> text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  std::vector<std::string> lines;
  if (!text.ok()) return lines;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\n', start);
    if (end == std::string::npos) end = text->size();
    if (end > start) lines.push_back(text->substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

TEST(ChatEncodingGoldenTest, EveryRenderLineMatchesByteForByte) {
  const std::vector<std::string> lines =
      ReadLines(std::string(DSV41_SHARED_DIR) + "/goldens/chat/render.jsonl");
  ASSERT_EQ(lines.size(), 64u);
  int num_matched = 0;
  for (const std::string& line : lines) {
    Result<JsonValue> golden = ParseJsonValue(line, "render.jsonl");
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    const std::string name = golden->Find("name")->text;
    const JsonValue& want = *golden->Find("prompt");
    Result<ChatPrompt> prompt = RenderChatCompletionsRequest(*golden->Find("request"));
    if (want.is_null()) {
      EXPECT_FALSE(prompt.ok()) << name << ": want an error (" << golden->Find("error")->text
                                << "), got\n"
                                << (prompt.ok() ? prompt->text : "");
      num_matched += prompt.ok() ? 0 : 1;
      continue;
    }
    ASSERT_TRUE(prompt.ok()) << name << ": " << prompt.status().ToString();
    EXPECT_EQ(prompt->text, want.text) << name;
    std::string joined;
    for (const PromptPiece& piece : prompt->pieces) joined += piece.text;
    EXPECT_EQ(joined, prompt->text) << name;
    num_matched += prompt->text == want.text ? 1 : 0;
  }
  EXPECT_EQ(num_matched, 64);
  std::printf("chat render goldens: %d/64 match\n", num_matched);
}

// §6.8 worked examples.
TEST(ChatEncodingTest, Example1ChatModeSingleUser) {
  EXPECT_EQ(
      RenderText(R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]})"),
      "<｜begin▁of▁sentence｜><｜User｜>x<｜Assistant｜></think>");
}

TEST(ChatEncodingTest, Example2ThinkingDefaultEffortWithSystem) {
  EXPECT_EQ(
      RenderText(
          R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}]})"),
      "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 + "S<｜User｜>Hi<｜Assistant｜><think>");
}

TEST(ChatEncodingTest, Example3EffortMaxWithoutSystem) {
  EXPECT_EQ(RenderText(R"({"reasoning_effort":"max","messages":[{"role":"user","content":"Hi"}]})"),
            "<｜begin▁of▁sentence｜><｜System｜>" + EffortLine(100) +
                "<｜User｜>Hi<｜Assistant｜><think>");
}

constexpr const char* kMultiTurn =
    R"("messages":[{"role":"user","content":"A"},)"
    R"({"role":"assistant","reasoning_content":"r1","content":"B"},{"role":"user","content":"C"}])";

TEST(ChatEncodingTest, Example4ThinkingDropsPastReasoning) {
  EXPECT_EQ(RenderText(std::string("{") + kMultiTurn + "}"),
            "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 +
                "<｜User｜>A<｜Assistant｜></think>B<｜end▁of▁sentence｜><｜User｜>C<｜Assistant｜>"
                "<think>");
}

TEST(ChatEncodingTest, Example5ChatModeMultiTurn) {
  EXPECT_EQ(RenderText(std::string(R"({"thinking":{"type":"disabled"},)") + kMultiTurn + "}"),
            "<｜begin▁of▁sentence｜><｜User｜>A<｜Assistant｜></think>B<｜end▁of▁sentence｜>"
            "<｜User｜>C<｜Assistant｜></think>");
}

TEST(ChatEncodingTest, DropThinkingFalseKeepsPastReasoningAndThinkHeaders) {
  EXPECT_EQ(RenderText(std::string(R"({"chat_template_kwargs":{"drop_thinking":false},)") +
                       kMultiTurn + "}"),
            "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 +
                "<｜User｜>A<｜Assistant｜><think>r1</think>B<｜end▁of▁sentence｜><｜User｜>C"
                "<｜Assistant｜><think>");
}

TEST(ChatEncodingTest, Example6ToolsOnInsertedSystemWithToolRoundTrip) {
  const std::string body =
      R"({"tools":[{"type":"function","function":{"name":"get_weather",)"
      R"("description":"Weather","parameters":{"type":"object","properties":)"
      R"({"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}}],)"
      R"("messages":[{"role":"user","content":"Weather in Paris?"},)"
      R"({"role":"assistant","reasoning_content":"Need tool.","content":null,)"
      R"("tool_calls":[{"id":"a","type":"function","function":{"name":"get_weather",)"
      R"("arguments":"{\"city\": \"Paris\", \"days\": 3}"}}]},)"
      R"({"role":"tool","tool_call_id":"a","content":"sunny"}]})";
  const std::string text = RenderText(body);
  const std::string head = "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 + "\n\n## Tools\n\n";
  EXPECT_EQ(text.substr(0, head.size()), head);
  EXPECT_NE(text.find("### Available Tool Schemas\n\n{\"name\": \"get_weather\", \"description\": "
                      "\"Weather\", \"parameters\": {\"type\": \"object\", \"properties\": "
                      "{\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, "
                      "\"required\": [\"city\"]}}\n\nYou MUST strictly follow"),
            std::string::npos);
  const std::string tail =
      "tool calls.\n<｜User｜>Weather in Paris?<｜Assistant｜><think>Need tool.</think>\n\n"
      "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
      "<｜DSML｜ parameter name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"days\" string=\"false\">3</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜><｜User｜>"
      "<tool_result>sunny</tool_result><｜Assistant｜><think>";
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

TEST(ChatEncodingTest, Example7MidConversationSystemIsAUserTurn) {
  EXPECT_EQ(RenderText(R"({"chat_template_kwargs":{"reasoning_effort":88},"messages":[)"
                       R"({"role":"system","content":"sys"},{"role":"user","content":"q1"},)"
                       R"({"role":"assistant","reasoning_content":"r1","content":"a1"},)"
                       R"({"role":"system","content":"mid sys"}]})"),
            "<｜begin▁of▁sentence｜><｜System｜>" + EffortLine(88) +
                "sys<｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁sentence｜><｜System｜>mid sys"
                "<｜Assistant｜><think>");
}

TEST(ChatEncodingTest, Example8ChatModeMidSystemThenUser) {
  EXPECT_EQ(RenderText(R"({"thinking":{"type":"disabled"},"messages":[)"
                       R"({"role":"system","content":"S"},{"role":"user","content":"q1"},)"
                       R"({"role":"assistant","content":"a1"},{"role":"system","content":"mid"},)"
                       R"({"role":"user","content":"q2"}]})"),
            "<｜begin▁of▁sentence｜><｜System｜>S<｜User｜>q1<｜Assistant｜></think>a1"
            "<｜end▁of▁sentence｜><｜System｜>mid<｜User｜>q2<｜Assistant｜></think>");
}

TEST(ChatEncodingTest, Example9DeveloperBeforeLastUserIsDroppedInThinkingKeptInChat) {
  const std::string messages =
      R"("messages":[{"role":"developer","content":"Always answer in JSON."},)"
      R"({"role":"user","content":"Give me a fruit."}])";
  EXPECT_EQ(RenderText("{" + messages + "}"),
            "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 +
                "<｜User｜>Give me a fruit.<｜Assistant｜><think>");
  EXPECT_EQ(RenderText(R"({"thinking":{"type":"disabled"},)" + messages + "}"),
            "<｜begin▁of▁sentence｜><｜User｜>Always answer in JSON.<｜User｜>Give me a fruit."
            "<｜Assistant｜></think>");
}

TEST(ChatEncodingTest, Example10CurrentTurnKeepsReasoningVerbatim) {
  const std::string text = RenderText(
      R"({"messages":[{"role":"user","content":"question"},{"role":"assistant",)"
      R"("reasoning_content":"  reason  ","content":"summary","tool_calls":[{"type":"function",)"
      R"("function":{"name":"lookup","arguments":"{\"query\":\"value\",\"limit\":2}"}}]}]})");
  const std::string tail =
      "<｜User｜>question<｜Assistant｜><think>  reason  </think>summary\n\n<｜DSML｜ calls>\n"
      "<｜DSML｜ invoke name=\"lookup\">\n"
      "<｜DSML｜ parameter name=\"query\" string=\"true\">value</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"limit\" string=\"false\">2</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>";
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

TEST(ChatEncodingTest, Example11ToolResultsSortedIntoCallOrder) {
  const std::string text =
      RenderText(R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"w"},)"
                 R"({"role":"assistant","content":null,"tool_calls":[)"
                 R"({"id":"w1","type":"function","function":{"name":"w","arguments":"{}"}},)"
                 R"({"id":"w2","type":"function","function":{"name":"w","arguments":"{}"}},)"
                 R"({"id":"w3","type":"function","function":{"name":"w","arguments":"{}"}}]},)"
                 R"({"role":"tool","tool_call_id":"w3","content":"Lima"},)"
                 R"({"role":"tool","tool_call_id":"w1","content":"Paris"},)"
                 R"({"role":"tool","tool_call_id":"w2","content":"Tokyo"}]})");
  EXPECT_NE(text.find("<｜User｜><tool_result>Paris</tool_result>\n\n<tool_result>Tokyo"
                      "</tool_result>\n\n<tool_result>Lima</tool_result><｜Assistant｜></think>"),
            std::string::npos)
      << text;
  // A call without arguments renders with an empty line (§6.4).
  EXPECT_NE(text.find("<｜DSML｜ invoke name=\"w\">\n\n</｜DSML｜ invoke>"), std::string::npos);
}

TEST(ChatEncodingTest, SortingMovesOnlyResultBlocksTextStaysInPlace) {
  std::vector<ChatMessage> messages(5);
  messages[0].role = "user";
  messages[0].content = "q";
  messages[1].role = "assistant";
  messages[1].tool_calls = {{"a", "f", {}}, {"b", "f", {}}};
  for (ChatToolCall& call : messages[1].tool_calls) call.arguments.kind = JsonValue::Kind::kObject;
  messages[2].role = "tool";
  messages[2].tool_call_id = "b";
  messages[2].content = "B";
  messages[3].role = "user";
  messages[3].content = "between";
  messages[4].role = "tool";
  messages[4].tool_call_id = "a";
  messages[4].content = "A";
  Result<ChatPrompt> prompt = RenderChatMessages(messages, {ChatMode::kChat, 75, true});
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_NE(prompt->text.find("<｜User｜><tool_result>A</tool_result>\n\nbetween\n\n"
                              "<tool_result>B</tool_result><｜Assistant｜></think>"),
            std::string::npos)
      << prompt->text;
}

TEST(ChatEncodingTest, ReasoningEffortNamesAndAliases) {
  const std::vector<std::pair<std::string, int>> cases = {
      {"\"low\"", 50},   {"\"high\"", 75},   {"\"max\"", 100},
      {"\"xhigh\"", 75}, {"\"medium\"", 75}, {"\"minimal\"", 50},
      {"1", 1},          {"100", 100},       {"37", 37}};
  for (const auto& [value, effort] : cases) {
    EXPECT_EQ(RenderText(R"({"reasoning_effort":)" + value +
                         R"(,"messages":[{"role":"user","content":"q"}]})"),
              "<｜begin▁of▁sentence｜><｜System｜>" + EffortLine(effort) +
                  "<｜User｜>q<｜Assistant｜><think>")
        << value;
  }
}

TEST(ChatEncodingTest, ReasoningEffortErrorsNameTheField) {
  for (const char* value : {"0", "101", "-1", "1.0", "50.5", "true", "null", "\"High\"",
                            "\"extreme\"", "\"\"", "[]", "99999999999999999999999"}) {
    const std::string body = std::string(R"({"chat_template_kwargs":{"reasoning_effort":)") +
                             value + R"(},"messages":[{"role":"user","content":"q"}]})";
    Result<ChatPrompt> prompt = Render(body);
    if (std::string(value) == "null") {
      EXPECT_TRUE(prompt.ok()) << "null means absent";
      continue;
    }
    ASSERT_FALSE(prompt.ok()) << value;
    EXPECT_EQ(prompt.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(prompt.status().message().find("chat_template_kwargs.reasoning_effort"),
              std::string::npos)
        << prompt.status().message();
  }
}

TEST(ChatEncodingTest, EffortNoneSelectsChatModeAndTopLevelWinsOverKwargs) {
  EXPECT_EQ(RenderText(R"({"reasoning_effort":"none","messages":[{"role":"user","content":"q"}]})"),
            "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>");
  EXPECT_EQ(
      RenderText(R"({"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":)"
                 R"(90},"messages":[{"role":"user","content":"q"}]})"),
      "<｜begin▁of▁sentence｜><｜System｜>" + EffortLine(50) + "<｜User｜>q<｜Assistant｜><think>");
}

TEST(ChatEncodingTest, ThinkingSwitchFirstMatchWins) {
  const std::string chat = "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>";
  const std::string think =
      "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 + "<｜User｜>q<｜Assistant｜><think>";
  const std::string msgs = R"("messages":[{"role":"user","content":"q"}])";
  EXPECT_EQ(RenderText(R"({"thinking":{"type":"enabled"},"chat_template_kwargs":{"thinking":)"
                       R"(false},)" +
                       msgs + "}"),
            think);
  EXPECT_EQ(RenderText(R"({"chat_template_kwargs":{"thinking":false,"enable_thinking":true},)" +
                       msgs + "}"),
            chat);
  EXPECT_EQ(RenderText(R"({"chat_template_kwargs":{"enable_thinking":false},)" + msgs + "}"), chat);
  EXPECT_EQ(RenderText("{" + msgs + "}"), think);
  EXPECT_FALSE(Render(R"({"thinking":{"type":"sometimes"},)" + msgs + "}").ok());
  EXPECT_FALSE(Render(R"({"chat_template_kwargs":{"thinking":"yes"},)" + msgs + "}").ok());
}

TEST(ChatEncodingTest, ResponseFormatFollowsToolsOnTheSystemMessage) {
  EXPECT_EQ(RenderText(R"({"thinking":{"type":"disabled"},"response_format":{"type":)"
                       R"("json_object"},"messages":[{"role":"user","content":"q"}]})"),
            "<｜begin▁of▁sentence｜><｜System｜>\n\n## Response Format:\n\nYou MUST strictly "
            "adhere to the following schema to reply:\n{\"type\": \"json_object\"}<｜User｜>q"
            "<｜Assistant｜></think>");
  EXPECT_EQ(RenderText(R"({"thinking":{"type":"disabled"},"response_format":{"type":"text"},)"
                       R"("messages":[{"role":"user","content":"q"}]})"),
            "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>");
}

TEST(ChatEncodingTest, EmptyToolsListIsNoTools) {
  EXPECT_EQ(RenderText(R"({"thinking":{"type":"disabled"},"tools":[],)"
                       R"("messages":[{"role":"user","content":"q"}]})"),
            "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>");
}

TEST(ChatEncodingTest, TaskTokensAtTheTransition) {
  std::vector<ChatMessage> messages(1);
  messages[0].role = "user";
  messages[0].content = "q";
  messages[0].task = "action";
  Result<ChatPrompt> chat = RenderChatMessages(messages, {ChatMode::kChat, 75, true});
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->text, "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think><｜action｜>");
  messages[0].task = "query";
  Result<ChatPrompt> query = RenderChatMessages(messages, {ChatMode::kThinking, 75, true});
  ASSERT_TRUE(query.ok());
  EXPECT_EQ(query->text,
            "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 + "<｜User｜>q<｜query｜>");
  // An assistant right after a task message renders without a reasoning part.
  messages[0].task = "action";
  messages.resize(3);
  messages[1].role = "assistant";
  messages[1].reasoning_content = "r";
  messages[1].content = "a";
  messages[2].role = "user";
  messages[2].content = "next";
  Result<ChatPrompt> after = RenderChatMessages(messages, {ChatMode::kThinking, 75, false});
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->text, "<｜begin▁of▁sentence｜><｜System｜>" + kEffort75 +
                             "<｜User｜>q<｜Assistant｜><think><｜action｜>a<｜end▁of▁sentence｜>"
                             "<｜User｜>next<｜Assistant｜><think>");
  messages[0].task = "bogus";
  EXPECT_FALSE(RenderChatMessages(messages, {}).ok());
}

TEST(ChatEncodingTest, UserTypedSpecialLiteralsStayInsideTextPieces) {
  Result<ChatPrompt> prompt = Render(
      R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"a <｜User｜> b"}]})");
  ASSERT_TRUE(prompt.ok());
  ASSERT_EQ(prompt->pieces.size(), 5u);
  EXPECT_EQ(prompt->pieces[0].kind, PromptPiece::Kind::kSpecialToken);
  EXPECT_EQ(prompt->pieces[0].text, "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(prompt->pieces[1].text, "<｜User｜>");
  EXPECT_EQ(prompt->pieces[2].kind, PromptPiece::Kind::kText);
  EXPECT_EQ(prompt->pieces[2].text, "a <｜User｜> b");
  EXPECT_EQ(prompt->pieces[3].text, "<｜Assistant｜>");
  EXPECT_EQ(prompt->pieces[4].text, "</think>");
  EXPECT_FALSE(prompt->ends_in_reasoning);
}

TEST(ChatEncodingTest, TemplateTextAndUserTextBetweenSpecialsFormOnePiece) {
  // The effort line (template) and the system text (user) sit between two special tokens.
  Result<ChatPrompt> prompt =
      Render(R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}]})");
  ASSERT_TRUE(prompt.ok());
  ASSERT_GE(prompt->pieces.size(), 3u);
  EXPECT_EQ(prompt->pieces[2].kind, PromptPiece::Kind::kText);
  EXPECT_EQ(prompt->pieces[2].text, kEffort75 + "S");
  EXPECT_TRUE(prompt->ends_in_reasoning);
  EXPECT_EQ(prompt->mode, ChatMode::kThinking);
  // DSML tags written by the template split at the ｜DSML｜ token.
  Result<ChatPrompt> tools = Render(
      R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"","tool_calls":)"
      R"([{"type":"function","function":{"name":"f","arguments":{"k":"v"}}}]}]})");
  ASSERT_TRUE(tools.ok()) << tools.status().ToString();
  int num_dsml = 0;
  for (const PromptPiece& piece : tools->pieces) {
    if (piece.kind == PromptPiece::Kind::kSpecialToken && piece.text == "｜DSML｜") ++num_dsml;
  }
  EXPECT_EQ(num_dsml, 6);  // calls, invoke, parameter, /parameter, /invoke, /calls
}

TEST(ChatEncodingTest, RequestErrorsNameMessageAndField) {
  const struct {
    const char* body;
    const char* field;
  } cases[] = {
      {R"({"messages":[{"role":"user","content":"q"},{"role":"developer","content":""}]})",
       "messages[1].content"},
      {R"({"messages":[{"role":"user","content":"look <｜deepseek_image｜>"}]})",
       "messages[0].content"},
      {R"({"tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user",)"
       R"("content":"<｜deepseek_image｜>"}]})",
       "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
       "messages[0].content[0]"},
      {R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,)"
       R"("tool_calls":[{"type":"function","function":{"name":"f","arguments":"null"}}]}]})",
       "messages[1].tool_calls[0].function.arguments"},
      {R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,)"
       R"("tool_calls":[{"type":"function","function":{"name":"f","arguments":""}}]}]})",
       "messages[1].tool_calls[0].function.arguments"},
      {R"({"messages":[{"role":"wizard","content":"q"}]})", "messages[0].role"},
      {R"({"messages":[{"role":"system","content":[{"type":"input_audio"}]}]})",
       "messages[0].content[0]"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","reasoning_content":)"
       R"("<｜deepseek_image｜>"}]})",
       "messages[1].reasoning_content"},
  };
  for (const auto& c : cases) {
    Result<ChatPrompt> prompt = Render(c.body);
    ASSERT_FALSE(prompt.ok()) << c.body;
    EXPECT_EQ(prompt.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(prompt.status().message().find(c.field), std::string::npos)
        << c.field << " not in: " << prompt.status().message();
  }
  EXPECT_FALSE(Render("{not json").ok());
}

TEST(ChatEncodingTest, UnsupportedUserPartTypesRenderAsPlaceholders) {
  EXPECT_EQ(
      RenderText(R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":)"
                 R"([{"type":"text","text":"a"},{"type":"input_audio"}]}]})"),
      "<｜begin▁of▁sentence｜><｜User｜>a\n\n[Unsupported input_audio]<｜Assistant｜></think>");
}

TEST(ChatEncodingTest, PrefillAndLoneSystemEndWithoutHeader) {
  EXPECT_EQ(RenderText(R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":)"
                       R"("q"},{"role":"assistant","content":"par"}]})"),
            "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>par<｜end▁of▁sentence｜>");
  EXPECT_EQ(RenderText(R"({"thinking":{"type":"disabled"},"messages":[{"role":"system",)"
                       R"("content":"S"}]})"),
            "<｜begin▁of▁sentence｜><｜System｜>S");
}

TEST(ChatEncodingTest, ToolArgumentsObjectOrStringRenderAlike) {
  const auto body = [](const std::string& arguments) {
    return R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"q"},)"
           R"({"role":"assistant","content":null,"tool_calls":[{"type":"function","function":)"
           R"({"name":"f","arguments":)" +
           arguments + "}}]}]}";
  };
  const std::string want =
      "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n"
      "<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"x\" string=\"false\">1000.0</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"s\" string=\"true\">a\"b</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"o\" string=\"false\">{\"k\": [1, \"é\"]}</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>";
  EXPECT_EQ(RenderText(body(R"({"x":1e3,"s":"a\"b","o":{"k":[1,"\u00e9"]}})")), want);
  EXPECT_EQ(RenderText(body(R"("{\"x\":1e3,\"s\":\"a\\\"b\",\"o\":{\"k\":[1,\"\\u00e9\"]}}")")),
            want);
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

Result<ChatPrompt> RenderWithImages(const std::string& body) {
  Result<JsonValue> request = ParseJsonValue(body, "test body");
  if (!request.ok()) return request.status();
  return RenderChatCompletionsRequest(*request, ChatRequestOptions{.images = true});
}

// vision.md §3.2's examples: each image part is the placeholder special token, joined with the
// user's text blocks by "\n\n"; ChatPrompt::images lists the sources in prompt order.
TEST(ChatImageTest, ImagePartsRenderAsThePlaceholder) {
  Result<ChatPrompt> first =
      RenderWithImages(R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":[)"
                       R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}},)"
                       R"({"type":"text","text":"describe"}]}]})");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(
      first->text,
      "<｜begin▁of▁sentence｜><｜User｜><｜deepseek_image｜>\n\ndescribe<｜Assistant｜></think>");
  ASSERT_EQ(first->images.size(), 1u);
  EXPECT_EQ(first->images[0].url, "data:image/png;base64,AA==");
  EXPECT_EQ(first->images[0].field, "messages[0].content[0]");
  int placeholders = 0;
  for (const PromptPiece& piece : first->pieces) {
    placeholders +=
        piece.kind == PromptPiece::Kind::kSpecialToken && piece.text == "<｜deepseek_image｜>";
  }
  EXPECT_EQ(placeholders, 1);

  Result<ChatPrompt> middle = RenderWithImages(
      R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":[)"
      R"({"type":"text","text":"before"},{"type":"image_url","image_url":"u1"},)"
      R"({"type":"text","text":"after"},{"type":"image_url","image_url":{"url":"u2"}}]}]})");
  ASSERT_TRUE(middle.ok()) << middle.status().ToString();
  EXPECT_EQ(middle->text,
            "<｜begin▁of▁sentence｜><｜User｜>before\n\n<｜deepseek_image｜>\n\nafter\n\n"
            "<｜deepseek_image｜><｜Assistant｜></think>");
  ASSERT_EQ(middle->images.size(), 2u);
  EXPECT_EQ(middle->images[0].url, "u1");
  EXPECT_EQ(middle->images[1].url, "u2");
  EXPECT_EQ(middle->images[1].field, "messages[0].content[3]");
  // Thinking mode: only the usual system prefix and the trailing <think> change.
  Result<ChatPrompt> thinking = RenderWithImages(
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":"u"}]}]})");
  ASSERT_TRUE(thinking.ok());
  EXPECT_TRUE(thinking->text.ends_with("<｜User｜><｜deepseek_image｜><｜Assistant｜><think>"))
      << thinking->text;
}

// §3.1, §3.4: images outside user messages, an image part without a source, a typed placeholder
// literal, and any image part in a text-only deployment are request errors naming the part.
TEST(ChatImageTest, MisplacedOrSourcelessImagesAreRefused) {
  const struct {
    const char* body;
    const char* want;
  } cases[] = {
      {R"({"messages":[{"role":"system","content":[{"type":"image_url","image_url":"u"}]},)"
       R"({"role":"user","content":"q"}]})",
       "messages[0].content[0]: image parts are only allowed in user messages"},
      {R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[)"
       R"({"type":"image_url","image_url":"u"}]}]})",
       "messages[1].content[0]: image parts are only allowed in user messages"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
       "messages[0].content[0].image_url: an image part needs a url"},
      {R"({"messages":[{"role":"user","content":[{"type":"image"}]}]})",
       "messages[0].content[0].image_url: an image part needs a url"},
      {R"({"messages":[{"role":"user","content":[{"type":"text","text":"<｜deepseek_image｜>"}]}]})",
       "messages[0].content: contains the image placeholder"},
  };
  for (const auto& c : cases) {
    Result<ChatPrompt> prompt = RenderWithImages(c.body);
    ASSERT_FALSE(prompt.ok()) << c.body;
    EXPECT_NE(prompt.status().message().find(c.want), std::string::npos)
        << prompt.status().message();
  }
  Result<ChatPrompt> text_only = RenderChatCompletionsRequestText(
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":"u"}]}]})");
  ASSERT_FALSE(text_only.ok());
  EXPECT_NE(text_only.status().message().find("text-only deployment"), std::string::npos);
}

}  // namespace
}  // namespace dsv41

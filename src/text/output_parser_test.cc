#include "text/output_parser.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "text/json_format.h"

namespace dsv41 {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";

struct Collected {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
};

// Feeds `pieces` to a streaming parser and concatenates what it emits.
Collected Stream(const std::vector<std::string>& pieces, ChatMode mode) {
  StreamingOutputParser parser(mode);
  std::vector<OutputDelta> deltas;
  for (const std::string& piece : pieces) parser.Push(piece, deltas);
  parser.Finish(deltas);
  Collected out;
  for (const OutputDelta& delta : deltas) {
    switch (delta.kind) {
      case OutputDelta::Kind::kReasoning:
        out.reasoning += delta.text;
        break;
      case OutputDelta::Kind::kContent:
        out.content += delta.text;
        break;
      case OutputDelta::Kind::kToolCall:
        EXPECT_EQ(delta.tool_call_idx, static_cast<int>(out.tool_calls.size()));
        out.tool_calls.push_back(delta.tool_call);
        break;
    }
  }
  return out;
}

// Expected fields in one place, so golden and hand-written cases compare alike.
struct Expected {
  std::optional<std::string> reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
};

::testing::AssertionResult SameCalls(const std::vector<ParsedToolCall>& got,
                                     const std::vector<ParsedToolCall>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " calls, want " << want.size();
  }
  for (size_t k = 0; k < got.size(); ++k) {
    if (got[k].name != want[k].name || got[k].arguments != want[k].arguments) {
      return ::testing::AssertionFailure()
             << "call " << k << ": " << got[k].name << " " << got[k].arguments << ", want "
             << want[k].name << " " << want[k].arguments;
    }
  }
  return ::testing::AssertionSuccess();
}

// Non-streaming result equals `want`, and so does streaming with every two-piece split and one
// character at a time (golden README).
void CheckAllWays(const std::string& name, const std::string& text, ChatMode mode,
                  const Expected& want) {
  const ParsedOutput parsed = ParseModelOutput(text, mode);
  EXPECT_EQ(parsed.reasoning_content, want.reasoning) << name;
  EXPECT_EQ(parsed.content, want.content) << name;
  EXPECT_TRUE(SameCalls(parsed.tool_calls, want.tool_calls)) << name;

  std::vector<std::vector<std::string>> splits;
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    splits.push_back({text.substr(0, cut), text.substr(cut)});
  }
  std::vector<std::string> bytes;
  for (const char c : text) bytes.emplace_back(1, c);
  splits.push_back(bytes);
  for (const auto& pieces : splits) {
    const Collected got = Stream(pieces, mode);
    const size_t first_size = pieces.empty() ? 0 : pieces[0].size();
    const std::string where =
        name + " split " + std::to_string(first_size) + "/" + std::to_string(pieces.size());
    EXPECT_EQ(got.reasoning, want.reasoning.value_or("")) << where;
    EXPECT_EQ(got.content, want.content) << where;
    EXPECT_TRUE(SameCalls(got.tool_calls, want.tool_calls)) << where;
    if (::testing::Test::HasFailure()) return;  // one failing split says enough
  }
}

TEST(OutputParserGoldenTest, EveryParseLineMatchesNonStreamingAndStreaming) {
  Result<std::string> file =
      ReadFileToString(std::string(DSV41_SHARED_DIR) + "/goldens/chat/parse.jsonl");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  int num_lines = 0;
  int num_matched = 0;
  size_t start = 0;
  while (start < file->size()) {
    size_t end = file->find('\n', start);
    if (end == std::string::npos) end = file->size();
    const std::string line = file->substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    Result<JsonValue> golden = ParseJsonValue(line, "parse.jsonl");
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    ++num_lines;
    const std::string name = golden->Find("name")->text;
    const ChatMode mode =
        golden->Find("thinking_mode")->text == "thinking" ? ChatMode::kThinking : ChatMode::kChat;
    const JsonValue& expected = *golden->Find("expected");
    Expected want;
    if (!expected.Find("reasoning_content")->is_null()) {
      want.reasoning = expected.Find("reasoning_content")->text;
    }
    want.content = expected.Find("content")->text;
    for (const JsonValue& call : expected.Find("tool_calls")->array) {
      want.tool_calls.push_back({call.Find("name")->text, call.Find("arguments")->text});
    }
    const bool had_failure = ::testing::Test::HasFailure();
    CheckAllWays(name, golden->Find("text")->text, mode, want);
    if (!had_failure && !::testing::Test::HasFailure()) ++num_matched;
  }
  EXPECT_EQ(num_lines, 37);
  EXPECT_EQ(num_matched, 37);
  std::printf("chat parse goldens: %d/%d match (non-streaming and streaming)\n", num_matched,
              num_lines);
}

TEST(OutputParserTest, SpecExampleArguments) {
  // §7.2 step 5 examples.
  CheckAllWays("query_limit",
               "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
               "<｜DSML｜ parameter name=\"query\" string=\"true\">value</｜DSML｜ parameter>\n"
               "<｜DSML｜ parameter name=\"limit\" string=\"false\">2</｜DSML｜ parameter>\n"
               "</｜DSML｜ invoke>\n</｜DSML｜ calls>",
               ChatMode::kChat, {std::nullopt, "", {{"f", R"({"query": "value", "limit": 2})"}}});
  CheckAllWays("not_json",
               "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
               "<｜DSML｜ parameter name=\"x\" string=\"false\">not json</｜DSML｜ parameter>\n"
               "</｜DSML｜ invoke>\n</｜DSML｜ calls>",
               ChatMode::kChat, {std::nullopt, "", {{"f", R"({"x": "not json"})"}}});
}

TEST(OutputParserTest, ValueWhitespaceIsKeptAndNewlineBeforeSlashTolerated) {
  CheckAllWays("ws",
               "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke  name=\"f\">\n"
               "<｜DSML｜ parameter name=\"a\" string=\"false\"> [1, 2] <\n/｜DSML｜ parameter>\n"
               "<｜DSML｜ parameter name=\"b\" string=\"true\">x\n<\n/｜DSML｜ parameter>\n"
               "</｜DSML｜ invoke>\n</｜DSML｜ calls>" +
                   kEos + "ignored",
               ChatMode::kChat, {std::nullopt, "", {{"f", "{\"a\":  [1, 2] , \"b\": \"x\\n\"}"}}});
}

TEST(OutputParserTest, MalformedBlocksBecomeRawContent) {
  const std::string call = "<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n";
  const std::vector<std::string> blocks = {
      "\n\n<｜DSML｜ calls>\n</｜DSML｜ calls>",                // no invoke
      "\n\n<｜DSML｜ calls>\n" + call + "</｜DSML｜ calls> ",   // trailing space
      "\n\n<｜DSML｜ calls>\n" + call + "</｜DSML｜ calls>\n",  // trailing newline
      "\n\n<｜DSML｜ calls>\n" + call,                          // truncated
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke></｜DSML｜ calls>",
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=f>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n\n\n</｜DSML｜ invoke>\n</｜DSML｜ "
      "calls>",
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" "
      "string=\"true\">x</｜DSML｜ parameter></｜DSML｜ invoke>\n</｜DSML｜ calls>",
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\">x"
      "</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" "
      "string=\"true\">x/｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
  };
  for (const std::string& block : blocks) {
    EXPECT_TRUE(ParseModelOutput("pre" + block + kEos, ChatMode::kChat).malformed_tool_block)
        << block;
    CheckAllWays(block, "r</think>pre" + block + kEos, ChatMode::kThinking,
                 {"r", "pre" + block, {}});
  }
}

TEST(OutputParserTest, HeldBackMarkerPrefixesAreReleasedAtFinish) {
  EXPECT_EQ(Stream({"abc</thi"}, ChatMode::kThinking).reasoning, "abc</thi");
  EXPECT_EQ(Stream({"abc\n\n<｜DSML"}, ChatMode::kChat).content, "abc\n\n<｜DSML");
  EXPECT_EQ(Stream({"abc<｜end▁of"}, ChatMode::kChat).content, "abc<｜end▁of");
}

TEST(OutputParserTest, StreamingHoldsBackOnlyPossibleMarkerStarts) {
  StreamingOutputParser parser(ChatMode::kChat);
  std::vector<OutputDelta> deltas;
  parser.Push("Line\n", deltas);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].text, "Line");  // "\n" may start the opener
  parser.Push("\nMore", deltas);
  ASSERT_EQ(deltas.size(), 2u);
  EXPECT_EQ(deltas[1].text, "\n\nMore");
  parser.Push("<｜end▁of▁sentence｜>after", deltas);
  EXPECT_TRUE(parser.done());
  EXPECT_EQ(deltas.size(), 2u);
}

TEST(OutputParserTest, ToolCallsArriveOnlyWhenTheBlockEnds) {
  StreamingOutputParser parser(ChatMode::kChat);
  std::vector<OutputDelta> deltas;
  parser.Push("Hi\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n", deltas);
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].text, "Hi");
  parser.Push("</｜DSML｜ calls>", deltas);
  EXPECT_EQ(deltas.size(), 1u);  // still waiting: more text would make the block malformed
  parser.Push(kEos, deltas);
  ASSERT_EQ(deltas.size(), 2u);
  EXPECT_EQ(deltas[1].kind, OutputDelta::Kind::kToolCall);
  EXPECT_EQ(deltas[1].tool_call.name, "f");
  EXPECT_EQ(deltas[1].tool_call.arguments, "{}");
  EXPECT_FALSE(parser.malformed_tool_block());
}

TEST(OutputParserTest, RepeatedParameterKeyIsMalformedEvenWithOtherKeysBetween) {
  const std::string block =
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
      "<｜DSML｜ parameter name=\"a\" string=\"true\">1</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"b\" string=\"true\">2</｜DSML｜ parameter>\n"
      "<｜DSML｜ parameter name=\"a\" string=\"true\">3</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  EXPECT_FALSE(ParseToolCallBlock(block).has_value());
}

}  // namespace
}  // namespace dsv41

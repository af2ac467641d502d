// libFuzzer target: the model-output parsers (tokenizer-and-chat.md §7) on arbitrary text. Input:
// byte 0 picks the mode (bit 0: chat) and seeds the split; the rest is the generated text. The
// non-streaming parse and the streaming parser fed in pieces must agree field for field (§7.3),
// and every tool call's arguments must be one JSON object when the text is valid UTF-8.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/check.h"
#include "text/json_format.h"
#include "text/output_parser.h"

namespace {

struct Streamed {
  std::string reasoning;
  std::string content;
  std::vector<dsv41::ParsedToolCall> tool_calls;
};

// Cuts `text` into pieces of 1..16 bytes chosen by a small LCG seeded from `seed`.
Streamed StreamInPieces(std::string_view text, dsv41::ChatMode mode, uint32_t seed) {
  dsv41::StreamingOutputParser parser(mode);
  std::vector<dsv41::OutputDelta> deltas;
  uint32_t state = seed * 2654435761u + 1;
  while (!text.empty()) {
    state = state * 1664525u + 1013904223u;
    const size_t length = std::min<size_t>(text.size(), 1 + (state >> 28));
    parser.Push(text.substr(0, length), deltas);
    text.remove_prefix(length);
  }
  parser.Finish(deltas);
  Streamed out;
  for (dsv41::OutputDelta& delta : deltas) {
    switch (delta.kind) {
      case dsv41::OutputDelta::Kind::kReasoning:
        DSV41_CHECK(mode == dsv41::ChatMode::kThinking, "reasoning delta in chat mode");
        out.reasoning += delta.text;
        break;
      case dsv41::OutputDelta::Kind::kContent:
        out.content += delta.text;
        break;
      case dsv41::OutputDelta::Kind::kToolCall:
        DSV41_CHECK(delta.tool_call_idx == static_cast<int>(out.tool_calls.size()),
                    "tool-call index out of order");
        out.tool_calls.push_back(std::move(delta.tool_call));
        break;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const dsv41::ChatMode mode =
      (control & 1) != 0 ? dsv41::ChatMode::kChat : dsv41::ChatMode::kThinking;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const dsv41::ParsedOutput parsed = dsv41::ParseModelOutput(text, mode);
  DSV41_CHECK(parsed.reasoning_content.has_value() == (mode == dsv41::ChatMode::kThinking),
              "reasoning presence does not follow the mode");
  DSV41_CHECK(parsed.tool_calls.empty() || !parsed.malformed_tool_block,
              "tool calls from a malformed block");

  const bool valid_utf8 = dsv41::IsValidJson(dsv41::FormatJsonString(text));
  for (const dsv41::ParsedToolCall& call : parsed.tool_calls) {
    DSV41_CHECK(!call.arguments.empty() && call.arguments.front() == '{',
                "arguments do not start an object");
    if (valid_utf8) {
      dsv41::Result<dsv41::JsonValue> arguments = dsv41::ParseJsonValue(call.arguments, "fuzz");
      // The one allowed refusal: a verbatim value nested right at the parser's depth limit.
      DSV41_CHECK((arguments.ok() && arguments->is_object()) ||
                      (!arguments.ok() &&
                       arguments.status().message().find("nesting too deep") != std::string::npos),
                  "arguments not a JSON object: %s", call.arguments.c_str());
    }
  }

  for (const uint32_t seed : {static_cast<uint32_t>(control >> 1), 0x9e37u}) {
    const Streamed streamed = StreamInPieces(text, mode, seed);
    DSV41_CHECK(streamed.reasoning == parsed.reasoning_content.value_or(""),
                "reasoning differs when streamed");
    DSV41_CHECK(streamed.content == parsed.content, "content differs when streamed");
    DSV41_CHECK(streamed.tool_calls.size() == parsed.tool_calls.size(), "tool calls differ");
    for (size_t k = 0; k < parsed.tool_calls.size(); ++k) {
      DSV41_CHECK(streamed.tool_calls[k].name == parsed.tool_calls[k].name,
                  "tool-call name differs when streamed");
      DSV41_CHECK(streamed.tool_calls[k].arguments == parsed.tool_calls[k].arguments,
                  "tool-call arguments differ when streamed");
    }
  }
  return 0;
}

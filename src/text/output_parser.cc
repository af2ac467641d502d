#include "text/output_parser.h"

#include <algorithm>
#include <array>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/log.h"
#include "text/json_format.h"
#include "text/special_tokens.h"

namespace dsv41 {
namespace {

// §7.2 step 3: the blank line belongs to the opener.
constexpr std::string_view kOpener = "\n\n<｜DSML｜ calls>";
constexpr std::string_view kCallsClose = "</｜DSML｜ calls>";
constexpr std::string_view kInvokeOpen = "<｜DSML｜ invoke";
constexpr std::string_view kInvokeClose = "</｜DSML｜ invoke";
constexpr std::string_view kParamOpen = "<｜DSML｜ parameter";
constexpr std::string_view kParamEnd = "/｜DSML｜ parameter";

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Consumes `literal` at the front of `text`.
bool Consume(std::string_view& text, std::string_view literal) {
  if (!text.starts_with(literal)) return false;
  text.remove_prefix(literal.size());
  return true;
}

// The invoke header (§7.1): WS `name="` NAME `">` "\n" ["\n"]. Returns NAME.
std::optional<std::string_view> ParseInvokeHeader(std::string_view header) {
  while (!header.empty() && IsSpace(header.front())) header.remove_prefix(1);
  if (!Consume(header, "name=\"")) return std::nullopt;
  if (header.ends_with("\">\n\n")) return header.substr(0, header.size() - 4);
  if (header.ends_with("\">\n")) return header.substr(0, header.size() - 3);
  return std::nullopt;
}

// §7.2 step 5: a string=false value is pasted verbatim when it is one valid JSON value.
void AppendArgumentValue(std::string_view value, bool is_string, std::string& out) {
  if (is_string) {
    AppendJsonString(value, out);
  } else if (IsValidJson(value)) {
    out.append(value);
  } else {
    DSV41_LOG_DEBUG("tool-call parameter with string=\"false\" is not JSON; sent as a string");
    AppendJsonString(value, out);
  }
}

}  // namespace

std::optional<std::vector<ParsedToolCall>> ParseToolCallBlock(std::string_view block) {
  std::string_view rest = block;
  if (!Consume(rest, kOpener) || !Consume(rest, "\n")) return std::nullopt;
  std::vector<ParsedToolCall> calls;
  while (true) {
    if (!Consume(rest, kInvokeOpen)) return std::nullopt;
    const size_t header_end = std::min(rest.find(kParamOpen), rest.find(kInvokeClose));
    if (header_end == std::string_view::npos) return std::nullopt;
    const std::optional<std::string_view> name = ParseInvokeHeader(rest.substr(0, header_end));
    if (!name.has_value()) return std::nullopt;
    rest.remove_prefix(header_end);

    ParsedToolCall call;
    call.name = std::string(*name);
    call.arguments.push_back('{');  // not `= "{"`: GCC 12 -O3 reports a false -Wrestrict
    std::set<std::string_view> keys;
    while (Consume(rest, kParamOpen)) {
      const size_t end = rest.find(kParamEnd);
      if (end == std::string_view::npos) return std::nullopt;
      std::string_view param = rest.substr(0, end);
      rest.remove_prefix(end + kParamEnd.size());
      if (!Consume(rest, ">\n")) return std::nullopt;
      // ` name="KEY" string="true|false">VALUE<` with an optional newline after the `<`.
      if (!Consume(param, " name=\"")) return std::nullopt;
      const size_t key_end = param.find("\" string=\"");
      if (key_end == std::string_view::npos) return std::nullopt;
      const std::string_view key = param.substr(0, key_end);
      param.remove_prefix(key_end + std::string_view("\" string=\"").size());
      bool is_string = false;
      if (Consume(param, "true\">")) {
        is_string = true;
      } else if (!Consume(param, "false\">")) {
        return std::nullopt;
      }
      if (param.ends_with("<\n")) {
        param.remove_suffix(2);
      } else if (param.ends_with("<")) {
        param.remove_suffix(1);
      } else {
        return std::nullopt;
      }
      if (!keys.insert(key).second) return std::nullopt;  // a repeated key is malformed
      if (keys.size() > 1) call.arguments += ", ";
      AppendJsonString(key, call.arguments);
      call.arguments += ": ";
      AppendArgumentValue(param, is_string, call.arguments);
    }
    call.arguments += "}";
    if (!Consume(rest, kInvokeClose) || !Consume(rest, ">\n")) return std::nullopt;
    calls.push_back(std::move(call));
    if (rest.starts_with(kInvokeOpen)) continue;
    if (rest != kCallsClose) return std::nullopt;  // nothing may follow, not even whitespace
    return calls;
  }
}

ParsedOutput ParseModelOutput(std::string_view text, ChatMode mode) {
  ParsedOutput out;
  text = text.substr(0, text.find(kEos));
  std::string_view answer = text;
  if (mode == ChatMode::kThinking) {
    const size_t close = text.find(kThinkClose);
    if (close == std::string_view::npos) {
      out.reasoning_content = std::string(text);
      return out;
    }
    out.reasoning_content = std::string(text.substr(0, close));
    answer = text.substr(close + kThinkClose.size());
  }
  const size_t opener = answer.find(kOpener);
  if (opener == std::string_view::npos) {
    out.content = std::string(answer);
    return out;
  }
  std::optional<std::vector<ParsedToolCall>> calls = ParseToolCallBlock(answer.substr(opener));
  if (calls.has_value()) {
    out.content = std::string(answer.substr(0, opener));
    out.tool_calls = std::move(*calls);
  } else {
    out.content = std::string(answer);
    out.malformed_tool_block = true;
  }
  return out;
}

StreamingOutputParser::StreamingOutputParser(ChatMode mode)
    : state_(mode == ChatMode::kThinking ? State::kReasoning : State::kContent) {}

void StreamingOutputParser::EmitText(OutputDelta::Kind kind, std::string_view text,
                                     std::vector<OutputDelta>& out) {
  if (text.empty()) return;
  OutputDelta delta;
  delta.kind = kind;
  delta.text = std::string(text);
  out.push_back(std::move(delta));
}

void StreamingOutputParser::ResolveToolBlock(std::vector<OutputDelta>& out) {
  std::optional<std::vector<ParsedToolCall>> calls = ParseToolCallBlock(block_);
  if (calls.has_value()) {
    for (size_t k = 0; k < calls->size(); ++k) {
      OutputDelta delta;
      delta.kind = OutputDelta::Kind::kToolCall;
      delta.tool_call = std::move((*calls)[k]);
      delta.tool_call_idx = static_cast<int>(k);
      out.push_back(std::move(delta));
    }
  } else {
    malformed_tool_block_ = true;
    EmitText(OutputDelta::Kind::kContent, block_, out);
  }
  block_.clear();
  state_ = State::kDone;
}

void StreamingOutputParser::Push(std::string_view text, std::vector<OutputDelta>& out) {
  if (state_ == State::kDone) return;
  if (state_ != State::kTools) {
    pending_.append(text);
    text = {};
  }
  while (state_ == State::kReasoning || state_ == State::kContent) {
    const bool reasoning = state_ == State::kReasoning;
    const OutputDelta::Kind kind =
        reasoning ? OutputDelta::Kind::kReasoning : OutputDelta::Kind::kContent;
    const std::array<std::string_view, 2> markers = {reasoning ? kThinkClose : kOpener, kEos};
    size_t found = std::string::npos;
    std::string_view marker;
    for (const std::string_view m : markers) {
      const size_t pos = pending_.find(m);
      if (pos < found) {
        found = pos;
        marker = m;
      }
    }
    if (found == std::string::npos) {
      // Hold back the longest suffix that is a proper prefix of a marker.
      size_t hold = 0;
      for (const std::string_view m : markers) {
        for (size_t k = std::min(m.size() - 1, pending_.size()); k > hold; --k) {
          if (std::string_view(pending_).ends_with(m.substr(0, k))) {
            hold = k;
            break;
          }
        }
      }
      EmitText(kind, std::string_view(pending_).substr(0, pending_.size() - hold), out);
      pending_.erase(0, pending_.size() - hold);
      return;
    }
    EmitText(kind, std::string_view(pending_).substr(0, found), out);
    std::string rest = pending_.substr(found + marker.size());
    pending_.clear();
    if (marker == kEos) {
      state_ = State::kDone;
      return;
    }
    if (marker == kThinkClose) {
      state_ = State::kContent;
      pending_ = std::move(rest);
      continue;
    }
    state_ = State::kTools;
    block_ = std::string(kOpener);
    text = {};
    pending_ = std::move(rest);
    break;
  }
  if (state_ != State::kTools) return;
  // The block ends at the first EOS; search only where a new one can start.
  const size_t old_size = block_.size();
  block_.append(pending_);
  block_.append(text);
  pending_.clear();
  const size_t from = old_size >= kEos.size() ? old_size - (kEos.size() - 1) : 0;
  const size_t eos = block_.find(kEos, from);
  if (eos != std::string::npos) {
    block_.resize(eos);
    ResolveToolBlock(out);
  }
}

void StreamingOutputParser::Finish(std::vector<OutputDelta>& out) {
  switch (state_) {
    case State::kReasoning:
      EmitText(OutputDelta::Kind::kReasoning, pending_, out);
      break;
    case State::kContent:
      EmitText(OutputDelta::Kind::kContent, pending_, out);
      break;
    case State::kTools:
      ResolveToolBlock(out);
      break;
    case State::kDone:
      break;
  }
  pending_.clear();
  state_ = State::kDone;
}

}  // namespace dsv41

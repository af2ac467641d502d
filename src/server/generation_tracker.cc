#include "server/generation_tracker.h"

#include <algorithm>
#include <utility>

namespace dsv41 {
namespace {

OutputDelta ContentDelta(std::string text) {
  OutputDelta d;
  d.kind = OutputDelta::Kind::kContent;
  d.text = std::move(text);
  return d;
}

}  // namespace

GenerationTracker::GenerationTracker(const GenerationRequest& request, int32_t think_close_id)
    : parse_chat_(request.parse_chat),
      think_close_id_(think_close_id),
      in_reasoning_(request.parse_chat && request.starts_in_reasoning),
      prompt_tokens_(static_cast<int32_t>(request.submission.prompt_ids.size())) {
  if (parse_chat_) {
    parser_.emplace(request.starts_in_reasoning ? ChatMode::kThinking : ChatMode::kChat);
  }
  if (!request.content_stop.empty()) content_stop_.emplace(request.content_stop);
}

TrackedDelta GenerationTracker::Push(const RequestOutput& output) {
  TrackedDelta out;
  if (ended()) return out;
  prompt_tokens_ = output.num_prompt_tokens;
  cached_tokens_ = std::max(cached_tokens_, output.num_cached_prompt_tokens);
  prompt_logits_.insert(prompt_logits_.end(), output.prompt_logits.begin(),
                        output.prompt_logits.end());
  for (int32_t id : output.new_token_ids) {
    if (in_reasoning_ && id == think_close_id_) in_reasoning_ = false;
    if (in_reasoning_) ++reasoning_tokens_;
  }
  token_ids_.insert(token_ids_.end(), output.new_token_ids.begin(), output.new_token_ids.end());
  logprobs_.insert(logprobs_.end(), output.logprobs.begin(), output.logprobs.end());
  out.token_ids = output.new_token_ids;
  out.logprobs = output.logprobs;
  if (parse_chat_) {
    std::vector<OutputDelta> deltas;
    parser_->Push(output.text, deltas);
    for (OutputDelta& d : deltas) Release(std::move(d), out);
  } else if (!output.text.empty()) {
    Release(ContentDelta(output.text), out);
  }
  if (!ended()) {
    switch (output.finish) {
      case FinishReason::kNone:
        break;
      case FinishReason::kStop:
        EndWith(EndReason::kEos, out);
        break;
      case FinishReason::kLength:
        EndWith(EndReason::kLength, out);
        break;
      case FinishReason::kAbort:
        EndWith(EndReason::kAbort, out);
        break;
      case FinishReason::kError:
        error_ = output.error;
        EndWith(EndReason::kError, out);
        break;
    }
  }
  return out;
}

void GenerationTracker::Release(OutputDelta delta, TrackedDelta& out) {
  if (content_stopped_) return;
  switch (delta.kind) {
    case OutputDelta::Kind::kReasoning:
      reasoning_ += delta.text;
      break;
    case OutputDelta::Kind::kContent:
      if (content_stop_.has_value()) {
        StopStringMatcher::Result r = content_stop_->Push(delta.text);
        delta.text = std::move(r.emit);
        if (r.stopped) {
          content_stopped_ = true;
          needs_abort_ = true;
          stop_sequence_ = std::string(content_stop_->matched());
        }
      }
      content_ += delta.text;
      break;
    case OutputDelta::Kind::kToolCall:
      tool_calls_.push_back(delta.tool_call);
      break;
  }
  const bool empty_text = delta.kind != OutputDelta::Kind::kToolCall && delta.text.empty();
  if (!empty_text) out.deltas.push_back(std::move(delta));
  if (content_stopped_) {
    if (end_ == EndReason::kNone) {
      EndWith(EndReason::kStopString, out);
    } else {
      end_ = EndReason::kStopString;  // completed by the text flushed at the end
    }
  }
}

void GenerationTracker::EndWith(EndReason reason, TrackedDelta& out) {
  end_ = reason;
  if (reason == EndReason::kStopString) return;  // nothing after the stop string is released
  if (parser_.has_value()) {
    std::vector<OutputDelta> deltas;
    parser_->Finish(deltas);
    for (OutputDelta& d : deltas) Release(std::move(d), out);
    malformed_tool_block_ = parser_->malformed_tool_block();
  }
  if (content_stop_.has_value() && !content_stopped_) {
    std::string rest = content_stop_->Flush();
    if (!rest.empty()) {
      content_ += rest;
      out.deltas.push_back(ContentDelta(std::move(rest)));
    }
  }
}

}  // namespace dsv41

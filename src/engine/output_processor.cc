#include "engine/output_processor.h"

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

OutputProcessorOptions TextProcessorOptions(const Tokenizer& tokenizer,
                                            const SamplingParams& params) {
  return OutputProcessorOptions{
      .tokenizer = &tokenizer,
      .decode = DecodeOptions{.skip_special_tokens = params.skip_special_tokens,
                              .keep_chat_markers = params.keep_chat_markers},
      .stop = params.stop,
      .parse_chat = false,
      .starts_in_reasoning = false,
      .think_close_id = -1,
      .num_prompt_tokens = 0};
}

OutputProcessor::OutputProcessor(const OutputProcessorOptions& options)
    : parse_chat_(options.parse_chat),
      think_close_id_(options.think_close_id),
      detokenizer_(*options.tokenizer, options.decode),
      in_reasoning_(options.parse_chat && options.starts_in_reasoning),
      prompt_tokens_(options.num_prompt_tokens) {
  if (parse_chat_) {
    parser_.emplace(options.starts_in_reasoning ? ChatMode::kThinking : ChatMode::kChat);
  }
  if (!options.stop.empty()) stop_.emplace(options.stop);
}

ProcessedOutput OutputProcessor::Push(const RequestOutput& output) {
  ProcessedOutput out;
  needs_abort_ = false;
  if (ended()) return out;
  prompt_tokens_ = output.num_prompt_tokens;
  cached_tokens_ = std::max(cached_tokens_, output.num_cached_prompt_tokens);
  prompt_logits_.insert(prompt_logits_.end(), output.prompt_logits.begin(),
                        output.prompt_logits.end());
  const std::vector<int32_t>& ids = output.new_token_ids;
  const size_t text_end = output.ends_with_stop_token && !ids.empty() ? ids.size() - 1 : ids.size();
  for (size_t i = 0; i < ids.size() && !ended(); ++i) {
    const int32_t id = ids[i];
    if (in_reasoning_ && id == think_close_id_) in_reasoning_ = false;
    if (in_reasoning_) ++reasoning_tokens_;
    token_ids_.push_back(id);
    out.token_ids.push_back(id);
    if (i < output.logprobs.size()) {
      logprobs_.push_back(output.logprobs[i]);
      out.logprobs.push_back(output.logprobs[i]);
    }
    if (i < text_end) ReleaseText(detokenizer_.Push(id), out);
  }
  // A stop string that matched while the engine still runs the request: it must be aborted.
  needs_abort_ = stopped_ && output.finish == FinishReason::kNone;
  if (ended()) return out;
  switch (output.finish) {
    case FinishReason::kNone:
      break;
    case FinishReason::kStop:
    case FinishReason::kStopString:
    case FinishReason::kLength:
      // The text held back for an incomplete character, which may still complete a stop string.
      ReleaseText(detokenizer_.Finish(), out);
      if (!ended()) EndWith(output.finish, out);
      break;
    case FinishReason::kAbort:
      EndWith(FinishReason::kAbort, out);
      break;
    case FinishReason::kError:
      error_ = output.error;
      EndWith(FinishReason::kError, out);
      break;
  }
  return out;
}

void OutputProcessor::ReleaseText(std::string text, ProcessedOutput& out) {
  if (text.empty()) return;
  if (!parse_chat_) return Release(ContentDelta(std::move(text)), out);
  std::vector<OutputDelta> deltas;
  parser_->Push(text, deltas);
  for (OutputDelta& d : deltas) Release(std::move(d), out);
}

void OutputProcessor::Release(OutputDelta delta, ProcessedOutput& out) {
  if (stopped_) return;
  switch (delta.kind) {
    case OutputDelta::Kind::kReasoning:
      reasoning_ += delta.text;
      break;
    case OutputDelta::Kind::kContent:
      if (stop_.has_value()) {
        StopStringMatcher::Result r = stop_->Push(delta.text);
        delta.text = std::move(r.emit);
        if (r.stopped) {
          stopped_ = true;
          stop_sequence_ = std::string(stop_->matched());
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
  if (stopped_) {
    if (finish_ == FinishReason::kNone) {
      EndWith(FinishReason::kStopString, out);
    } else {
      finish_ = FinishReason::kStopString;  // completed by the text flushed at the end
    }
  }
}

void OutputProcessor::EndWith(FinishReason reason, ProcessedOutput& out) {
  finish_ = reason;
  if (reason == FinishReason::kStopString) return;  // nothing after the stop string is released
  if (parser_.has_value()) {
    std::vector<OutputDelta> deltas;
    parser_->Finish(deltas);
    for (OutputDelta& d : deltas) Release(std::move(d), out);
    malformed_tool_block_ = parser_->malformed_tool_block();
  }
  if (stop_.has_value() && !stopped_) {
    std::string rest = stop_->Flush();
    if (!rest.empty()) {
      content_ += rest;
      out.deltas.push_back(ContentDelta(std::move(rest)));
    }
  }
}

}  // namespace dsv41

#include "server/scripted_backend.h"

#include <chrono>
#include <thread>

#include "text/tokenizer.h"

namespace dsv41 {

std::vector<ScriptedBackend::Token> ScriptedBackend::ByteTokens(std::string_view text) {
  std::vector<Token> tokens;
  std::string pending;
  for (char c : text) {
    pending += c;
    Token t;
    t.id = static_cast<unsigned char>(c);
    pending.erase(0, AppendUtf8Lossy(pending, /*final=*/false, &t.text));
    tokens.push_back(std::move(t));
  }
  return tokens;
}

Result<uint64_t> ScriptedBackend::AddRequest(std::vector<int32_t> prompt_ids,
                                             const SamplingParams& params,
                                             const AddRequestOptions&) {
  if (prompt_ids.empty()) return InvalidArgumentError("the prompt has no tokens");
  const uint64_t id = next_id_++;
  live_[id] = Live{static_cast<int32_t>(prompt_ids.size()), params.max_tokens, 0};
  prompt_tokens_ += prompt_ids.size();
  last_prompt_ = std::move(prompt_ids);
  last_params_ = params;
  ++num_added_;
  ++num_live_;
  return id;
}

Status ScriptedBackend::Abort(uint64_t request_id) {
  auto it = live_.find(request_id);
  if (it == live_.end())
    return NotFoundError("request %llu", static_cast<unsigned long long>(request_id));
  RequestOutput out;
  out.request_id = request_id;
  out.num_prompt_tokens = it->second.num_prompt_tokens;
  out.finish = FinishReason::kAbort;
  pending_.push_back(std::move(out));
  live_.erase(it);
  ++num_aborted_;
  --num_live_;
  return OkStatus();
}

Result<std::vector<RequestOutput>> ScriptedBackend::Step() {
  if (!live_.empty() && fail_next_step_.exchange(false)) {
    return InternalError("scripted step failure");
  }
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  if (hold_.load()) {
    // Nothing moves; don't spin the loop thread.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return outputs;
  }
  if (step_delay_us_.load() > 0 && !live_.empty()) {
    std::this_thread::sleep_for(std::chrono::microseconds(step_delay_us_.load()));
  }
  for (auto it = live_.begin(); it != live_.end();) {
    Live& r = it->second;
    RequestOutput out;
    out.request_id = it->first;
    out.num_prompt_tokens = r.num_prompt_tokens;
    if (r.pos < script_.size()) {
      out.new_token_ids.push_back(script_[r.pos].id);
      out.text = script_[r.pos].text;
      ++r.pos;
      ++generated_;
    }
    if (r.pos == script_.size()) {
      out.finish = FinishReason::kStop;
    } else if (static_cast<int32_t>(r.pos) >= r.max_tokens) {
      out.finish = FinishReason::kLength;
    }
    const bool done = out.finish != FinishReason::kNone;
    outputs.push_back(std::move(out));
    if (done) {
      it = live_.erase(it);
      --num_live_;
    } else {
      ++it;
    }
  }
  return outputs;
}

EngineStats ScriptedBackend::stats() const {
  EngineStats s;
  s.total_blocks = num_blocks_;
  s.free_blocks = num_blocks_ - static_cast<uint32_t>(live_.size());
  s.running = static_cast<int32_t>(live_.size());
  s.generation_tokens = generated_;
  s.prompt_tokens = prompt_tokens_;
  return s;
}

}  // namespace dsv41

#include "server/scripted_backend.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <thread>

#include "base/json.h"
#include "base/log.h"

namespace dsv41 {

ScriptedBackend::ScriptedBackend(std::vector<ScriptStep> script, uint32_t num_blocks)
    : num_blocks_(num_blocks) {
  scripts_.push_back(Script{{}, std::move(script)});
}

ScriptedBackend::ScriptedBackend(std::vector<Reply> replies, const Tokenizer& tokenizer,
                                 std::string source, uint32_t num_blocks)
    : tokenizer_(&tokenizer), source_(std::move(source)), num_blocks_(num_blocks) {
  for (Reply& reply : replies) {
    Script script{std::move(reply.when_prompt_contains), {}};
    for (int32_t id : reply.token_ids) script.steps.push_back(ScriptStep{id});
    scripts_.push_back(std::move(script));
  }
}

std::vector<ScriptedBackend::ScriptStep> ScriptedBackend::ByteSteps(std::string_view text,
                                                                    const Tokenizer& tokenizer) {
  std::array<int32_t, 256> byte_ids;
  byte_ids.fill(-1);
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string_view bytes = tokenizer.TokenBytes(id);
    if (!tokenizer.IsAdded(id) && bytes.size() == 1) {
      byte_ids[static_cast<unsigned char>(bytes[0])] = id;
    }
  }
  std::vector<ScriptStep> steps;
  for (char c : text) steps.push_back(ScriptStep{byte_ids[static_cast<unsigned char>(c)]});
  return steps;
}

Result<std::vector<ScriptedBackend::Reply>> ScriptedBackend::LoadReplies(
    const std::string& path, const Tokenizer& tokenizer) {
  DSV41_ASSIGN_OR_RETURN(Json root, ReadJsonFile(path));
  const auto replies = root.find("replies");
  if (!root.is_object() || replies == root.end() || !replies->is_array() || replies->empty()) {
    return InvalidArgumentError("%s: want {\"replies\": [...]} with at least one reply",
                                path.c_str());
  }
  std::vector<Reply> out;
  for (size_t i = 0; i < replies->size(); ++i) {
    const Json& r = (*replies)[i];
    const auto text = r.is_object() ? r.find("text") : r.end();
    if (!r.is_object() || text == r.end() || !text->is_string() ||
        text->get_ref<const std::string&>().empty()) {
      return InvalidArgumentError("%s: replies[%zu].text: want a non-empty string", path.c_str(),
                                  i);
    }
    Reply reply;
    if (const auto when = r.find("when_prompt_contains"); when != r.end()) {
      if (!when->is_array()) {
        return InvalidArgumentError("%s: replies[%zu].when_prompt_contains: want an array",
                                    path.c_str(), i);
      }
      for (size_t k = 0; k < when->size(); ++k) {
        if (!(*when)[k].is_string()) {
          return InvalidArgumentError("%s: replies[%zu].when_prompt_contains[%zu]: want a string",
                                      path.c_str(), i, k);
        }
        reply.when_prompt_contains.push_back((*when)[k].get<std::string>());
      }
    }
    Result<std::vector<int32_t>> ids = tokenizer.Encode(text->get_ref<const std::string&>());
    if (!ids.ok()) {
      return InvalidArgumentError("%s: replies[%zu].text: %s", path.c_str(), i,
                                  ids.status().message().c_str());
    }
    reply.token_ids = std::move(ids).value();
    out.push_back(std::move(reply));
  }
  return out;
}

Result<size_t> ScriptedBackend::Choose(const std::vector<int32_t>& prompt_ids) const {
  if (tokenizer_ == nullptr) return 0;
  const std::string prompt =
      tokenizer_->Decode(prompt_ids, DecodeOptions{.skip_special_tokens = false});
  for (size_t i = 0; i < scripts_.size(); ++i) {
    bool matches = true;
    for (const std::string& s : scripts_[i].when_prompt_contains) {
      matches = matches && prompt.find(s) != std::string::npos;
    }
    if (matches) return i;
  }
  return InvalidArgumentError("the prompt (%zu tokens) matches no reply of %s", prompt_ids.size(),
                              source_.c_str());
}

Result<uint64_t> ScriptedBackend::AddRequest(std::vector<int32_t> prompt_ids,
                                             const SamplingParams& params,
                                             const AddRequestOptions& options) {
  if (prompt_ids.empty()) return InvalidArgumentError("the prompt has no tokens");
  DSV41_ASSIGN_OR_RETURN(const size_t reply, Choose(prompt_ids));
  DSV41_ASSIGN_OR_RETURN(const uint64_t id,
                         ClaimRequestId(options.request_id,
                                        live_.contains(options.request_id) ||
                                            std::any_of(pending_.begin(), pending_.end(),
                                                        [&](const RequestOutput& out) {
                                                          return out.request_id ==
                                                                 options.request_id;
                                                        }),
                                        next_id_));
  Live& live = live_[id];
  live.script = &scripts_[reply];
  if (tokenizer_ != nullptr) {
    DSV41_LOG_INFO("request %llu: %zu prompt tokens; scripted reply %zu of %s",
                   static_cast<unsigned long long>(id), prompt_ids.size(), reply, source_.c_str());
  }
  live.num_prompt_tokens = static_cast<int32_t>(prompt_ids.size());
  live.max_tokens = params.max_tokens;
  prompt_tokens_ += prompt_ids.size();
  last_prompt_ = std::move(prompt_ids);
  last_params_ = params;
  last_images_ = options.images;
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

Status ScriptedBackend::Step(std::vector<RequestOutput>& outputs) {
  outputs.clear();
  if (!live_.empty() && fail_next_step_.exchange(false)) {
    return InternalError("scripted step failure");
  }
  outputs.swap(pending_);
  if (hold_.load()) {
    // Nothing moves; don't spin the loop thread.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return OkStatus();
  }
  if (step_delay_us_.load() > 0 && !live_.empty()) {
    std::this_thread::sleep_for(std::chrono::microseconds(step_delay_us_.load()));
  }
  for (auto it = live_.begin(); it != live_.end();) {
    Live& r = it->second;
    const std::vector<ScriptStep>& steps = r.script->steps;
    RequestOutput out;
    out.request_id = it->first;
    out.num_prompt_tokens = r.num_prompt_tokens;
    if (r.pos == steps.size()) {
      // The script's end stands for EOS (without its token), a step after the last token.
      out.finish = FinishReason::kStop;
    } else {
      const ScriptStep& step = steps[r.pos++];
      size_t taken = 0;
      for (; taken < step.size() && r.num_emitted < r.max_tokens; ++taken, ++r.num_emitted) {
        out.new_token_ids.push_back(step[taken]);
        ++generated_;
      }
      const bool script_left = r.pos < steps.size() || taken < step.size();
      if (r.num_emitted >= r.max_tokens && script_left) out.finish = FinishReason::kLength;
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
  return OkStatus();
}

void ScriptedBackend::ReadStats(EngineStats& s) const {
  s = EngineStats{};
  s.total_blocks = num_blocks_;
  s.free_blocks = num_blocks_ - static_cast<uint32_t>(live_.size());
  s.running = static_cast<int32_t>(live_.size());
  s.generation_tokens = generated_;
  s.prompt_tokens = prompt_tokens_;
}

}  // namespace dsv41

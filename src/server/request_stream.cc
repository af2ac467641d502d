#include "server/request_stream.h"

#include <utility>

namespace dsv41 {

Status RequestStream::WaitAdmitted() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return admission_ != Admission::kPending; });
  return admission_ == Admission::kAdmitted ? OkStatus() : rejection_;
}

bool RequestStream::Wait(RequestOutput& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return has_pending_; })) return false;
  std::swap(out, pending_);
  has_pending_ = false;
  return true;
}

void RequestStream::Admit() {
  std::lock_guard<std::mutex> lock(mu_);
  admission_ = Admission::kAdmitted;
  cv_.notify_all();
}

void RequestStream::Reject(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  admission_ = Admission::kRejected;
  rejection_ = std::move(status);
  cv_.notify_all();
}

void RequestStream::Push(const RequestOutput& output) {
  std::lock_guard<std::mutex> lock(mu_);
  RequestOutput& p = pending_;
  if (!has_pending_) {
    p.new_token_ids.clear();
    p.logprobs.clear();
    p.prompt_logits.clear();
    p.error.clear();
    has_pending_ = true;
  }
  p.request_id = output.request_id;
  p.new_token_ids.insert(p.new_token_ids.end(), output.new_token_ids.begin(),
                         output.new_token_ids.end());
  p.logprobs.insert(p.logprobs.end(), output.logprobs.begin(), output.logprobs.end());
  p.prompt_logits.insert(p.prompt_logits.end(), output.prompt_logits.begin(),
                         output.prompt_logits.end());
  p.finish = output.finish;
  p.ends_with_stop_token = output.ends_with_stop_token;
  p.error += output.error;
  p.num_prompt_tokens = output.num_prompt_tokens;
  p.num_cached_prompt_tokens = output.num_cached_prompt_tokens;
  cv_.notify_all();
}

}  // namespace dsv41

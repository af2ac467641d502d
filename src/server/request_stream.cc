#include "server/request_stream.h"

#include <utility>

namespace dsv41 {

Status RequestStream::WaitAdmitted() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return admission_ != Admission::kPending; });
  return admission_ == Admission::kAdmitted ? OkStatus() : rejection_;
}

bool RequestStream::Wait(std::vector<RequestOutput>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !outputs_.empty(); })) return false;
  for (RequestOutput& o : outputs_) out.push_back(std::move(o));
  outputs_.clear();
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

void RequestStream::Push(RequestOutput output) {
  std::lock_guard<std::mutex> lock(mu_);
  outputs_.push_back(std::move(output));
  cv_.notify_all();
}

}  // namespace dsv41

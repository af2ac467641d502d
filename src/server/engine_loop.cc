#include "server/engine_loop.h"

#include <utility>

#include "base/check.h"
#include "base/log.h"

namespace dsv41 {
namespace {

double Seconds(RequestStream::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

EngineLoop::EngineLoop(GenerationBackend& backend, ServerMetrics& metrics,
                       EngineLoopOptions options)
    : backend_(backend), metrics_(metrics), options_(options) {}

EngineLoop::~EngineLoop() { Shutdown(std::chrono::milliseconds(0)); }

void EngineLoop::Start() {
  backend_.ReadStats(stats_);
  metrics_.PublishEngineStats(stats_);
  thread_ = std::thread([this] { Run(); });
}

std::shared_ptr<RequestStream> EngineLoop::Submit(Submission submission, SubmitRefusal* refusal) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) {
    *refusal = SubmitRefusal::kShuttingDown;
    return nullptr;
  }
  if (num_live_ >= options_.max_live_requests) {
    *refusal = SubmitRefusal::kOverloaded;
    return nullptr;
  }
  *refusal = SubmitRefusal::kNone;
  ++num_live_;
  auto stream = std::make_shared<RequestStream>(next_request_id_++, RequestStream::Clock::now());
  submissions_.push_back(Pending{stream, std::move(submission)});
  wake_.notify_one();
  return stream;
}

void EngineLoop::Abort(uint64_t request_id, FinishReason reason) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(AbortRequest{request_id, reason});
  wake_.notify_one();
}

int32_t EngineLoop::num_live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_live_;
}

void EngineLoop::Shutdown(std::chrono::milliseconds grace) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    shutting_down_ = true;
    finished_.wait_for(lock, grace, [this] { return num_live_ == 0; });
    abort_all_ = true;
    stop_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::Finished(size_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  num_live_ -= static_cast<int32_t>(count);
  finished_.notify_all();
}

void EngineLoop::Run() {
  while (true) {
    std::vector<Pending> submissions;
    std::vector<AbortRequest> aborts;
    bool abort_all = false;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] {
        return !submissions_.empty() || !aborts_.empty() || stop_ || backend_.HasUnfinished();
      });
      submissions.swap(submissions_);
      aborts.swap(aborts_);
      abort_all = abort_all_;
      stop = stop_;
    }
    std::vector<std::pair<std::shared_ptr<RequestStream>, Status>> refused;
    for (Pending& p : submissions) {
      // The stream's id is the engine's: one id from the HTTP request to the outputs.
      p.submission.options.request_id = p.stream->id();
      Result<uint64_t> id = backend_.AddRequest(std::move(p.submission.prompt_ids),
                                                p.submission.params, p.submission.options);
      if (!id.ok()) {
        refused.emplace_back(p.stream, id.status());
        continue;
      }
      DSV41_CHECK(*id == p.stream->id(), "the backend took id %llu for request %llu",
                  static_cast<unsigned long long>(*id),
                  static_cast<unsigned long long>(p.stream->id()));
      live_.emplace(*id, Live{.stream = p.stream, .has_token = false, .last_token = {}});
      p.stream->Admit();
    }
    if (!refused.empty()) Finished(refused.size());
    for (auto& [stream, status] : refused) stream->Reject(std::move(status));
    if (abort_all) {
      for (const auto& [id, live] : live_) aborts.push_back(AbortRequest{id, FinishReason::kAbort});
    }
    for (const AbortRequest& abort : aborts) {
      const auto it = live_.find(abort.request_id);
      if (it == live_.end() || it->second.aborted) continue;  // finished or ending already
      // NotFound: it finished in the last step; its final output is on its way.
      const Status aborted = backend_.Abort(abort.request_id);
      if (!aborted.ok()) continue;
      it->second.aborted = true;
      it->second.abort_reason = abort.reason;
    }
    if (backend_.HasUnfinished()) {
      const RequestStream::Clock::time_point start = RequestStream::Clock::now();
      const Status stepped = backend_.Step(outputs_);
      metrics_.step_time().Observe(Seconds(RequestStream::Clock::now() - start));
      if (stepped.ok()) {
        Dispatch();
      } else {
        FailAll(stepped);
      }
    }
    backend_.ReadStats(stats_);
    metrics_.PublishEngineStats(stats_);
    if (stop && live_.empty() && !backend_.HasUnfinished()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (submissions_.empty()) break;
    }
  }
}

void EngineLoop::Dispatch() {
  const RequestStream::Clock::time_point now = RequestStream::Clock::now();
  size_t num_finished = 0;
  deliveries_.clear();
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const RequestOutput& out = outputs_[i];
    const auto it = live_.find(out.request_id);
    if (it == live_.end()) continue;  // failed earlier (FailAll)
    Live& live = it->second;
    if (!out.new_token_ids.empty()) {
      if (!live.has_token) {
        metrics_.time_to_first_token().Observe(Seconds(now - live.stream->arrival()));
      } else {
        metrics_.inter_token_latency().Observe(Seconds(now - live.last_token));
      }
      live.has_token = true;
      live.last_token = now;
    }
    const bool finished = out.finish != FinishReason::kNone;
    if (finished) {
      metrics_.e2e_latency().Observe(Seconds(now - live.stream->arrival()));
      const FinishReason counted =
          out.finish == FinishReason::kAbort ? live.abort_reason : out.finish;
      if (counted != FinishReason::kError) metrics_.CountFinished(FinishReasonName(counted));
      if (out.finish == FinishReason::kError) {
        DSV41_LOG_ERROR("request %llu failed: %s",
                        static_cast<unsigned long long>(live.stream->id()), out.error.c_str());
      }
    }
    deliveries_.emplace_back(live.stream, i);
    if (finished) {
      live_.erase(it);
      ++num_finished;
    }
  }
  // Counted out before the streams see their last output, so a client that sends its next
  // request the moment a response ends is never refused for its own finished one.
  if (num_finished > 0) Finished(num_finished);
  for (const auto& [stream, i] : deliveries_) stream->Push(outputs_[i]);
  deliveries_.clear();  // the finished requests' streams are released here
}

void EngineLoop::FailAll(const Status& status) {
  DSV41_LOG_ERROR("engine step failed; ending %zu requests: %s", live_.size(),
                  status.ToString().c_str());
  std::map<uint64_t, Live> failed = std::move(live_);
  live_.clear();
  if (!failed.empty()) Finished(failed.size());
  for (auto& [id, live] : failed) {
    (void)backend_.Abort(id);
    RequestOutput out;
    out.request_id = id;
    out.finish = FinishReason::kError;
    out.error = status.ToString();
    live.stream->Push(out);
  }
}

}  // namespace dsv41

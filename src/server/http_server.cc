#include "server/http_server.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/log.h"
#include "engine/output_processor.h"
#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/openai_api.h"
#include "server/request_fields.h"
#include "server/response_writer.h"
#include "server/responses_api.h"
#include "server/tokenize_api.h"

namespace dsv41 {

// httplib hands each accepted connection to its task queue as one job that lasts as long as the
// connection: with a fixed pool, clients that connect and stall (or send half a request) hold
// every thread and /health waits behind them. This queue starts a worker whenever none is idle,
// up to `max_threads`, so a stalled connection costs a parked thread (until its read deadline),
// never the others' turn. Workers stay once started (parked, they cost only their stacks).
class ElasticTaskQueue final : public httplib::TaskQueue {
 public:
  explicit ElasticTaskQueue(int max_threads) : max_threads_(max_threads) {}
  ~ElasticTaskQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    if (num_idle_ < static_cast<int>(jobs_.size()) &&
        static_cast<int>(threads_.size()) < max_threads_) {
      threads_.emplace_back([this] { Work(); });
    } else {
      ready_.notify_one();
    }
  }

  void shutdown() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      threads.swap(threads_);
    }
    ready_.notify_all();
    for (std::thread& t : threads) t.join();
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++num_idle_;
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      --num_idle_;
      if (jobs_.empty()) return;  // stopping, and every job ran
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  const int max_threads_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  std::vector<std::thread> threads_;        // guarded by mu_
  int num_idle_ = 0;                        // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
};

// Everything one streaming request needs after its handler returned (httplib calls the content
// provider later on the same thread).
struct StreamState {
  std::shared_ptr<void> active;  // counts the request as in flight while it lives
  GenerationRequest request;
  std::unique_ptr<OutputProcessor> processor;
  std::unique_ptr<ResponseWriter> writer;
  std::shared_ptr<RequestStream> stream;
  RequestOutput output;  // swapped with the stream's buffer by every Wait
  bool started = false;
};

struct HttpServer::Impl {
  HttpServerOptions options;
  ServerMetrics& metrics;
  ResponseStore responses;  // POST /v1/responses with store: GET, DELETE, previous_response_id
  httplib::Server server;
  int port = 0;
  std::thread listener;
  std::atomic<const ServedModel*> model{nullptr};
  std::atomic<EngineLoop*> loop{nullptr};
  std::atomic<bool> shutting_down{false};
  std::mutex progress_mu;
  std::string progress_stage;   // guarded by progress_mu
  std::string progress_unit;    // guarded by progress_mu
  uint64_t progress_done = 0;   // guarded by progress_mu
  uint64_t progress_total = 0;  // guarded by progress_mu

  std::mutex active_mu;
  std::condition_variable idle;
  int num_active = 0;  // guarded by active_mu: generation requests not yet answered in full

  Impl(const HttpServerOptions& o, ServerMetrics& m)
      : options(o), metrics(m), responses(o.responses_store) {}

  // A token whose lifetime is one generation request's, from its handler to the end of its
  // response (a stream's lives in the content provider httplib keeps until the stream ends).
  std::shared_ptr<void> Active() {
    {
      std::lock_guard<std::mutex> lock(active_mu);
      ++num_active;
    }
    return std::shared_ptr<void>(nullptr, [this](void*) {
      std::lock_guard<std::mutex> lock(active_mu);
      --num_active;
      idle.notify_all();
    });
  }

  // --- errors ---------------------------------------------------------------------------------

  void SendError(bool anthropic, const ApiError& error, httplib::Response& res) {
    metrics.CountError(error.type);
    res.status = error.status;
    res.set_content(anthropic ? AnthropicErrorBody(error) : OpenAiErrorBody(error),
                    "application/json");
  }

  static bool IsAnthropic(const httplib::Request& req) {
    return req.path.starts_with("/v1/messages");
  }

  // --- auth and readiness -----------------------------------------------------------------------

  static bool ConstantTimeEquals(std::string_view a, std::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size(); ++i) {
      diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
    }
    return diff == 0;
  }

  bool Authorized(const httplib::Request& req) const {
    if (options.api_key.empty()) return true;
    const std::string bearer = req.get_header_value("Authorization");
    if (bearer.starts_with("Bearer ") &&
        ConstantTimeEquals(std::string_view(bearer).substr(7), options.api_key)) {
      return true;
    }
    return IsAnthropic(req) && req.has_header("x-api-key") &&
           ConstantTimeEquals(req.get_header_value("x-api-key"), options.api_key);
  }

  // Authorized and ready; answers the error otherwise.
  bool Admit(const httplib::Request& req, httplib::Response& res) {
    const bool anthropic = IsAnthropic(req);
    if (!Authorized(req)) {
      SendError(anthropic,
                {401, RequestErrorType::kAuthentication,
                 anthropic ? "invalid x-api-key (or Authorization: Bearer) header"
                           : "invalid API key: send Authorization: Bearer <key>"},
                res);
      return false;
    }
    if (shutting_down.load()) {
      SendError(anthropic, {503, RequestErrorType::kUnavailable, "the server is shutting down"},
                res);
      return false;
    }
    if (model.load() == nullptr) {
      SendError(anthropic, {503, RequestErrorType::kUnavailable, "the model is still loading"},
                res);
      return false;
    }
    return true;
  }

  // --- routes -----------------------------------------------------------------------------------

  void Health(httplib::Response& res) {
    if (shutting_down.load()) {
      res.status = 503;
      res.set_content(R"({"status": "shutting_down"})", "application/json");
      return;
    }
    if (model.load() != nullptr) {
      res.set_content(R"({"status": "ok"})", "application/json");
      return;
    }
    std::lock_guard<std::mutex> lock(progress_mu);
    res.status = 503;
    res.set_content(FormatJson(JsonObject({{"status", JsonString("loading")},
                                           {"stage", JsonString(progress_stage)},
                                           {"done", JsonInt(static_cast<int64_t>(progress_done))},
                                           {"total", JsonInt(static_cast<int64_t>(progress_total))},
                                           {"unit", JsonString(progress_unit)}})),
                    "application/json");
  }

  // A JSON body handler: parses the body, runs `fn` (which returns the response body or a request
  // error) and answers.
  template <typename Fn>
  void JsonRoute(const httplib::Request& req, httplib::Response& res, Fn fn) {
    if (!Admit(req, res)) return;
    const bool anthropic = IsAnthropic(req);
    Result<JsonValue> body = ParseJsonValue(req.body, "request body");
    if (!body.ok()) return SendError(anthropic, ApiErrorFromStatus(body.status()), res);
    Result<JsonValue> out = fn(*body, *model.load());
    if (!out.ok()) return SendError(anthropic, ApiErrorFromStatus(out.status()), res);
    res.set_content(FormatJson(*out), "application/json");
  }

  // GET / DELETE /v1/responses/{id}.
  template <typename Fn>
  void StoredResponseRoute(const httplib::Request& req, httplib::Response& res, Fn fn) {
    if (!Admit(req, res)) return;
    Result<JsonValue> out = fn(responses, req.matches[1].str());
    if (!out.ok()) return SendError(false, ApiErrorFromStatus(out.status()), res);
    res.set_content(FormatJson(*out), "application/json");
  }

  void Generate(Api api, const httplib::Request& req, httplib::Response& res) {
    const bool anthropic = api == Api::kMessages;
    if (!Admit(req, res)) return;
    const ServedModel& served = *model.load();
    Result<JsonValue> body = ParseJsonValue(req.body, "request body");
    if (!body.ok()) return SendError(anthropic, ApiErrorFromStatus(body.status()), res);
    if (body->is_object()) {
      const JsonValue* name = FieldOrNull(*body, "model");
      if (name != nullptr && name->is_string() && !served.Serves(name->text)) {
        return SendError(anthropic,
                         {404, RequestErrorType::kNotFound,
                          StrFormat("model: '%s' does not exist (this server serves '%s')",
                                    name->text.c_str(), served.names.front().c_str())},
                         res);
      }
    }
    Result<GenerationRequest> parsed =
        api == Api::kChatCompletions ? ParseChatCompletionsRequest(*body, served)
        : api == Api::kCompletions   ? ParseCompletionsRequest(*body, served)
        : api == Api::kResponses     ? ParseResponsesRequest(*body, served, responses)
                                     : ParseMessagesRequest(*body, served);
    if (!parsed.ok()) return SendError(anthropic, ApiErrorFromStatus(parsed.status()), res);

    auto state = std::make_shared<StreamState>();
    state->active = Active();
    state->request = std::move(parsed).value();
    SubmitRefusal refusal = SubmitRefusal::kNone;
    state->stream = loop.load()->Submit(state->request.submission, &refusal);
    if (state->stream == nullptr) {
      if (refusal == SubmitRefusal::kShuttingDown) {
        return SendError(anthropic,
                         {503, RequestErrorType::kUnavailable, "the server is shutting down"}, res);
      }
      return SendError(anthropic,
                       {anthropic ? 529 : 429, RequestErrorType::kOverloaded,
                        "the server is overloaded: too many requests are waiting (--max-queue); "
                        "retry later"},
                       res);
    }
    const Status admitted = state->stream->WaitAdmitted();
    if (!admitted.ok()) return SendError(anthropic, ApiErrorFromStatus(admitted), res);
    state->processor =
        std::make_unique<OutputProcessor>(ProcessorOptionsFor(state->request, served));
    state->writer = MakeResponseWriter(state->request, served);

    if (!state->request.stream) {
      while (!state->processor->ended()) {
        if (!state->stream->Wait(state->output, options.heartbeat)) continue;
        state->processor->Push(state->output);
        if (state->processor->needs_abort()) {
          loop.load()->Abort(state->stream->id(), FinishReason::kStopString);
        }
      }
      Finished(*state);
      const OutputProcessor& t = *state->processor;
      if (t.finish() == FinishReason::kError || t.finish() == FinishReason::kAbort) {
        return SendError(anthropic, EndedRequestError(t), res);
      }
      res.set_content(FormatJson(state->writer->Response(t)), "application/json");
      return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, state](size_t, httplib::DataSink& sink) { return StreamStep(*state, sink); },
        [this, state](bool) {
          // Ended early (the client went away, or the server stops): abort at once, so the
          // engine frees the request's blocks before its next step.
          if (!state->processor->ended()) {
            loop.load()->Abort(state->stream->id(), FinishReason::kAbort);
            DSV41_LOG_INFO("request %llu: client disconnected; aborted",
                           static_cast<unsigned long long>(state->stream->id()));
          }
        });
  }

  // One call of the content provider: writes what arrived (or a heartbeat). False stops the
  // stream (a failed write: the client is gone).
  bool StreamStep(StreamState& s, httplib::DataSink& sink) {
    std::string chunk;
    if (!s.started) {
      // The first event goes out at once, before any output: a long prefill streams from the
      // first moment, and heartbeats keep it alive until the first token.
      s.started = true;
      chunk = s.writer->StreamStart(*s.processor);
      if (chunk.empty()) chunk = s.writer->Heartbeat();
      return sink.write(chunk.data(), chunk.size());
    }
    if (s.stream->Wait(s.output, options.heartbeat)) {
      const ProcessedOutput delta = s.processor->Push(s.output);
      chunk += s.writer->StreamDelta(delta, *s.processor);
    } else {
      chunk += s.writer->Heartbeat();
    }
    if (s.processor->needs_abort()) loop.load()->Abort(s.stream->id(), FinishReason::kStopString);
    const bool ended = s.processor->ended();
    if (ended) chunk += s.writer->StreamEnd(*s.processor);
    if (!chunk.empty() && !sink.write(chunk.data(), chunk.size())) return false;
    if (ended) {
      Finished(s);
      sink.done();
    }
    return true;
  }

  void Finished(const StreamState& s) {
    const OutputProcessor& t = *s.processor;
    if (t.malformed_tool_block()) metrics.CountMalformedToolOutput();
    // A failed non-streaming request is counted when its error is sent; a stream's here.
    if (t.finish() == FinishReason::kError && s.request.stream) {
      metrics.CountError(RequestErrorType::kInternal);
    }
    DSV41_LOG_INFO("request %llu: %d prompt tokens (%lld cached), %d output tokens, end %d",
                   static_cast<unsigned long long>(s.stream->id()), t.prompt_tokens(),
                   static_cast<long long>(t.cached_tokens()), t.completion_tokens(),
                   static_cast<int>(t.finish()));
  }

  void Routes() {
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) { Health(res); });
    // Clients probe the base URL (GET or HEAD /) before they use it.
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status": "ok", "api": ["/v1/chat/completions", "/v1/completions", )"
                      R"("/v1/messages", "/v1/responses", "/v1/models"]})",
                      "application/json");
    });
    server.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Admit(req, res)) return;
      res.set_content(FormatJson(ModelsResponse(*model.load())), "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req)) {
        return SendError(false, {401, RequestErrorType::kAuthentication, "invalid API key"}, res);
      }
      res.set_content(metrics.RenderPrometheus(), "text/plain; version=0.0.4");
    });
    server.Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Generate(Api::kChatCompletions, req, res);
                });
    server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Api::kCompletions, req, res);
    });
    server.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Api::kMessages, req, res);
    });
    server.Post("/v1/messages/count_tokens",
                [this](const httplib::Request& req, httplib::Response& res) {
                  JsonRoute(req, res, CountMessagesTokens);
                });
    server.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Api::kResponses, req, res);
    });
    server.Get(R"(/v1/responses/([^/]+))",
               [this](const httplib::Request& req, httplib::Response& res) {
                 StoredResponseRoute(req, res, GetStoredResponse);
               });
    server.Delete(R"(/v1/responses/([^/]+))",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    StoredResponseRoute(req, res, DeleteStoredResponse);
                  });
    server.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      JsonRoute(req, res, Tokenize);
    });
    server.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      JsonRoute(req, res, Detokenize);
    });
    // Bodies for the errors httplib answers itself (unknown route 404, body too large 413,
    // unreadable request 400), in the API's shape; responses with a body are ours already.
    server.set_error_handler(httplib::Server::HandlerWithResponse([this](
                                                                      const httplib::Request& req,
                                                                      httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      const bool anthropic = IsAnthropic(req);
      if (res.status == 404) {
        SendError(anthropic,
                  {404, RequestErrorType::kNotFound,
                   StrFormat("no route %s %s", req.method.c_str(), req.path.c_str())},
                  res);
      } else if (res.status == 413 && req.get_header_value("Content-Type")
                                              .rfind("application/x-www-form-urlencoded", 0) == 0) {
        // cpp-httplib caps form bodies (curl -d sends that type) at 8192 bytes itself.
        SendError(anthropic,
                  {413, RequestErrorType::kTooLarge,
                   "request body: Content-Type application/x-www-form-urlencoded (what curl "
                   "-d sends) is limited to 8192 bytes here; send Content-Type: "
                   "application/json"},
                  res);
      } else if (res.status == 413) {
        SendError(anthropic,
                  {413, RequestErrorType::kTooLarge,
                   StrFormat("request body: larger than --max-request-bytes %zu",
                             options.max_request_bytes)},
                  res);
      } else {
        const int status = res.status;
        SendError(anthropic,
                  {status,
                   status >= 500 ? RequestErrorType::kInternal : RequestErrorType::kInvalidRequest,
                   StrFormat("request: HTTP %d", status)},
                  res);
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
    server.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
          SendError(IsAnthropic(req), {500, RequestErrorType::kInternal, "internal error"}, res);
        });
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { Stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::Bind(const HttpServerOptions& options,
                                                     ServerMetrics& metrics) {
  auto impl = std::make_unique<Impl>(options, metrics);
  httplib::Server& s = impl->server;
  const int max_threads = std::max(4, options.max_threads);
  // httplib owns the queue it is handed (its API takes a raw pointer).
  s.new_task_queue = [max_threads] { return new ElasticTaskQueue(max_threads); };
  s.set_payload_max_length(options.max_request_bytes);
  s.set_keep_alive_timeout(options.keep_alive_seconds);
  s.set_read_timeout(options.read_timeout_seconds);
  s.set_write_timeout(30);
  int listen_socket = -1;  // the socket httplib binds last is the one it listens on
  s.set_socket_options([&listen_socket](socket_t sock) {
    // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second server on a
    // port in use listens beside the first and the kernel splits the connections between them.
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_socket = sock;
  });
  impl->Routes();
  bool bound = false;
  try {
    if (options.port == 0) {
      impl->port = s.bind_to_any_port(options.host);
      bound = impl->port > 0;
    } else {
      bound = s.bind_to_port(options.host, options.port);
      impl->port = options.port;
    }
  } catch (const std::exception& e) {
    return IoError("cannot listen on %s:%d: %s", options.host.c_str(), options.port, e.what());
  }
  if (!bound) {
    return IoError("cannot listen on %s:%d: %s", options.host.c_str(), options.port,
                   BindFailure(options.host, options.port).c_str());
  }
  DSV41_RETURN_IF_ERROR(SetListenBacklog(listen_socket, options.listen_backlog));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

std::string BindFailure(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) {
    return "the host does not resolve";
  }
  std::string why = "the address is not local";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int sock = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (sock < 0) continue;
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    const bool in_use = ::bind(sock, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE;
    ::close(sock);
    if (in_use) {
      why = "address already in use";
      break;
    }
  }
  ::freeaddrinfo(found);
  return why;
}

Status SetListenBacklog(int socket_fd, int backlog) {
  if (::listen(socket_fd, backlog) != 0) {
    return IoError("cannot set the listen backlog of socket %d to %d: %s", socket_fd, backlog,
                   std::strerror(errno));
  }
  return OkStatus();
}

int HttpServer::port() const { return impl_->port; }

Status HttpServer::Start() {
  Impl* impl = impl_.get();
  auto exited = std::make_shared<std::atomic<bool>>(false);
  impl->listener = std::thread([impl, exited] {
    try {
      impl->server.listen_after_bind();
    } catch (const std::exception& e) {
      DSV41_LOG_ERROR("http server stopped: %s", e.what());
    }
    exited->store(true);
  });
  // httplib's stop() does nothing until its loop runs, so Stop right after Start would leave the
  // listener in accept() for good: return only once the loop is up.
  while (!impl->server.is_running()) {
    if (exited->load()) return IoError("the HTTP listener on port %d ended at start", impl->port);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return OkStatus();
}

void HttpServer::SetLoadProgress(const Progress& progress) {
  std::lock_guard<std::mutex> lock(impl_->progress_mu);
  impl_->progress_stage = std::string(progress.stage);
  impl_->progress_unit = std::string(progress.unit);
  impl_->progress_done = progress.done;
  impl_->progress_total = progress.total;
}

void HttpServer::SetReady(const ServedModel& model, EngineLoop& loop) {
  impl_->loop.store(&loop);
  impl_->model.store(&model);
}

void HttpServer::SetShuttingDown() { impl_->shutting_down.store(true); }

bool HttpServer::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->active_mu);
  return impl_->idle.wait_for(lock, timeout, [this] { return impl_->num_active == 0; });
}

void HttpServer::Stop() {
  if (impl_ == nullptr) return;
  impl_->server.stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

}  // namespace dsv41

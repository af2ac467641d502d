#pragma once

// The HTTP front of `dsv41 serve` (serving.md §11.1): routes, --api-key auth, the body-size limit,
// errors in the OpenAI or Anthropic shape, and SSE streaming, over cpp-httplib (hidden behind a
// pImpl: this is the one adapter of the server side). HTTP threads parse, validate, chat-encode,
// tokenise, submit to the EngineLoop and read their request's stream; nothing else (STYLE.md §6).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/progress.h"
#include "base/status.h"
#include "server/engine_loop.h"
#include "server/generation_request.h"
#include "server/metrics.h"

namespace dsv41 {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (HttpServer::port() tells which)
  // Non-empty: every endpoint but /health needs it ("Authorization: Bearer KEY"; /v1/messages
  // also takes "x-api-key: KEY"), else 401.
  std::string api_key;
  size_t max_request_bytes = size_t{16} << 20;  // larger bodies get 413
  // Connections served at once at most: each holds a thread for its life (a stream, an idle
  // keep-alive, a client still sending its request), started when no thread is free.
  int max_threads = 4096;
  // A connection that sends nothing of its request (headers or body) for this long is closed.
  int read_timeout_seconds = 10;
  // A stream that has had no output this long gets a comment or ping event, so a client that
  // went away is noticed and its request aborted.
  std::chrono::milliseconds heartbeat{1000};
  // Idle keep-alive connections close after this long (each holds a thread meanwhile).
  int keep_alive_seconds = 5;
  // Connections the kernel queues before the listener accepts them (cpp-httplib listens with 5,
  // so a burst of new clients on a busy machine got reset).
  int listen_backlog = 1024;
  // Responses of POST /v1/responses kept for GET / DELETE and previous_response_id (LRU beyond
  // this many; 0 keeps none).
  size_t responses_store = 1024;
};

// Why binding host:port failed, for the error: "address already in use" when another socket
// holds it, else a guess from the address.
std::string BindFailure(const std::string& host, int port);

// Sets the accept-queue length of `socket_fd`, already listening (Linux takes a second listen()
// as a new backlog). IoError naming the socket when the kernel refuses.
Status SetListenBacklog(int socket_fd, int backlog);

// Thread-safe.
class HttpServer {
 public:
  // Binds host:port; IoError naming the address when it cannot. `metrics` outlives the server.
  static Result<std::unique_ptr<HttpServer>> Bind(const HttpServerOptions& options,
                                                  ServerMetrics& metrics);
  ~HttpServer();  // Stop()

  int port() const;
  // Starts answering on the HTTP threads. Until SetReady, /health is 503 with the load progress
  // and every API endpoint is 503.
  Status Start();
  void SetLoadProgress(const Progress& progress);
  // The model and loop every request goes to from now on; both outlive the server (or Stop).
  void SetReady(const ServedModel& model, EngineLoop& loop);
  // /health turns 503 and new requests get 503; streams in flight go on.
  void SetShuttingDown();
  // Waits up to `timeout` until every generation request got its whole response (streams ended);
  // false at the timeout.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Stops listening and joins the HTTP threads (in-flight handlers return first); a stream still
  // open is cut. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsv41

#pragma once

// A small HTTP/1.1 client over cpp-httplib (the other half of the one adapter; pImpl), for
// `dsv41 bench serve` and the server tests, plus a reader that splits a text/event-stream body
// into events. One client per thread; not thread-safe.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dsv41 {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpResponse {
  int status = 0;
  std::string body;  // empty for PostStreaming (the pieces went to on_data)
  std::string content_type;
  bool cancelled = false;  // on_data returned false and the connection was closed
};

class HttpClient {
 public:
  // Talks to host:port; a request that sees no byte for `timeout` fails.
  HttpClient(const std::string& host, int port,
             std::chrono::seconds timeout = std::chrono::seconds(120));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // IoError naming the method and path when no response came (connection refused, timeout).
  Result<HttpResponse> Get(const std::string& path, const HttpHeaders& headers = {});
  Result<HttpResponse> Delete(const std::string& path, const HttpHeaders& headers = {});
  Result<HttpResponse> Post(const std::string& path, std::string body,
                            const HttpHeaders& headers = {},
                            const std::string& content_type = "application/json");
  // As Post, handing each piece of the body to `on_data` as it arrives; when it returns false
  // the client closes the connection at once (a client that goes away mid-stream).
  Result<HttpResponse> PostStreaming(const std::string& path, std::string body,
                                     const HttpHeaders& headers,
                                     const std::function<bool(std::string_view)>& on_data);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One server-sent event: the `event:` name (empty when none) and its `data:` lines joined.
struct SseMessage {
  std::string event;
  std::string data;
};

// Splits a text/event-stream body, fed in arbitrary pieces, into events (comments skipped).
class SseReader {
 public:
  void Push(std::string_view piece);
  // The events completed so far, in order (moved out).
  std::vector<SseMessage> Take();

 private:
  std::string buffer_;
  SseMessage current_;
  bool has_data_ = false;
  std::vector<SseMessage> ready_;
};

}  // namespace dsv41

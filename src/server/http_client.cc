#include "server/http_client.h"

#include <httplib.h>

#include <exception>

namespace dsv41 {

struct HttpClient::Impl {
  httplib::Client client;
  Impl(const std::string& host, int port) : client(host, port) {}
};

HttpClient::HttpClient(const std::string& host, int port, std::chrono::seconds timeout)
    : impl_(std::make_unique<Impl>(host, port)) {
  impl_->client.set_connection_timeout(timeout);
  impl_->client.set_read_timeout(timeout);
  impl_->client.set_write_timeout(timeout);
}

HttpClient::~HttpClient() = default;

namespace {

httplib::Headers ToHeaders(const HttpHeaders& headers) {
  httplib::Headers out;
  for (const auto& [k, v] : headers) out.emplace(k, v);
  return out;
}

Result<HttpResponse> Send(httplib::Client& client, httplib::Request& req) {
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  bool ok = false;
  try {
    ok = client.send(req, res, error);
  } catch (const std::exception& e) {
    return IoError("%s %s: %s", req.method.c_str(), req.path.c_str(), e.what());
  }
  HttpResponse out;
  if (!ok && error == httplib::Error::Canceled && res.status > 0) {
    out.cancelled = true;
  } else if (!ok) {
    return IoError("%s %s: %s", req.method.c_str(), req.path.c_str(),
                   httplib::to_string(error).c_str());
  }
  out.status = res.status;
  out.body = std::move(res.body);
  out.content_type = res.get_header_value("Content-Type");
  return out;
}

}  // namespace

Result<HttpResponse> HttpClient::Get(const std::string& path, const HttpHeaders& headers) {
  httplib::Request req;
  req.method = "GET";
  req.path = path;
  req.headers = ToHeaders(headers);
  return Send(impl_->client, req);
}

Result<HttpResponse> HttpClient::Delete(const std::string& path, const HttpHeaders& headers) {
  httplib::Request req;
  req.method = "DELETE";
  req.path = path;
  req.headers = ToHeaders(headers);
  return Send(impl_->client, req);
}

Result<HttpResponse> HttpClient::Post(const std::string& path, std::string body,
                                      const HttpHeaders& headers, const std::string& content_type) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = ToHeaders(headers);
  req.headers.emplace("Content-Type", content_type);
  req.body = std::move(body);
  return Send(impl_->client, req);
}

Result<HttpResponse> HttpClient::PostStreaming(
    const std::string& path, std::string body, const HttpHeaders& headers,
    const std::function<bool(std::string_view)>& on_data) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = ToHeaders(headers);
  req.headers.emplace("Content-Type", "application/json");
  req.body = std::move(body);
  req.content_receiver = [&on_data](const char* data, size_t len, uint64_t, uint64_t) {
    return on_data(std::string_view(data, len));
  };
  return Send(impl_->client, req);
}

void SseReader::Push(std::string_view piece) {
  buffer_.append(piece);
  size_t start = 0;
  while (true) {
    const size_t end = buffer_.find('\n', start);
    if (end == std::string::npos) break;
    std::string_view line(buffer_.data() + start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (has_data_ || !current_.event.empty()) ready_.push_back(std::move(current_));
      current_ = SseMessage();
      has_data_ = false;
    } else if (line.starts_with(":")) {
      continue;  // a comment (heartbeat)
    } else if (line.starts_with("event:")) {
      line.remove_prefix(6);
      if (line.starts_with(" ")) line.remove_prefix(1);
      current_.event = std::string(line);
    } else if (line.starts_with("data:")) {
      line.remove_prefix(5);
      if (line.starts_with(" ")) line.remove_prefix(1);
      if (has_data_) current_.data += '\n';
      current_.data.append(line);
      has_data_ = true;
    }
  }
  buffer_.erase(0, start);
}

std::vector<SseMessage> SseReader::Take() {
  std::vector<SseMessage> out = std::move(ready_);
  ready_.clear();
  return out;
}

}  // namespace dsv41

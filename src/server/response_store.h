#pragma once

// The stored responses of POST /v1/responses (`store: true`): a bounded in-memory LRU keyed by
// response id, read back by GET /v1/responses/{id}, removed by DELETE, and prepended to a request
// that names one as `previous_response_id`. Nothing survives a restart.

#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/json_format.h"

namespace dsv41 {

struct StoredResponse {
  JsonValue response;  // the response object as the client got it (with `output`)
  // The conversation before the response's output, as Responses input items: the chain of
  // previous responses' items, then that request's own input (instructions are not items).
  std::vector<JsonValue> input_items;
};

// Thread-safe.
class ResponseStore {
 public:
  // capacity 0: Put stores nothing (--responses-store 0).
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}

  size_t capacity() const { return capacity_; }
  size_t size() const;
  // Stores `response` under `id` as the most recently used, evicting the least recently used
  // beyond the capacity; replaces an entry with the same id.
  void Put(const std::string& id, std::shared_ptr<const StoredResponse> response);
  // The response stored under `id` (now the most recently used), or nullptr.
  std::shared_ptr<const StoredResponse> Get(std::string_view id);
  // Removes `id`; false when it was not stored.
  bool Erase(std::string_view id);

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const StoredResponse>>;

  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // guarded by mu_: most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;  // guarded by mu_
};

}  // namespace dsv41

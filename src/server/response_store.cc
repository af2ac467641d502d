#include "server/response_store.h"

namespace dsv41 {

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

void ResponseStore::Put(const std::string& id, std::shared_ptr<const StoredResponse> response) {
  if (capacity_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.emplace_front(id, std::move(response));
  index_[id] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

std::shared_ptr<const StoredResponse> ResponseStore::Get(std::string_view id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(std::string(id));
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);  // iterators stay valid
  return it->second->second;
}

bool ResponseStore::Erase(std::string_view id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(std::string(id));
  if (it == index_.end()) return false;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

}  // namespace dsv41

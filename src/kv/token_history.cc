#include "kv/token_history.h"

#include <algorithm>

namespace dsv41 {

Status TokenHistory::Append(std::span<const int32_t> token_ids, std::span<const int32_t> class_ids,
                            std::span<const uint8_t> dead) {
  if (class_ids.size() != token_ids.size() || (!dead.empty() && dead.size() != token_ids.size())) {
    return InvalidArgumentError(
        "token history: %zu tokens with %zu class ids and %zu dead flags (want equal counts)",
        token_ids.size(), class_ids.size(), dead.size());
  }
  for (size_t i = 0; i < class_ids.size(); ++i) {
    if (class_ids[i] < 0) {
      return InvalidArgumentError("token history: position %lld (token %d): class id %d < 0",
                                  static_cast<long long>(size()) + static_cast<long long>(i),
                                  token_ids[i], class_ids[i]);
    }
  }
  token_ids_.insert(token_ids_.end(), token_ids.begin(), token_ids.end());
  class_ids_.insert(class_ids_.end(), class_ids.begin(), class_ids.end());
  for (size_t i = 0; i < token_ids.size(); ++i) {
    const uint8_t flag = (!dead.empty() && dead[i] != 0) ? 1 : 0;
    dead_.push_back(flag);
    num_dead_ += flag;
  }
  return OkStatus();
}

Status TokenHistory::Truncate(int64_t num_tokens) {
  if (num_tokens < 0 || num_tokens > size()) {
    return OutOfRangeError("token history: truncate to %lld tokens of %lld",
                           static_cast<long long>(num_tokens), static_cast<long long>(size()));
  }
  const size_t keep = static_cast<size_t>(num_tokens);
  for (size_t i = keep; i < dead_.size(); ++i) num_dead_ -= dead_[i];
  token_ids_.resize(keep);
  class_ids_.resize(keep);
  dead_.resize(keep);
  return OkStatus();
}

void TokenHistory::Clear() {
  token_ids_.clear();
  class_ids_.clear();
  dead_.clear();
  num_dead_ = 0;
}

void TokenHistory::Reserve(int64_t num_tokens) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(num_tokens, 0));
  token_ids_.reserve(n);
  class_ids_.reserve(n);
  dead_.reserve(n);
}

}  // namespace dsv41

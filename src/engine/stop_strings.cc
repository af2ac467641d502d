#include "engine/stop_strings.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "base/check.h"

namespace dsv41 {
namespace {

bool IsUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& stop : stops_) DSV41_CHECK(!stop.empty(), "empty stop string");
}

StopStringMatcher::Result StopStringMatcher::Push(std::string_view delta) {
  Result result;
  result.stopped = Push(delta, result.emit);
  return result;
}

bool StopStringMatcher::Push(std::string_view delta, std::string& emit) {
  if (stopped_) return true;
  held_.append(delta);
  // The earliest complete occurrence. held_ had none before this delta, so any occurrence ends in
  // the delta; a stop that began in text already emitted is impossible, since that text would
  // have been a prefix of the stop and held back.
  size_t stop_pos = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t pos = held_.find(stop);
    if (pos < stop_pos) {
      stop_pos = pos;
      matched_ = stop;
    }
  }
  if (stop_pos != std::string::npos) {
    emit.append(held_, 0, stop_pos);
    stopped_ = true;
    held_.clear();
    return true;
  }
  // The longest suffix of held_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(held_.size(), stop.size() - 1);
    for (size_t len = longest; len > hold; --len) {
      if (std::string_view(held_).substr(held_.size() - len) ==
          std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  size_t cut = held_.size() - hold;
  // A stop string starting mid-character (not valid UTF-8) must not split a character in emit.
  while (cut > 0 && cut < held_.size() && IsUtf8Continuation(held_[cut])) --cut;
  emit.append(held_, 0, cut);
  held_.erase(0, cut);
  return false;
}

void StopStringMatcher::Reserve(size_t delta_bytes) {
  size_t longest = 0;
  for (const std::string& stop : stops_) longest = std::max(longest, stop.size());
  held_.reserve(longest + delta_bytes);
}

std::string StopStringMatcher::Flush() {
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace dsv41

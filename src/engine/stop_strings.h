#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsv41 {

// Matches stop strings on the generated text as it streams (stop strings are not emitted), as
// vLLM's detokenizer does, holding back only what could still become a stop string.
// One per request. Not thread-safe.
class StopStringMatcher {
 public:
  // stops: the request's stop strings, each non-empty (ValidateSamplingParams).
  explicit StopStringMatcher(std::vector<std::string> stops);

  struct Result {
    std::string emit;
    bool stopped = false;
  };

  // Appends a decoded delta (whole UTF-8 characters). emit: the text now safe to stream —
  // everything before the earliest stop-string occurrence when one completes (then stopped = true
  // and later pushes emit nothing, still with stopped = true), else everything except the longest
  // suffix that is a proper prefix of some stop string (held back until resolved).
  Result Push(std::string_view delta);
  // The same, appending the text now safe to stream to `emit`; returns stopped.
  bool Push(std::string_view delta, std::string& emit);

  // Room to hold back a stop string's proper prefix plus a delta of `delta_bytes`.
  void Reserve(size_t delta_bytes);

  // The held-back text at the end of generation (none after a stop); the matcher then holds none.
  std::string Flush();

  bool stopped() const { return stopped_; }
  // The stop string that ended the text (the earliest occurrence; at one place, the first listed);
  // empty before a stop.
  std::string_view matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // not yet emitted; never contains a whole stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace dsv41

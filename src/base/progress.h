#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace dsv41 {

// Progress of a long job. The library reports, the CLI draws (STYLE.md §9).
struct Progress {
  std::string_view stage;  // "writing shards", "mapping shards"
  uint64_t done = 0;       // units done so far
  uint64_t total = 0;      // 0 when unknown
  std::string_view unit;   // "bytes", "tensors"
};

// Called from the working thread; returns false to cancel the job.
using ProgressFn = std::function<bool(const Progress&)>;

}  // namespace dsv41

#pragma once

// Everything a request's next step depends on, read back from the paged cache by position: the
// token history and, for every per-position state the forward keeps (model.md §7.10), the stored
// bytes of each live row. Two runs whose snapshots are equal continue identically; the rollback
// tests of speculative decoding compare a run after rejections with a plain run at the same length.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"
#include "kv/cache_plan.h"
#include "kv/kv_layout.h"

namespace dsv41 {

struct RequestState {
  std::vector<int32_t> token_ids;     // the committed history
  int64_t num_computed = 0;           // positions whose rows are written
  std::vector<int32_t> draft_tokens;  // the drafts the next step will verify
  // (what, bytes) of every live row, in a fixed order: "swa L<layer> p<pos>" and "draft S<stage>
  // p<pos>" for the window positions max(0, n − W) .. n − 1 (n = num_computed; the next step and
  // the next draft read them), "kv L<source> e<entry>" and "index L<source> e<entry>" for every
  // entry completed below n, "ring L<source> p<pos>" for the open group's positions of a ratio > 1
  // source (its pending partners).
  std::vector<std::pair<std::string, std::vector<std::byte>>> rows;
};

// The snapshot of `request` in `cache` (laid out by `plan`, window `window` positions).
RequestState ReadRequestState(const KvCacheView& cache, const CachePlan& plan,
                              const Request& request, int32_t window);

}  // namespace dsv41

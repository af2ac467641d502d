#include "engine/request_state.h"

#include <algorithm>

namespace dsv41 {

RequestState ReadRequestState(const KvCacheView& cache, const CachePlan& plan,
                              const Request& request, int32_t window) {
  RequestState state;
  const std::span<const int32_t> ids = request.history.token_ids();
  state.token_ids.assign(ids.begin(), ids.end());
  state.num_computed = request.num_computed;
  state.draft_tokens = request.draft_tokens;
  const int64_t n = request.num_computed;
  const KvCacheLayout& layout = *cache.layout;
  const std::vector<std::vector<uint32_t>>& tables = request.blocks.tables;
  auto add = [&](std::string what, const KvRowPlace& place, int64_t row_idx) {
    const std::byte* row = cache.RowAt(place, tables[place.group_idx], row_idx);
    state.rows.emplace_back(std::move(what), std::vector<std::byte>(row, row + place.row_bytes));
  };
  const int64_t window_begin = std::max<int64_t>(0, n - window);
  for (size_t l = 0; l < layout.swa.size(); ++l) {
    for (int64_t p = window_begin; p < n; ++p) {
      add(StrFormat("swa L%zu p%lld", l, static_cast<long long>(p)), layout.swa[l], p);
    }
  }
  for (size_t j = 0; j < layout.draft.size(); ++j) {
    for (int64_t p = window_begin; p < n; ++p) {
      add(StrFormat("draft S%zu p%lld", j, static_cast<long long>(p)), layout.draft[j], p);
    }
  }
  for (size_t l = 0; l < layout.sources.size(); ++l) {
    if (!layout.sources[l]) continue;
    const KvSourcePlaces& source = *layout.sources[l];
    for (int64_t e = 0; e < n / source.ratio; ++e) {
      add(StrFormat("kv L%zu e%lld", l, static_cast<long long>(e)), source.kv, e);
      add(StrFormat("index L%zu e%lld", l, static_cast<long long>(e)), source.index, e);
    }
    if (source.ring.slot < 0) continue;
    // The ring page holds row p mod ring_rows of position p; a request has one ring block.
    const uint32_t ring_block = BlockAt(tables[source.ring.group_idx], 0);
    for (int64_t p = n - n % source.ratio; p < n; ++p) {
      const std::byte* row = cache.Row(source.ring, ring_block, RingRow(p, plan.rows.ring_rows));
      state.rows.emplace_back(StrFormat("ring L%zu p%lld", l, static_cast<long long>(p)),
                              std::vector<std::byte>(row, row + source.ring.row_bytes));
    }
  }
  return state;
}

}  // namespace dsv41

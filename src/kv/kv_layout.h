#pragma once

// What the forward needs of the hybrid paged KV cache (serving.md §3): where each layer's rows sit
// in the slot pages, how rows are encoded (the profile, §3.4), and the slot buffers themselves. The
// cache plan (kv/cache_plan.h) derives the layout from the config and layer plan; the engine owns
// the buffers. The model owns no cache: it reads and writes rows through the block tables of each
// request of the batch, at the places this layout gives (§3.6).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "kv/batch_request.h"
#include "kv/cache_plan.h"

namespace dsv41 {

// Where one kind of row lives: in slot `slot`'s page of the block that group `group_idx`'s table
// gives, at offset_bytes + row × row_bytes.
struct KvRowPlace {
  int32_t slot = -1;
  int32_t group_idx = -1;
  size_t offset_bytes = 0;
  size_t row_bytes = 0;
  int32_t rows_per_page = 0;
};

// The stored state of one kv source (model.md §7.10): compressed KV and index K entries (G_KV,
// entry j in block (j·ratio) div B, row j mod (B / ratio)) and, for ratio > 1, the compressor ring
// (G_RING, row p mod ring_rows holds the fp32 [a ‖ g] of position p).
struct KvSourcePlaces {
  int32_t ratio = 0;
  KvRowPlace kv;
  KvRowPlace index;
  KvRowPlace ring;  // slot -1 when ratio == 1
};

// The layout of every row the forward reads or writes. Immutable; thread-safe.
struct KvCacheLayout {
  KvProfile profile = KvProfile::kSeed;
  int32_t block_tokens = 0;  // B
  int32_t head_dim = 0;
  int32_t index_head_dim = 0;
  int32_t num_groups = 0;         // block tables per request
  std::vector<KvRowPlace> swa;    // [layer]: the layer's SWA rows (G_SWA_k)
  std::vector<KvRowPlace> draft;  // [stage]: DSpark window rows (G_DRAFT); empty without DSpark
  std::vector<std::optional<KvSourcePlaces>> sources;  // [layer]: set on kv sources
};

// The per-request view the forward gets of one block table: logical block index → block id.
// Returns kNoBlock past the table's end.
inline uint32_t BlockAt(std::span<const uint32_t> table, int64_t block_idx) {
  return block_idx >= 0 && block_idx < static_cast<int64_t>(table.size()) ? table[block_idx]
                                                                          : kNoBlock;
}

// The slot buffers of one engine (serving.md §3.2): slot s holds num_blocks pages of
// page_bytes[s] bytes from base[s]. A view: the buffers live for the whole process.
struct KvCacheView {
  const KvCacheLayout* layout = nullptr;
  std::vector<std::byte*> base;    // [slot]
  std::vector<size_t> page_bytes;  // [slot]
  uint32_t num_blocks = 0;

  // The row `row` of `place` in block `block_id` (< num_blocks, checked).
  std::byte* Row(const KvRowPlace& place, uint32_t block_id, int64_t row) const;
  // Logical row `idx` of `place` through a request's block table of its group: block
  // idx / rows_per_page, row idx mod rows_per_page (an SWA row by position, a compressed entry
  // by entry id: serving.md §3.6).
  std::byte* RowAt(const KvRowPlace& place, std::span<const uint32_t> table, int64_t idx) const {
    return Row(place, BlockAt(table, idx / place.rows_per_page), idx % place.rows_per_page);
  }
};

// The places of every row of `plan` (whose config is `config`).
KvCacheLayout LayoutFromPlan(const CachePlan& plan, const ModelConfig& config);

// Slot buffers of `num_blocks` pages each, zero-filled (lazily: untouched pages cost no memory),
// allocated once. Move-only; the buffers
// never move, so views stay valid while the storage lives. Engine thread only.
class KvCacheStorage {
 public:
  KvCacheStorage(const CachePlan& plan, const ModelConfig& config, uint32_t num_blocks);
  KvCacheStorage(KvCacheStorage&&) = default;
  KvCacheStorage& operator=(KvCacheStorage&&) = default;

  const KvCacheLayout& layout() const { return *layout_; }
  const KvCacheView& view() const { return view_; }
  uint32_t num_blocks() const { return view_.num_blocks; }

 private:
  std::unique_ptr<KvCacheLayout> layout_;
  std::vector<AnonymousMemory> slots_;
  KvCacheView view_;
};

// Block tables of one request that owns the whole storage, every group's blocks consecutive
// (group g holds ids g·blocks_per_group ..). Needs num_groups × blocks_per_group ids.
std::vector<std::vector<uint32_t>> ContiguousBlockTables(const CachePlan& plan,
                                                         int64_t blocks_per_group);

// One request's cache over storage of its own, every group's blocks consecutive: the contiguous
// cache of module tests and of the paged = contiguous equivalence (a contiguous cache is just one
// consecutive block table). Engine thread only.
class ContiguousKvCache {
 public:
  // Room for `max_positions` positions in each of `num_requests` requests (request r's ids
  // follow request r − 1's); block_tokens 0 takes SmallestBlockTokens(config). Errors as
  // PlanCache.
  static Result<ContiguousKvCache> Create(const ModelConfig& config, const LayerPlan& layer_plan,
                                          int64_t max_positions,
                                          KvProfile profile = KvProfile::kSeed,
                                          int32_t block_tokens = 0, int32_t num_requests = 1);

  const CachePlan& plan() const { return *plan_; }
  const KvCacheView& view() const { return storage_->view(); }
  // The batch slice of request `request_idx`'s tokens [start_pos, start_pos + num_tokens) at
  // first_row.
  BatchRequest Request(int32_t first_row, int32_t num_tokens, int32_t start_pos,
                       int32_t request_idx = 0) const;
  // Request `request_idx`'s block tables (one per group).
  std::span<const std::vector<uint32_t>> block_tables(int32_t request_idx = 0) const {
    return tables_[static_cast<size_t>(request_idx)];
  }
  // Decoded stored rows of request 0: `layer`'s SWA row of `pos`; kv source `layer`'s entry
  // `entry_idx`.
  std::vector<float> SwaRow(int32_t layer, int32_t pos) const;
  std::vector<float> KvEntry(int32_t layer, int32_t entry_idx) const;
  std::vector<float> IndexKey(int32_t layer, int32_t entry_idx) const;
  // Stores kv source `layer`'s entry `entry_idx` of request 0 (values exact in their QAT
  // formats): for tests that start from given keys.
  void SetEntry(int32_t layer, int32_t entry_idx, std::span<const float> kv,
                std::span<const float> index_key);

 private:
  ContiguousKvCache() = default;
  std::unique_ptr<CachePlan> plan_;
  std::unique_ptr<KvCacheStorage> storage_;
  std::vector<std::vector<std::vector<uint32_t>>> tables_;  // [request][group][block]
};

// InvalidArgument naming the group and block when request `r`'s block tables miss a block its
// step touches: each SWA group's blocks of window positions max(0, start − W + 1) .. end − 1, the
// G_KV blocks of positions 0 .. end − 1, the ring block (serving.md §3.6, §3.7), or an id outside
// [0, num_blocks).
Status CheckBlockTables(const KvCacheLayout& layout, uint32_t num_blocks, const BatchRequest& r,
                        int32_t window);

// Row codecs of serving.md §3.4. Encoders take values that are exact in the row's QAT format (SWA:
// fq8_b32; compressed KV: fq4_b16_e4m3; index K: fq4_b32_pow2) and store them losslessly; decoders
// give back the same fp32 bits. `dst`/`src` hold the place's row_bytes.
void EncodeSwaRow(KvProfile profile, std::span<const float> values, std::byte* dst);
void DecodeSwaRow(KvProfile profile, const std::byte* src, std::span<float> values);
void EncodeKvRow(KvProfile profile, std::span<const float> values, std::byte* dst);
void DecodeKvRow(KvProfile profile, const std::byte* src, std::span<float> values);
// Index K is always the packed form (e2m1 pairs, then one ue8m0 per 32), zero padded to
// `row_bytes` (the seed geometry's main region).
void EncodeIndexRow(std::span<const float> values, std::byte* dst, size_t row_bytes);
void DecodeIndexRow(const std::byte* src, std::span<float> values);

}  // namespace dsv41

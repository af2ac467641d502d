#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "config/config.h"
#include "config/layer_plan.h"

namespace dsv41 {

// How cache rows are encoded (serving.md §3.4). Every profile stores the model's QAT values
// exactly; they differ only in bytes per row.
enum class KvProfile {
  kSeed,     // bf16 KV and SWA rows, index K in the seed's (index_head_dim + 2)-byte geometry
  kCompact,  // bf16 KV and SWA rows, packed index K
  kPacked,   // packed KV, index K and SWA rows; ring sized from num_speculative_tokens
};

// A block-table entry that holds no block: never allocated, or released by the sliding window.
inline constexpr uint32_t kNoBlock = 0xFFFFFFFFu;

// "seed", "compact", "packed".
std::string_view KvProfileName(KvProfile profile);
// Inverse of KvProfileName; InvalidArgument naming the value otherwise.
Result<KvProfile> ParseKvProfile(std::string_view name);

struct CachePlanOptions {
  int32_t block_tokens = 128;  // B: tokens per logical block (serving.md §3.2)
  KvProfile profile = KvProfile::kSeed;
  bool dspark = false;  // reserve DSpark draft windows (group G_DRAFT)
  // Most draft tokens one verify step writes; the ring must survive that many rejected positions
  // (serving.md §3.6). The planner checks only this storage bound; the DSpark policy limit
  // (≤ dspark_block_size, serving.md §7.3) is the engine's to enforce.
  int32_t num_speculative_tokens = 0;
};

// Bytes of one row of each stored thing (serving.md §3.4), derived from the config and profile.
struct CacheRowFormats {
  size_t kv_row_bytes = 0;     // one compressed-KV entry
  size_t index_row_bytes = 0;  // one index-K entry, all regions (seed: index_head_dim + 2)
  // The seed geometry splits an index row into a main region (index_head_dim bytes, holding the
  // packed codes then scales, rest zero) and a 2-byte region stored after all main regions. Other
  // profiles: main = index_row_bytes, tail = 0.
  size_t index_main_bytes = 0;
  size_t index_tail_bytes = 0;
  size_t swa_row_bytes = 0;   // one SWA (or DSpark window) row
  size_t ring_row_bytes = 0;  // one compressor ring row: fp32 [a ‖ g] = 2 × head_dim × 4
  int32_t ring_rows = 0;      // ring rows per request (0 when no source has ratio > 1)
};

// The cache groups of serving.md §3.3. One group = one block table per request.
enum class CacheGroupKind { kKv, kRing, kSwa, kDraft };

// "kv", "ring", "swa", "draft".
std::string_view CacheGroupKindName(CacheGroupKind kind);

// What one slot's page holds under one group.
enum class SlotMemberKind {
  kCompressedKv,  // G_KV: compressed-KV rows of the slot's source
  kIndexK,        // G_KV: index-K rows (seed: their main regions)
  kIndexTail,     // G_KV: the seed's 2-byte index regions
  kRing,          // G_RING: the source's compressor ring
  kSwa,           // G_SWA_k: one backbone layer's SWA rows
  kDraft,         // G_DRAFT: one DSpark stage's window rows
};

// "compressed_kv", "index_k", "index_tail", "ring", "swa", "draft".
std::string_view SlotMemberKindName(SlotMemberKind kind);

// One region of a slot's page. Members of the same group sit at disjoint offsets; members of
// different groups alias (one block id belongs to one group at a time).
struct SlotMember {
  SlotMemberKind kind = SlotMemberKind::kSwa;
  int32_t group_idx = 0;    // index into CachePlan::groups
  int32_t layer = 0;        // kv source layer (G_KV, G_RING), backbone layer (SWA), stage (draft)
  int32_t num_rows = 0;     // rows in one page
  size_t row_bytes = 0;     // row stride
  size_t offset_bytes = 0;  // from the start of the page
  size_t size_bytes() const { return static_cast<size_t>(num_rows) * row_bytes; }
  size_t end_bytes() const { return offset_bytes + size_bytes(); }
};

// One physical buffer of N pages (serving.md §3.2): slot s ↔ the s-th kv source.
struct CacheSlot {
  int32_t slot_idx = 0;
  int32_t source_layer = -1;     // -1 when the config has no kv sources (then there is one slot)
  int32_t ratio = 0;             // the source's compress ratio; 0 without a source
  int32_t kv_rows_per_page = 0;  // n_s = B / ratio: entries of the source per block; 0 without
  size_t kv_index_bytes = 0;     // the G_KV member: n_s × (kv_row + index_row)
  size_t page_bytes = 0;         // max over members of their end offset
  std::vector<SlotMember> members;
};

// One cache group and the layers (or stages) whose rows it addresses.
struct CacheGroup {
  CacheGroupKind kind = CacheGroupKind::kSwa;
  int32_t swa_idx = -1;  // k of G_SWA_k, m of G_DRAFT_m; -1 for the other kinds
  std::string name;      // "kv", "ring", "swa_<k>", "draft_<m>"
  // Parallel lists: the member layers (kv sources for kv/ring, backbone layers for swa, DSpark
  // stages for draft) and the slot each one occupies.
  std::vector<int32_t> layers;
  std::vector<int32_t> slots;
};

// The hybrid paged KV cache layout of one model (serving.md §3): derived once from the config and
// layer plan, immutable afterwards. Thread-safe (read-only).
struct CachePlan {
  CachePlanOptions options;
  CacheRowFormats rows;
  int32_t num_layers = 0;
  int32_t sliding_window = 0;    // W
  int32_t num_draft_stages = 0;  // DSpark stages with a window (0 unless options.dspark)
  std::vector<CacheSlot> slots;
  std::vector<CacheGroup> groups;
  size_t bytes_per_block_id = 0;  // Σ_s page_s: what one block id costs in memory

  // Group indexes into `groups`; -1 when the group does not exist (G_KV without kv sources,
  // G_RING without ratio > 1 sources).
  int32_t kv_group_idx = -1;
  int32_t ring_group_idx = -1;
  std::vector<int32_t> swa_group_idx;    // k → index of G_SWA_k
  std::vector<int32_t> draft_group_idx;  // m → index of G_DRAFT_m; empty without options.dspark

  int32_t num_slots() const { return static_cast<int32_t>(slots.size()); }
  int32_t num_swa_groups() const { return static_cast<int32_t>(swa_group_idx.size()); }
  int32_t num_draft_groups() const { return static_cast<int32_t>(draft_group_idx.size()); }
  // Slot holding backbone layer `layer`'s SWA rows: layer mod n_slots (serving.md §3.3).
  int32_t SwaSlotOfLayer(int32_t layer) const { return layer % num_slots(); }
  // k of the G_SWA_k group holding `layer`'s SWA rows: layer div n_slots.
  int32_t SwaGroupOfLayer(int32_t layer) const { return layer / num_slots(); }
  // Slot holding DSpark stage `stage`'s window: stage mod n_slots (serving.md §3.3).
  int32_t DraftSlotOfStage(int32_t stage) const { return stage % num_slots(); }
  // m of the G_DRAFT_m group holding `stage`'s window: stage div n_slots. serving.md §3.3 has one
  // G_DRAFT (stages ≤ slots, as in the release); with more stages than slots two stages would
  // share a page under one block id, so the stages split into groups as the SWA layers do.
  int32_t DraftGroupOfStage(int32_t stage) const { return stage / num_slots(); }

  // Amortised cache bytes per token of context: a G_KV block id covers block_tokens tokens and
  // costs a page in every slot, so each token costs bytes_per_block_id / block_tokens. A request
  // also holds a fixed part independent of its length (its ring id and the SWA / draft ids of its
  // window, FixedBlocksPerRequest × bytes_per_block_id).
  double KvBytesPerToken() const;
  // Bytes per token that G_KV pages actually fill: Σ_s kv_index_bytes_s / block_tokens (the
  // model card's "890 B/token" for the packed release); the rest of a G_KV page is padding.
  double PayloadBytesPerToken() const;
};

// The smallest legal block size: the least common multiple of the positive compress ratios (1
// without any).
int32_t SmallestBlockTokens(const ModelConfig& config);

// Builds the plan for any valid config (ValidateConfig) and its layer plan. InvalidArgument naming
// the option or field when: block_tokens is not a positive multiple of every compress ratio;
// num_speculative_tokens is negative or the ring has fewer than num_speculative_tokens + 2 rows;
// DSpark is asked for but the config has no stages; the layer plan does not match the config; a
// width the profile packs is not a multiple of its block.
Result<CachePlan> PlanCache(const ModelConfig& config, const LayerPlan& layer_plan,
                            const CachePlanOptions& options);

// Addressing (serving.md §3.6). Pure functions of positions and sizes.
struct BlockRow {
  int64_t block_idx = 0;  // index into the request's block table of the group
  int32_t row = 0;        // row inside the page
  bool operator==(const BlockRow&) const = default;
};

// The compressed entry completed by the token at `pos` of a ratio-`ratio` source: (pos + 1) / ratio
// − 1 when (pos + 1) is a multiple of ratio, else none (the token gets slot mapping −1).
std::optional<int64_t> EntryCompletedAt(int64_t pos, int32_t ratio);
// Where G_KV entry `entry_idx` of a ratio-`ratio` source lives: block (entry·ratio) div B, row
// entry mod (B / ratio). block_tokens must be a multiple of ratio.
BlockRow KvEntryAddress(int64_t entry_idx, int32_t ratio, int32_t block_tokens);
// Where the SWA (or DSpark window) row of absolute position `pos` lives: block pos div B, row
// pos mod B (position-addressed, never a ring).
BlockRow SwaAddress(int64_t pos, int32_t block_tokens);
// Row of position `pos` inside the request's ring page: pos mod ring_rows.
int32_t RingRow(int64_t pos, int32_t ring_rows);
// Flat row index in a typed view [N, rows_per_page, row] (a slot mapping): block_id ×
// rows_per_page + row.
int64_t FlatRowIndex(uint32_t block_id, int32_t rows_per_page, int32_t row);

// Block ids one request holds at its peak, per group (serving.md §3.7).
struct RequestBlockNeed {
  int64_t kv_ids = 0;             // G_KV: ceil(L / B)
  int64_t ring_ids = 0;           // G_RING: 1 when the group exists
  int64_t swa_ids_per_group = 0;  // each G_SWA_k and each G_DRAFT_m
  int32_t num_swa_groups = 0;
  int32_t num_draft_groups = 0;
  int64_t total() const {
    return kv_ids + ring_ids + swa_ids_per_group * (num_swa_groups + num_draft_groups);
  }
};

// Most blocks of B tokens touched by `span_tokens` consecutive positions [a, a + span) with
// 0 ≤ a ≤ max_start (any alignment when max_start ≥ B − 1). 0 for an empty span.
int64_t MaxBlocksTouched(int64_t span_tokens, int64_t max_start, int32_t block_tokens);

// Peak ids a request of `context_tokens` positions (prompt + output) holds when it runs in steps
// of at most `step_tokens` new tokens (1 for plain decode, 1 + num_speculative_tokens for a DSpark
// verify step, the chunk size in prefill). A step over [s, e) keeps the window positions
// [max(0, s − W + 1), e) of every SWA group (sliding free releases older blocks), so each group
// needs the blocks of a span of min(L, step + W − 1) positions at its worst alignment.
// For the release with DSpark at step 1 this is serving.md §3.7's ceil(L/128) + 1 + 10·2 + 2.
RequestBlockNeed PeakRequestBlockNeed(const CachePlan& plan, int64_t context_tokens,
                                      int32_t step_tokens);
// The context-independent part of PeakRequestBlockNeed (ring, SWA and draft ids) for a request
// long enough to reach every alignment.
int64_t FixedBlocksPerRequest(const CachePlan& plan, int32_t step_tokens);
// Tokens per decode step the plan is sized for: 1 + num_speculative_tokens (a verify step of any
// drafter; 1 without speculation).
int32_t DecodeStepTokens(const CachePlan& plan);

// Pool sizing (serving.md §3.8).
struct PoolSizing {
  uint64_t kv_cache_bytes = 0;  // the budget given
  size_t bytes_per_block_id = 0;
  uint32_t num_block_ids = 0;  // N = floor(budget / bytes_per_block_id), capped at 2^32 − 1
  uint64_t used_bytes = 0;     // N × bytes_per_block_id
  // Longest single request (prompt + output tokens) whose peak need at DecodeStepTokens fits in
  // N ids, capped at max_position_embeddings; 0 if not even one token fits. The scheduler shrinks
  // prefill chunks to fit, so decode is the binding case.
  int64_t max_context_tokens = 0;
};

PoolSizing SizePool(const CachePlan& plan, uint64_t kv_cache_bytes, const ModelConfig& config);

// Human-readable plan for `dsv41 plan`: profile and block size, row formats, each slot with its
// members (offset, rows × stride = size) and page bytes, bytes per block id, and each group with
// its member layers and slots.
std::string DescribeCachePlan(const CachePlan& plan);
// The same content as JSON (keys in a fixed order).
OrderedJson CachePlanToJson(const CachePlan& plan);
OrderedJson PoolSizingToJson(const PoolSizing& sizing);

}  // namespace dsv41

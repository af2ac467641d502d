#include "kv/cache_plan.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "base/check.h"

namespace dsv41 {
namespace {

// Bounds that keep every byte count below 2^62 (so no size_t sum can overflow) while leaving
// orders of magnitude above any real config.
constexpr int32_t kMaxBlockTokens = 1 << 20;
constexpr int32_t kMaxSpeculativeTokens = 1 << 20;
constexpr int32_t kMaxWidth = 1 << 20;  // head_dim, index_head_dim
constexpr int32_t kMaxLayers = 1 << 16;

// Seed and compact profiles keep the seed's 32-row compressor ring (serving.md §3.4).
constexpr int32_t kSeedRingRows = 32;
// Packed profile: ring rows = max(kMinPackedRingRows, next_pow2(spec + 2)).
constexpr int32_t kMinPackedRingRows = 8;

int64_t NextPow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// The largest compress ratio among sources that keep a ring (ratio > 1); 0 when none.
int32_t MaxRingRatio(const std::vector<CacheSlot>& slots) {
  int32_t max_ratio = 0;
  for (const CacheSlot& slot : slots) {
    if (slot.ratio > 1) max_ratio = std::max(max_ratio, slot.ratio);
  }
  return max_ratio;
}

Status CheckWidthMultiple(const char* field, int32_t value, int32_t block, KvProfile profile) {
  if (value % block != 0) {
    return InvalidArgumentError("%s %d is not a multiple of %d, which the '%s' cache profile packs",
                                field, value, block, std::string(KvProfileName(profile)).c_str());
  }
  return OkStatus();
}

// Row bytes of serving.md §3.4. The packed forms (model.md §7.10): compressed KV = e2m1 pairs
// (head_dim / 2) + one e4m3 scale per 16; index K = e2m1 pairs (index_head_dim / 2) + one ue8m0
// per 32; SWA = e4m3 (head_dim) + one ue8m0 per 32.
Result<CacheRowFormats> MakeRowFormats(const ModelConfig& config, const CachePlanOptions& options,
                                       bool has_kv_sources) {
  const KvProfile profile = options.profile;
  const size_t head_dim = static_cast<size_t>(config.head_dim);
  const size_t index_head_dim = static_cast<size_t>(config.index_head_dim);
  const size_t packed_index = index_head_dim / 2 + index_head_dim / 32;
  if (has_kv_sources && profile != KvProfile::kSeed) {
    DSV41_RETURN_IF_ERROR(CheckWidthMultiple("index_head_dim", config.index_head_dim, 32, profile));
  }
  CacheRowFormats rows;
  rows.ring_row_bytes = 2 * head_dim * sizeof(float);
  switch (profile) {
    case KvProfile::kSeed:
      rows.kv_row_bytes = 2 * head_dim;
      rows.index_main_bytes = index_head_dim;
      rows.index_tail_bytes = 2;
      rows.swa_row_bytes = 2 * head_dim;
      break;
    case KvProfile::kCompact:
      rows.kv_row_bytes = 2 * head_dim;
      rows.index_main_bytes = packed_index;
      rows.swa_row_bytes = 2 * head_dim;
      break;
    case KvProfile::kPacked:
      DSV41_RETURN_IF_ERROR(CheckWidthMultiple("head_dim", config.head_dim, 32, profile));
      rows.kv_row_bytes = head_dim / 2 + head_dim / 16;
      rows.index_main_bytes = packed_index;
      rows.swa_row_bytes = head_dim + head_dim / 32;
      break;
  }
  rows.index_row_bytes = rows.index_main_bytes + rows.index_tail_bytes;
  return rows;
}

Status CheckInputs(const ModelConfig& config, const LayerPlan& layer_plan,
                   const CachePlanOptions& options) {
  const int32_t num_layers = config.num_hidden_layers;
  if (num_layers < 1 || num_layers > kMaxLayers) {
    return InvalidArgumentError("num_hidden_layers %d is outside [1, %d]", num_layers, kMaxLayers);
  }
  if (static_cast<int64_t>(layer_plan.layers.size()) != num_layers) {
    return InvalidArgumentError("layer plan has %zu layers, num_hidden_layers is %d",
                                layer_plan.layers.size(), num_layers);
  }
  if (config.head_dim < 1 || config.head_dim > kMaxWidth) {
    return InvalidArgumentError("head_dim %d is outside [1, %d]", config.head_dim, kMaxWidth);
  }
  if (config.sliding_window < 1) {
    return InvalidArgumentError("sliding_window %d must be at least 1", config.sliding_window);
  }
  if (options.block_tokens < 1 || options.block_tokens > kMaxBlockTokens) {
    return InvalidArgumentError("block_tokens %d is outside [1, %d]", options.block_tokens,
                                kMaxBlockTokens);
  }
  if (options.num_speculative_tokens < 0 ||
      options.num_speculative_tokens > kMaxSpeculativeTokens) {
    return InvalidArgumentError("num_speculative_tokens %d is outside [0, %d]",
                                options.num_speculative_tokens, kMaxSpeculativeTokens);
  }
  if (options.dspark && layer_plan.num_dspark_stages < 1) {
    return InvalidArgumentError(
        "DSpark draft windows requested, but the config has no DSpark stages "
        "(num_nextn_predict_layers %d)",
        config.num_nextn_predict_layers);
  }
  std::vector<int32_t> plan_sources;
  for (int32_t l = 0; l < num_layers; ++l) {
    const LayerRole& role = layer_plan.layers[l];
    if (role.layer != l) {
      return InvalidArgumentError("layer plan entry %d describes layer %d", l, role.layer);
    }
    if (role.ratio < 0) {
      return InvalidArgumentError("compress_ratios[%d] = %d is negative", l, role.ratio);
    }
    // serving.md §3.2: a block completes exactly B / r entries and never splits a group.
    if (role.ratio > 0 && options.block_tokens % role.ratio != 0) {
      return InvalidArgumentError(
          "block_tokens %d is not a multiple of compress_ratios[%d] = %d (a block must complete "
          "whole compressed entries)",
          options.block_tokens, l, role.ratio);
    }
    if (role.is_kv_source) {
      if (role.ratio < 1) {
        return InvalidArgumentError("kv source layer %d has compress ratio %d", l, role.ratio);
      }
      plan_sources.push_back(l);
    }
  }
  if (plan_sources != config.kv_source_layer_ids) {
    return InvalidArgumentError(
        "layer plan kv sources differ from kv_source_layer_ids (%zu in the plan, %zu in the "
        "config)",
        plan_sources.size(), config.kv_source_layer_ids.size());
  }
  if (!plan_sources.empty() && (config.index_head_dim < 1 || config.index_head_dim > kMaxWidth)) {
    return InvalidArgumentError("index_head_dim %d is outside [1, %d]", config.index_head_dim,
                                kMaxWidth);
  }
  return OkStatus();
}

CacheGroup MakeGroup(CacheGroupKind kind, std::string name, int32_t swa_idx = -1) {
  CacheGroup group;
  group.kind = kind;
  group.name = std::move(name);
  group.swa_idx = swa_idx;
  return group;
}

void AddMember(CachePlan& plan, int32_t slot_idx, SlotMemberKind kind, int32_t group_idx,
               int32_t layer, int32_t num_rows, size_t row_bytes, size_t offset_bytes) {
  SlotMember member;
  member.kind = kind;
  member.group_idx = group_idx;
  member.layer = layer;
  member.num_rows = num_rows;
  member.row_bytes = row_bytes;
  member.offset_bytes = offset_bytes;
  plan.slots[slot_idx].members.push_back(member);
  // A group lists each layer once, even when it spans several members (G_KV's regions).
  CacheGroup& group = plan.groups[group_idx];
  if (group.layers.empty() || group.layers.back() != layer || group.slots.back() != slot_idx) {
    group.layers.push_back(layer);
    group.slots.push_back(slot_idx);
  }
}

std::string JoinInts(const std::vector<int32_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(values[i]);
  }
  return out;
}

// serving.md §3.2: one slot per kv source (slot s ↔ kv_source_layer_ids[s]); one without any.
// Returns whether the config has kv sources.
bool AddSlots(const LayerPlan& layer_plan, int32_t block_tokens, CachePlan& plan) {
  for (const LayerRole& role : layer_plan.layers) {
    if (!role.is_kv_source) continue;
    CacheSlot slot;
    slot.slot_idx = static_cast<int32_t>(plan.slots.size());
    slot.source_layer = role.layer;
    slot.ratio = role.ratio;
    slot.kv_rows_per_page = block_tokens / role.ratio;
    plan.slots.push_back(std::move(slot));
  }
  const bool has_kv_sources = !plan.slots.empty();
  if (!has_kv_sources) plan.slots.push_back(CacheSlot{});
  return has_kv_sources;
}

// serving.md §3.6: rejected draft positions (≤ spec) must not overwrite the pending rows of the
// last accepted position. The spec states ring_rows ≥ spec + 2 for ratio 2 (one pending row plus
// one spare); for a ratio-r source we keep the same form, spec + r.
Status SizeCompressorRing(const CachePlanOptions& options, int32_t max_ring_ratio,
                          CacheRowFormats& rows) {
  const int64_t min_ring_rows =
      static_cast<int64_t>(options.num_speculative_tokens) + max_ring_ratio;
  rows.ring_rows =
      options.profile == KvProfile::kPacked
          ? static_cast<int32_t>(std::max<int64_t>(kMinPackedRingRows, NextPow2(min_ring_rows)))
          : kSeedRingRows;
  if (rows.ring_rows < min_ring_rows) {
    return InvalidArgumentError(
        "num_speculative_tokens %d needs a compressor ring of at least %lld rows (spec + %d), "
        "the '%s' cache profile has %d",
        options.num_speculative_tokens, static_cast<long long>(min_ring_rows), max_ring_ratio,
        std::string(KvProfileName(options.profile)).c_str(), rows.ring_rows);
  }
  return OkStatus();
}

// Groups, in the order G_KV, G_RING, G_SWA_0.., G_DRAFT_0.. (serving.md §3.3).
void AddGroups(bool has_kv_sources, bool has_ring, CachePlan& plan) {
  const int32_t num_slots = plan.num_slots();
  if (has_kv_sources) {
    plan.kv_group_idx = static_cast<int32_t>(plan.groups.size());
    plan.groups.push_back(MakeGroup(CacheGroupKind::kKv, "kv"));
  }
  if (has_ring) {
    plan.ring_group_idx = static_cast<int32_t>(plan.groups.size());
    plan.groups.push_back(MakeGroup(CacheGroupKind::kRing, "ring"));
  }
  const int32_t num_swa_groups = (plan.num_layers + num_slots - 1) / num_slots;
  for (int32_t k = 0; k < num_swa_groups; ++k) {
    plan.swa_group_idx.push_back(static_cast<int32_t>(plan.groups.size()));
    plan.groups.push_back(MakeGroup(CacheGroupKind::kSwa, "swa_" + std::to_string(k), k));
  }
  const int32_t num_draft_groups = (plan.num_draft_stages + num_slots - 1) / num_slots;
  for (int32_t m = 0; m < num_draft_groups; ++m) {
    plan.draft_group_idx.push_back(static_cast<int32_t>(plan.groups.size()));
    plan.groups.push_back(MakeGroup(CacheGroupKind::kDraft, "draft_" + std::to_string(m), m));
  }
}

// Members (serving.md §3.2, §3.5). G_KV regions sit at disjoint offsets: compressed KV at 0,
// index rows after n_s KV rows, the seed's 2-byte regions after n_s index main regions. Members
// of the other groups alias at offset 0.
void AddMembers(int32_t block_tokens, CachePlan& plan) {
  const CacheRowFormats& rows = plan.rows;
  for (CacheSlot& slot : plan.slots) {
    if (slot.source_layer < 0) continue;
    const int32_t n = slot.kv_rows_per_page;
    const size_t index_offset = n * rows.kv_row_bytes;
    AddMember(plan, slot.slot_idx, SlotMemberKind::kCompressedKv, plan.kv_group_idx,
              slot.source_layer, n, rows.kv_row_bytes, 0);
    AddMember(plan, slot.slot_idx, SlotMemberKind::kIndexK, plan.kv_group_idx, slot.source_layer, n,
              rows.index_main_bytes, index_offset);
    if (rows.index_tail_bytes > 0) {
      AddMember(plan, slot.slot_idx, SlotMemberKind::kIndexTail, plan.kv_group_idx,
                slot.source_layer, n, rows.index_tail_bytes,
                index_offset + n * rows.index_main_bytes);
    }
    slot.kv_index_bytes = n * (rows.kv_row_bytes + rows.index_row_bytes);
  }
  for (CacheSlot& slot : plan.slots) {
    if (slot.ratio > 1) {
      AddMember(plan, slot.slot_idx, SlotMemberKind::kRing, plan.ring_group_idx, slot.source_layer,
                rows.ring_rows, rows.ring_row_bytes, 0);
    }
  }
  for (int32_t l = 0; l < plan.num_layers; ++l) {
    AddMember(plan, plan.SwaSlotOfLayer(l), SlotMemberKind::kSwa,
              plan.swa_group_idx[plan.SwaGroupOfLayer(l)], l, block_tokens, rows.swa_row_bytes, 0);
  }
  for (int32_t j = 0; j < plan.num_draft_stages; ++j) {
    AddMember(plan, plan.DraftSlotOfStage(j), SlotMemberKind::kDraft,
              plan.draft_group_idx[plan.DraftGroupOfStage(j)], j, block_tokens, rows.swa_row_bytes,
              0);
  }
}

// serving.md §3.2: page capacity = max member; bytes per block id = Σ_s page_s.
void SizePages(CachePlan& plan) {
  for (CacheSlot& slot : plan.slots) {
    for (const SlotMember& member : slot.members) {
      slot.page_bytes = std::max(slot.page_bytes, member.end_bytes());
    }
    plan.bytes_per_block_id += slot.page_bytes;
  }
}

}  // namespace

int32_t SmallestBlockTokens(const ModelConfig& config) {
  int32_t block_tokens = 1;
  for (int32_t ratio : config.compress_ratios) {
    if (ratio > 0) block_tokens = std::lcm(block_tokens, ratio);
  }
  return block_tokens;
}

std::string_view KvProfileName(KvProfile profile) {
  switch (profile) {
    case KvProfile::kSeed:
      return "seed";
    case KvProfile::kCompact:
      return "compact";
    case KvProfile::kPacked:
      return "packed";
  }
  return "?";
}

Result<KvProfile> ParseKvProfile(std::string_view name) {
  for (KvProfile profile : {KvProfile::kSeed, KvProfile::kCompact, KvProfile::kPacked}) {
    if (name == KvProfileName(profile)) return profile;
  }
  return InvalidArgumentError("unknown KV cache profile '%.*s' (want seed, compact or packed)",
                              static_cast<int>(name.size()), name.data());
}

std::string_view CacheGroupKindName(CacheGroupKind kind) {
  switch (kind) {
    case CacheGroupKind::kKv:
      return "kv";
    case CacheGroupKind::kRing:
      return "ring";
    case CacheGroupKind::kSwa:
      return "swa";
    case CacheGroupKind::kDraft:
      return "draft";
  }
  return "?";
}

std::string_view SlotMemberKindName(SlotMemberKind kind) {
  switch (kind) {
    case SlotMemberKind::kCompressedKv:
      return "compressed_kv";
    case SlotMemberKind::kIndexK:
      return "index_k";
    case SlotMemberKind::kIndexTail:
      return "index_tail";
    case SlotMemberKind::kRing:
      return "ring";
    case SlotMemberKind::kSwa:
      return "swa";
    case SlotMemberKind::kDraft:
      return "draft";
  }
  return "?";
}

double CachePlan::KvBytesPerToken() const {
  return static_cast<double>(bytes_per_block_id) / options.block_tokens;
}

double CachePlan::PayloadBytesPerToken() const {
  size_t kv_index_bytes = 0;
  for (const CacheSlot& slot : slots) kv_index_bytes += slot.kv_index_bytes;
  return static_cast<double>(kv_index_bytes) / options.block_tokens;
}

Result<CachePlan> PlanCache(const ModelConfig& config, const LayerPlan& layer_plan,
                            const CachePlanOptions& options) {
  DSV41_RETURN_IF_ERROR(CheckInputs(config, layer_plan, options));
  CachePlan plan;
  plan.options = options;
  plan.num_layers = config.num_hidden_layers;
  plan.sliding_window = config.sliding_window;
  plan.num_draft_stages = options.dspark ? layer_plan.num_dspark_stages : 0;

  const bool has_kv_sources = AddSlots(layer_plan, options.block_tokens, plan);
  DSV41_ASSIGN_OR_RETURN(plan.rows, MakeRowFormats(config, options, has_kv_sources));
  const int32_t max_ring_ratio = MaxRingRatio(plan.slots);
  if (max_ring_ratio > 0) {
    DSV41_RETURN_IF_ERROR(SizeCompressorRing(options, max_ring_ratio, plan.rows));
  }
  AddGroups(has_kv_sources, max_ring_ratio > 0, plan);
  AddMembers(options.block_tokens, plan);
  SizePages(plan);
  return plan;
}

std::optional<int64_t> EntryCompletedAt(int64_t pos, int32_t ratio) {
  DSV41_DCHECK(ratio > 0 && pos >= 0, "pos %lld ratio %d", static_cast<long long>(pos), ratio);
  if ((pos + 1) % ratio != 0) return std::nullopt;
  return (pos + 1) / ratio - 1;
}

BlockRow KvEntryAddress(int64_t entry_idx, int32_t ratio, int32_t block_tokens) {
  DSV41_DCHECK(ratio > 0 && block_tokens % ratio == 0, "ratio %d block %d", ratio, block_tokens);
  const int32_t rows_per_page = block_tokens / ratio;
  return BlockRow{entry_idx * ratio / block_tokens,
                  static_cast<int32_t>(entry_idx % rows_per_page)};
}

BlockRow SwaAddress(int64_t pos, int32_t block_tokens) {
  return BlockRow{pos / block_tokens, static_cast<int32_t>(pos % block_tokens)};
}

int32_t RingRow(int64_t pos, int32_t ring_rows) { return static_cast<int32_t>(pos % ring_rows); }

int64_t FlatRowIndex(uint32_t block_id, int32_t rows_per_page, int32_t row) {
  return static_cast<int64_t>(block_id) * rows_per_page + row;
}

int64_t MaxBlocksTouched(int64_t span_tokens, int64_t max_start, int32_t block_tokens) {
  if (span_tokens <= 0) return 0;
  // The count (a + span − 1) div B − a div B + 1 grows with a mod B, so the worst start is the
  // largest reachable offset inside a block.
  const int64_t offset = std::min<int64_t>(std::max<int64_t>(max_start, 0), block_tokens - 1);
  return (offset + span_tokens - 1) / block_tokens + 1;
}

RequestBlockNeed PeakRequestBlockNeed(const CachePlan& plan, int64_t context_tokens,
                                      int32_t step_tokens) {
  DSV41_CHECK(step_tokens >= 1, "step_tokens %d", step_tokens);
  RequestBlockNeed need;
  need.num_swa_groups = plan.num_swa_groups();
  need.num_draft_groups = plan.num_draft_groups();
  if (context_tokens <= 0) return need;
  const int32_t block_tokens = plan.options.block_tokens;
  const int64_t span = std::min<int64_t>(
      context_tokens, static_cast<int64_t>(step_tokens) + plan.sliding_window - 1);
  const int64_t window_ids = MaxBlocksTouched(span, context_tokens - span, block_tokens);
  need.kv_ids = plan.kv_group_idx >= 0 ? (context_tokens + block_tokens - 1) / block_tokens : 0;
  need.ring_ids = plan.ring_group_idx >= 0 ? 1 : 0;
  need.swa_ids_per_group = window_ids;
  return need;
}

int64_t FixedBlocksPerRequest(const CachePlan& plan, int32_t step_tokens) {
  const int64_t span = static_cast<int64_t>(step_tokens) + plan.sliding_window - 1;
  const int64_t window_ids =
      MaxBlocksTouched(span, plan.options.block_tokens, plan.options.block_tokens);
  const int64_t window_groups = plan.num_swa_groups() + plan.num_draft_groups();
  return (plan.ring_group_idx >= 0 ? 1 : 0) + window_groups * window_ids;
}

int32_t DecodeStepTokens(const CachePlan& plan) { return 1 + plan.options.num_speculative_tokens; }

PoolSizing SizePool(const CachePlan& plan, uint64_t kv_cache_bytes, const ModelConfig& config) {
  DSV41_CHECK(plan.bytes_per_block_id > 0, "empty cache plan");
  PoolSizing sizing;
  sizing.kv_cache_bytes = kv_cache_bytes;
  sizing.bytes_per_block_id = plan.bytes_per_block_id;
  const uint64_t num_ids = std::min<uint64_t>(kv_cache_bytes / plan.bytes_per_block_id,
                                              std::numeric_limits<uint32_t>::max());
  sizing.num_block_ids = static_cast<uint32_t>(num_ids);
  sizing.used_bytes = num_ids * plan.bytes_per_block_id;

  // PeakRequestBlockNeed grows with the context, so the longest fitting context is found by
  // bisection over [0, cap].
  const int32_t step_tokens = DecodeStepTokens(plan);
  const int64_t cap = config.max_position_embeddings > 0
                          ? config.max_position_embeddings
                          : static_cast<int64_t>(num_ids) * plan.options.block_tokens;
  auto fits = [&](int64_t tokens) {
    return PeakRequestBlockNeed(plan, tokens, step_tokens).total() <= static_cast<int64_t>(num_ids);
  };
  int64_t lo = 0;  // fits
  int64_t hi = cap;
  if (fits(hi)) {
    lo = hi;
  } else {
    while (hi - lo > 1) {  // invariant: fits(lo), !fits(hi)
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
  }
  sizing.max_context_tokens = lo;
  return sizing;
}

std::string DescribeCachePlan(const CachePlan& plan) {
  const CacheRowFormats& rows = plan.rows;
  std::string out = StrFormat(
      "KV cache plan: profile %s, %d-token blocks, window %d, %d slots, %zu groups, DSpark %s",
      std::string(KvProfileName(plan.options.profile)).c_str(), plan.options.block_tokens,
      plan.sliding_window, plan.num_slots(), plan.groups.size(),
      plan.options.dspark ? "on" : "off");
  if (plan.options.num_speculative_tokens > 0) {
    out += StrFormat(" (%d speculative tokens)", plan.options.num_speculative_tokens);
  }
  out += '\n';
  out += StrFormat("rows: compressed KV %zu B, index K %zu B", rows.kv_row_bytes,
                   rows.index_row_bytes);
  if (rows.index_tail_bytes > 0) {
    out += StrFormat(" (%zu + %zu)", rows.index_main_bytes, rows.index_tail_bytes);
  }
  out += StrFormat(", SWA %zu B", rows.swa_row_bytes);
  if (rows.ring_rows > 0)
    out += StrFormat(", ring %d x %zu B", rows.ring_rows, rows.ring_row_bytes);
  out += '\n';
  for (const CacheSlot& slot : plan.slots) {
    if (slot.source_layer >= 0) {
      out += StrFormat(
          "slot %d: source layer %d, ratio %d, %d entries per page, kv+index %zu B, page %zu B\n",
          slot.slot_idx, slot.source_layer, slot.ratio, slot.kv_rows_per_page, slot.kv_index_bytes,
          slot.page_bytes);
    } else {
      out += StrFormat("slot %d: no kv source, page %zu B\n", slot.slot_idx, slot.page_bytes);
    }
    for (const SlotMember& member : slot.members) {
      const std::string who = member.kind == SlotMemberKind::kDraft
                                  ? "stage " + std::to_string(member.layer)
                                  : "layer " + std::to_string(member.layer);
      out += StrFormat("  %-6s %-13s %-9s offset %8zu  %5d x %4zu B = %8zu B\n",
                       plan.groups[member.group_idx].name.c_str(),
                       std::string(SlotMemberKindName(member.kind)).c_str(), who.c_str(),
                       member.offset_bytes, member.num_rows, member.row_bytes, member.size_bytes());
    }
  }
  out += StrFormat("bytes per block id: %zu (%.2f KiB)\n", plan.bytes_per_block_id,
                   plan.bytes_per_block_id / 1024.0);
  out +=
      StrFormat("KV bytes per token: %.2f amortised (%.2f payload) + %lld ids fixed per request\n",
                plan.KvBytesPerToken(), plan.PayloadBytesPerToken(),
                static_cast<long long>(FixedBlocksPerRequest(plan, DecodeStepTokens(plan))));
  out += "groups:\n";
  for (const CacheGroup& group : plan.groups) {
    out += StrFormat("  %-6s %s %s (slots %s)\n", group.name.c_str(),
                     group.kind == CacheGroupKind::kDraft ? "stages" : "layers",
                     JoinInts(group.layers).c_str(), JoinInts(group.slots).c_str());
  }
  return out;
}

OrderedJson CachePlanToJson(const CachePlan& plan) {
  const CacheRowFormats& rows = plan.rows;
  OrderedJson json;
  json["profile"] = KvProfileName(plan.options.profile);
  json["block_tokens"] = plan.options.block_tokens;
  json["sliding_window"] = plan.sliding_window;
  json["dspark"] = plan.options.dspark;
  json["num_speculative_tokens"] = plan.options.num_speculative_tokens;
  json["rows"] = {{"kv_row_bytes", rows.kv_row_bytes},
                  {"index_row_bytes", rows.index_row_bytes},
                  {"index_main_bytes", rows.index_main_bytes},
                  {"index_tail_bytes", rows.index_tail_bytes},
                  {"swa_row_bytes", rows.swa_row_bytes},
                  {"ring_row_bytes", rows.ring_row_bytes},
                  {"ring_rows", rows.ring_rows}};
  OrderedJson slots = OrderedJson::array();
  for (const CacheSlot& slot : plan.slots) {
    OrderedJson members = OrderedJson::array();
    for (const SlotMember& member : slot.members) {
      members.push_back({{"group", plan.groups[member.group_idx].name},
                         {"kind", SlotMemberKindName(member.kind)},
                         {"layer", member.layer},
                         {"offset_bytes", member.offset_bytes},
                         {"num_rows", member.num_rows},
                         {"row_bytes", member.row_bytes},
                         {"size_bytes", member.size_bytes()}});
    }
    OrderedJson slot_json;
    slot_json["slot"] = slot.slot_idx;
    slot_json["source_layer"] =
        slot.source_layer >= 0 ? OrderedJson(slot.source_layer) : OrderedJson(nullptr);
    slot_json["ratio"] = slot.ratio;
    slot_json["kv_rows_per_page"] = slot.kv_rows_per_page;
    slot_json["kv_index_bytes"] = slot.kv_index_bytes;
    slot_json["page_bytes"] = slot.page_bytes;
    slot_json["members"] = std::move(members);
    slots.push_back(std::move(slot_json));
  }
  json["slots"] = std::move(slots);
  json["bytes_per_block_id"] = plan.bytes_per_block_id;
  json["kv_bytes_per_token"] = plan.KvBytesPerToken();
  json["payload_bytes_per_token"] = plan.PayloadBytesPerToken();
  json["fixed_ids_per_request"] = FixedBlocksPerRequest(plan, DecodeStepTokens(plan));
  OrderedJson groups = OrderedJson::array();
  for (const CacheGroup& group : plan.groups) {
    groups.push_back({{"name", group.name},
                      {"kind", CacheGroupKindName(group.kind)},
                      {"layers", group.layers},
                      {"slots", group.slots}});
  }
  json["groups"] = std::move(groups);
  return json;
}

OrderedJson PoolSizingToJson(const PoolSizing& sizing) {
  OrderedJson json;
  json["kv_cache_bytes"] = sizing.kv_cache_bytes;
  json["bytes_per_block_id"] = sizing.bytes_per_block_id;
  json["num_block_ids"] = sizing.num_block_ids;
  json["used_bytes"] = sizing.used_bytes;
  json["max_context_tokens"] = sizing.max_context_tokens;
  return json;
}

}  // namespace dsv41

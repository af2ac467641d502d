#include "kv/kv_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "base/poison.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {

// The ue8m0 byte of a power of two in [2^-127, 2^127].
uint8_t E8m0FromPow2(float scale) {
  uint32_t bits;
  std::memcpy(&bits, &scale, 4);
  const uint32_t exponent = (bits >> 23) & 0xFF;
  return static_cast<uint8_t>(exponent == 0 ? 0 : exponent);  // 2^-127 is subnormal: byte 0
}

float MaxAbs(std::span<const float> x) {
  float m = 0.0f;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

void EncodeBf16Row(std::span<const float> values, std::byte* dst) {
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = Bf16FromF32(values[i]);
    std::memcpy(dst + 2 * i, &bits, 2);
  }
}

void DecodeBf16Row(const std::byte* src, std::span<float> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, 2);
    values[i] = F32FromBf16(bits);
  }
}

// e2m1 codes of x / scale, packed in pairs into codes[block_begin / 2 ...]; true when every value
// is exactly code × scale.
bool PackE2m1Block(std::span<const float> x, float scale, uint8_t* codes) {
  bool exact = true;
  for (size_t i = 0; i < x.size(); i += 2) {
    const uint8_t even = E2m1FromF32(x[i] / scale);
    const uint8_t odd = E2m1FromF32(x[i + 1] / scale);
    exact = exact && F32FromE2m1(even) * scale == x[i] && F32FromE2m1(odd) * scale == x[i + 1];
    codes[i / 2] = PackE2m1Pair(even, odd);
  }
  return exact;
}

}  // namespace

KvCacheLayout LayoutFromPlan(const CachePlan& plan, const ModelConfig& config) {
  KvCacheLayout layout;
  layout.profile = plan.options.profile;
  layout.block_tokens = plan.options.block_tokens;
  layout.head_dim = config.head_dim;
  layout.index_head_dim = config.index_head_dim;
  layout.num_groups = static_cast<int32_t>(plan.groups.size());
  layout.swa.resize(plan.num_layers);
  layout.sources.resize(plan.num_layers);
  layout.draft.resize(plan.num_draft_stages);
  for (const CacheSlot& slot : plan.slots) {
    for (const SlotMember& m : slot.members) {
      const KvRowPlace place{.slot = slot.slot_idx,
                             .group_idx = m.group_idx,
                             .offset_bytes = m.offset_bytes,
                             .row_bytes = m.row_bytes,
                             .rows_per_page = m.num_rows};
      switch (m.kind) {
        case SlotMemberKind::kSwa:
          layout.swa[m.layer] = place;
          break;
        case SlotMemberKind::kCompressedKv:
        case SlotMemberKind::kIndexK:
        case SlotMemberKind::kRing: {
          std::optional<KvSourcePlaces>& source = layout.sources[m.layer];
          if (!source) {
            source.emplace();
            source->ratio = slot.ratio;
          }
          (m.kind == SlotMemberKind::kCompressedKv ? source->kv
           : m.kind == SlotMemberKind::kIndexK     ? source->index
                                                   : source->ring) = place;
          break;
        }
        case SlotMemberKind::kDraft:
          layout.draft[m.layer] = place;
          break;
        case SlotMemberKind::kIndexTail:  // the seed's 2-byte regions: never read
          break;
      }
    }
  }
  return layout;
}

KvCacheStorage::KvCacheStorage(const CachePlan& plan, const ModelConfig& config,
                               uint32_t num_blocks)
    : layout_(std::make_unique<KvCacheLayout>(LayoutFromPlan(plan, config))) {
  view_.layout = layout_.get();
  view_.num_blocks = num_blocks;
  for (const CacheSlot& slot : plan.slots) {
    const size_t bytes = slot.page_bytes * num_blocks;
    // Mapped from the OS's zero pages, untouched until written; huge pages where the kernel
    // grants them, so filling a fresh cache faults once per 2 MiB instead of once per 4 KiB.
    Result<AnonymousMemory> memory =
        AnonymousMemory::Allocate(std::max<size_t>(bytes, 1), "KV cache slot");
    DSV41_CHECK(memory.ok(), "out of memory for %zu KV cache bytes of slot %d: %s", bytes,
                slot.slot_idx, memory.status().ToString().c_str());
    std::byte* buffer = memory->bytes().data();
    PoisonIfAsked(buffer, bytes);
    slots_.push_back(std::move(memory).value());
    view_.base.push_back(buffer);
    view_.page_bytes.push_back(slot.page_bytes);
  }
}

std::vector<std::vector<uint32_t>> ContiguousBlockTables(const CachePlan& plan,
                                                         int64_t blocks_per_group) {
  std::vector<std::vector<uint32_t>> tables(plan.groups.size());
  for (size_t g = 0; g < tables.size(); ++g) {
    const bool ring = static_cast<int32_t>(g) == plan.ring_group_idx;
    for (int64_t i = 0; i < (ring ? 1 : blocks_per_group); ++i) {
      tables[g].push_back(static_cast<uint32_t>(g * blocks_per_group + i));
    }
  }
  return tables;
}

Result<ContiguousKvCache> ContiguousKvCache::Create(const ModelConfig& config,
                                                    const LayerPlan& layer_plan,
                                                    int64_t max_positions, KvProfile profile,
                                                    int32_t block_tokens, int32_t num_requests) {
  CachePlanOptions options;
  options.profile = profile;
  options.block_tokens = block_tokens > 0 ? block_tokens : SmallestBlockTokens(config);
  DSV41_ASSIGN_OR_RETURN(CachePlan plan, PlanCache(config, layer_plan, options));
  ContiguousKvCache cache;
  const int64_t blocks_per_group =
      std::max<int64_t>(1, (max_positions + options.block_tokens - 1) / options.block_tokens);
  cache.plan_ = std::make_unique<CachePlan>(std::move(plan));
  const uint32_t ids_per_request =
      static_cast<uint32_t>(blocks_per_group * cache.plan_->groups.size());
  for (int32_t r = 0; r < num_requests; ++r) {
    cache.tables_.push_back(ContiguousBlockTables(*cache.plan_, blocks_per_group));
    for (std::vector<uint32_t>& table : cache.tables_.back()) {
      for (uint32_t& id : table) id += static_cast<uint32_t>(r) * ids_per_request;
    }
  }
  cache.storage_ = std::make_unique<KvCacheStorage>(*cache.plan_, config,
                                                    ids_per_request * std::max(num_requests, 1));
  return cache;
}

BatchRequest ContiguousKvCache::Request(int32_t first_row, int32_t num_tokens, int32_t start_pos,
                                        int32_t request_idx) const {
  return BatchRequest{.first_row = first_row,
                      .num_tokens = num_tokens,
                      .start_pos = start_pos,
                      .block_tables = tables_[request_idx]};
}

std::vector<float> ContiguousKvCache::SwaRow(int32_t layer, int32_t pos) const {
  const KvCacheLayout& layout = storage_->layout();
  const KvRowPlace& place = layout.swa[layer];
  std::vector<float> row(layout.head_dim);
  DecodeSwaRow(layout.profile, view().RowAt(place, tables_[0][place.group_idx], pos), row);
  return row;
}

std::vector<float> ContiguousKvCache::KvEntry(int32_t layer, int32_t entry_idx) const {
  const KvCacheLayout& layout = storage_->layout();
  const KvRowPlace& place = layout.sources[layer]->kv;
  std::vector<float> row(layout.head_dim);
  DecodeKvRow(layout.profile, view().RowAt(place, tables_[0][place.group_idx], entry_idx), row);
  return row;
}

std::vector<float> ContiguousKvCache::IndexKey(int32_t layer, int32_t entry_idx) const {
  const KvCacheLayout& layout = storage_->layout();
  const KvRowPlace& place = layout.sources[layer]->index;
  std::vector<float> row(layout.index_head_dim);
  DecodeIndexRow(view().RowAt(place, tables_[0][place.group_idx], entry_idx), row);
  return row;
}

void ContiguousKvCache::SetEntry(int32_t layer, int32_t entry_idx, std::span<const float> kv,
                                 std::span<const float> index_key) {
  const KvCacheLayout& layout = storage_->layout();
  const KvSourcePlaces& places = *layout.sources[layer];
  const std::span<const uint32_t> table = tables_[0][places.kv.group_idx];
  EncodeKvRow(layout.profile, kv, view().RowAt(places.kv, table, entry_idx));
  EncodeIndexRow(index_key, view().RowAt(places.index, table, entry_idx), places.index.row_bytes);
}

// The blocks request `r` touches in a step must be present: every SWA group's blocks of window
// positions max(0, start − W + 1) .. end − 1, the G_KV blocks of positions 0 .. end − 1 and the
// ring block (serving.md §3.6, §3.7).
Status CheckBlockTables(const KvCacheLayout& layout, uint32_t num_blocks, const BatchRequest& r,
                        int32_t window) {
  if (static_cast<int32_t>(r.block_tables.size()) != layout.num_groups) {
    return InvalidArgumentError("%zu block tables, the cache has %d groups", r.block_tables.size(),
                                layout.num_groups);
  }
  const int64_t block_tokens = layout.block_tokens;
  const int64_t end = int64_t{r.start_pos} + r.num_tokens;
  auto need = [&](const KvRowPlace& place, int64_t first_pos, int64_t last_pos) -> Status {
    const std::span<const uint32_t> table = r.block_tables[place.group_idx];
    for (int64_t b = first_pos / block_tokens; b <= last_pos / block_tokens; ++b) {
      const uint32_t id = BlockAt(table, b);
      if (id >= num_blocks) {
        return InvalidArgumentError("block table of group %d has no block %lld (id %u of %u)",
                                    place.group_idx, static_cast<long long>(b), id, num_blocks);
      }
    }
    return Status();
  };
  for (const KvRowPlace& swa : layout.swa) {
    DSV41_RETURN_IF_ERROR(need(swa, std::max<int64_t>(0, r.start_pos - window + 1), end - 1));
  }
  for (const std::optional<KvSourcePlaces>& source : layout.sources) {
    if (!source) continue;
    DSV41_RETURN_IF_ERROR(need(source->kv, 0, end - 1));
    if (source->ring.slot >= 0) DSV41_RETURN_IF_ERROR(need(source->ring, 0, 0));
  }
  return Status();
}

std::byte* KvCacheView::Row(const KvRowPlace& place, uint32_t block_id, int64_t row) const {
  DSV41_CHECK(block_id < num_blocks && place.slot >= 0 && row >= 0 && row < place.rows_per_page,
              "cache row %lld of block %u (of %u) in slot %d", static_cast<long long>(row),
              block_id, num_blocks, place.slot);
  return base[place.slot] + static_cast<size_t>(block_id) * page_bytes[place.slot] +
         place.offset_bytes + static_cast<size_t>(row) * place.row_bytes;
}

// Packed SWA: e4m3 codes, then one ue8m0 per 32. An fq8_b32 block of amax a was quantised with a
// power of two s >= a / 448; Pow2Ceil(a / 448) <= s keeps every value an e4m3 code times it.
void EncodeSwaRow(KvProfile profile, std::span<const float> values, std::byte* dst) {
  if (profile != KvProfile::kPacked) return EncodeBf16Row(values, dst);
  const size_t n = values.size();
  auto* codes = reinterpret_cast<uint8_t*>(dst);
  for (size_t b = 0; b < n / kFq8Block; ++b) {
    const std::span<const float> block = values.subspan(b * kFq8Block, kFq8Block);
    const float amax = MaxAbs(block);
    const float scale = amax > 0.0f ? Pow2Ceil(amax / kE4m3Max) : 1.0f;
    for (size_t i = 0; i < block.size(); ++i) {
      codes[b * kFq8Block + i] = E4m3FromF32(block[i] / scale);
      DSV41_DCHECK(F32FromE4m3(codes[b * kFq8Block + i]) * scale == block[i],
                   "SWA value %g is not fq8", static_cast<double>(block[i]));
    }
    codes[n + b] = E8m0FromPow2(scale);
  }
}

void DecodeSwaRow(KvProfile profile, const std::byte* src, std::span<float> values) {
  if (profile != KvProfile::kPacked) return DecodeBf16Row(src, values);
  const size_t n = values.size();
  const auto* codes = reinterpret_cast<const uint8_t*>(src);
  for (size_t i = 0; i < n; ++i) {
    values[i] = F32FromE4m3(codes[i]) * F32FromE8m0(codes[n + i / kFq8Block]);
  }
}

// Packed KV: e2m1 pairs, then one e4m3 scale per 16. The block's own scale e4m3(amax / 6) is tried
// first (it is the quantiser's whenever the block's largest code is 6); otherwise the e4m3 scales
// are searched from the largest down, so the stored value is always exact.
void EncodeKvRow(KvProfile profile, std::span<const float> values, std::byte* dst) {
  if (profile != KvProfile::kPacked) return EncodeBf16Row(values, dst);
  const size_t n = values.size();
  auto* bytes = reinterpret_cast<uint8_t*>(dst);
  for (size_t b = 0; b < n / kFq4B16Block; ++b) {
    const std::span<const float> block = values.subspan(b * kFq4B16Block, kFq4B16Block);
    uint8_t scale_code = E4m3FromF32(std::max(MaxAbs(block), 6.0f * 0x1p-9f) / 6.0f);
    bool exact = PackE2m1Block(block, F32FromE4m3(scale_code), bytes + b * kFq4B16Block / 2);
    for (int code = 0x7E; !exact && code > 0; --code) {
      scale_code = static_cast<uint8_t>(code);
      exact = PackE2m1Block(block, F32FromE4m3(scale_code), bytes + b * kFq4B16Block / 2);
    }
    DSV41_CHECK(exact, "compressed KV block %zu is not fq4_b16_e4m3", b);
    bytes[n / 2 + b] = scale_code;
  }
}

void DecodeKvRow(KvProfile profile, const std::byte* src, std::span<float> values) {
  if (profile != KvProfile::kPacked) return DecodeBf16Row(src, values);
  const size_t n = values.size();
  const auto* bytes = reinterpret_cast<const uint8_t*>(src);
  for (size_t i = 0; i < n; ++i) {
    values[i] = F32FromE2m1(E2m1CodeAt(bytes, static_cast<int64_t>(i))) *
                F32FromE4m3(bytes[n / 2 + i / kFq4B16Block]);
  }
}

// fq4_b32_pow2 quantised with a power of two s >= amax / 6; Pow2Ceil(amax / 6) <= s keeps every
// value an e2m1 code times it (an e2m1 magnitude times 2^k <= 6 is again one).
void EncodeIndexRow(std::span<const float> values, std::byte* dst, size_t row_bytes) {
  const size_t n = values.size();
  DSV41_CHECK(n / 2 + n / kFq4B32Block <= row_bytes, "index row of %zu values in %zu bytes", n,
              row_bytes);
  auto* bytes = reinterpret_cast<uint8_t*>(dst);
  std::fill(bytes, bytes + row_bytes, uint8_t{0});
  for (size_t b = 0; b < n / kFq4B32Block; ++b) {
    const std::span<const float> block = values.subspan(b * kFq4B32Block, kFq4B32Block);
    const float amax = MaxAbs(block);
    const float scale = amax > 0.0f ? Pow2Ceil(amax / 6.0f) : 1.0f;
    const bool exact = PackE2m1Block(block, scale, bytes + b * kFq4B32Block / 2);
    DSV41_CHECK(exact, "index key block %zu is not fq4_b32_pow2", b);
    bytes[n / 2 + b] = E8m0FromPow2(scale);
  }
}

void DecodeIndexRow(const std::byte* src, std::span<float> values) {
  const size_t n = values.size();
  const auto* bytes = reinterpret_cast<const uint8_t*>(src);
  for (size_t i = 0; i < n; ++i) {
    values[i] = F32FromE2m1(E2m1CodeAt(bytes, static_cast<int64_t>(i))) *
                F32FromE8m0(bytes[n / 2 + i / kFq4B32Block]);
  }
}

}  // namespace dsv41

#include "kv/cache_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/status.h"
#include "config/config.h"
#include "config/layer_plan.h"

namespace dsv41 {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A config with the fields the planner reads (model.md §1.2 names); the rest keep their defaults.
ModelConfig MakeConfig(int32_t head_dim, int32_t index_head_dim, int32_t sliding_window,
                       std::vector<int32_t> ratios, std::vector<int32_t> kv_sources,
                       int32_t num_stages, int64_t max_positions) {
  ModelConfig config;
  config.num_hidden_layers = static_cast<int32_t>(ratios.size());
  config.num_nextn_predict_layers = num_stages;
  config.head_dim = head_dim;
  config.index_head_dim = index_head_dim;
  config.sliding_window = sliding_window;
  config.compress_ratios = std::move(ratios);
  config.kv_source_layer_ids = kv_sources;
  config.index_source_layer_ids = std::move(kv_sources);
  config.max_position_embeddings = max_positions;
  return config;
}

// checkpoint.md §8.2 "tiny-v41": 10 layers, head_dim 64, index_head_dim 32, window 8.
ModelConfig TinyConfig() {
  return MakeConfig(64, 32, 8, {0, 0, 2, 2, 2, 2, 1, 1, 1, 1}, {2, 4, 6}, 3, 1024);
}

CachePlan Plan(const ModelConfig& config, KvProfile profile, bool dspark = false, int32_t spec = 0,
               int32_t block_tokens = 128) {
  CachePlanOptions options;
  options.block_tokens = block_tokens;
  options.profile = profile;
  options.dspark = dspark;
  options.num_speculative_tokens = spec;
  Result<CachePlan> plan = PlanCache(config, PlanLayers(config), options);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? std::move(plan).value() : CachePlan{};
}

std::vector<size_t> PageBytes(const CachePlan& plan) {
  std::vector<size_t> pages;
  for (const CacheSlot& slot : plan.slots) pages.push_back(slot.page_bytes);
  return pages;
}

const SlotMember* FindMember(const CacheSlot& slot, SlotMemberKind kind) {
  for (const SlotMember& member : slot.members) {
    if (member.kind == kind) return &member;
  }
  return nullptr;
}

Status PlanStatus(const ModelConfig& config, const CachePlanOptions& options) {
  return PlanCache(config, PlanLayers(config), options).status();
}

// serving.md §3.5 table, seed profile, B = 128.
TEST(CachePlanTest, SeedReleasePagesMatchServingSpec) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed);
  EXPECT_THAT(PageBytes(plan), ElementsAre(131072, 131072, 131072, 147712));
  EXPECT_EQ(plan.bytes_per_block_id, 540928u);
}

TEST(CachePlanTest, SeedReleaseSlotsFollowKvSources) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed);
  ASSERT_EQ(plan.num_slots(), 4);
  const int32_t sources[] = {2, 8, 14, 20};
  const int32_t ratios[] = {2, 2, 2, 1};
  const int32_t rows[] = {64, 64, 64, 128};
  const size_t kv_index[] = {73856, 73856, 73856, 147712};
  for (int32_t s = 0; s < 4; ++s) {
    SCOPED_TRACE(s);
    EXPECT_EQ(plan.slots[s].source_layer, sources[s]);
    EXPECT_EQ(plan.slots[s].ratio, ratios[s]);
    EXPECT_EQ(plan.slots[s].kv_rows_per_page, rows[s]);
    EXPECT_EQ(plan.slots[s].kv_index_bytes, kv_index[s]);
  }
}

// The released HF config.json as shipped, parsed by the model layer, gives the same plan.
TEST(CachePlanTest, ReleasedConfigJsonGivesSpecPages) {
  Result<Json> json =
      ReadJsonFile(std::string(DSV41_SOURCE_ROOT) + "/src/config/testdata/released_config.json");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  Result<ModelConfig> config = ParseModelConfig(*json);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const CachePlan plan = Plan(*config, KvProfile::kSeed);
  EXPECT_THAT(PageBytes(plan), ElementsAre(131072, 131072, 131072, 147712));
  EXPECT_EQ(plan.bytes_per_block_id, 540928u);
}

// serving.md §3.5 offsets: slots 0–2 KV 0, index 65,536, 2-byte region 73,728; slot 3 KV 0,
// index 131,072, 2-byte region 147,456. Sizes: 64 × 1024, 64 × 128, 64 × 2 (and × 128 rows).
TEST(CachePlanTest, SeedReleaseMemberOffsetsMatchServingSpec) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed);
  const size_t index_offset[] = {65536, 65536, 65536, 131072};
  const size_t tail_offset[] = {73728, 73728, 73728, 147456};
  for (int32_t s = 0; s < 4; ++s) {
    SCOPED_TRACE(s);
    const CacheSlot& slot = plan.slots[s];
    const SlotMember* kv = FindMember(slot, SlotMemberKind::kCompressedKv);
    const SlotMember* index = FindMember(slot, SlotMemberKind::kIndexK);
    const SlotMember* tail = FindMember(slot, SlotMemberKind::kIndexTail);
    ASSERT_NE(kv, nullptr);
    ASSERT_NE(index, nullptr);
    ASSERT_NE(tail, nullptr);
    EXPECT_EQ(kv->offset_bytes, 0u);
    EXPECT_EQ(kv->row_bytes, 1024u);
    EXPECT_EQ(index->offset_bytes, index_offset[s]);
    EXPECT_EQ(index->row_bytes, 128u);
    EXPECT_EQ(tail->offset_bytes, tail_offset[s]);
    EXPECT_EQ(tail->row_bytes, 2u);
    EXPECT_EQ(tail->end_bytes(), slot.kv_index_bytes);
  }
  EXPECT_EQ(plan.rows.index_row_bytes, 130u);
}

// Ring (32 × 4096 B) and SWA (128 × 1024 B) members alias at offset 0; the ratio-1 slot has no
// ring.
TEST(CachePlanTest, SeedReleaseAliasedMembersStartAtZero) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed, /*dspark=*/true);
  for (const CacheSlot& slot : plan.slots) {
    SCOPED_TRACE(slot.slot_idx);
    const SlotMember* ring = FindMember(slot, SlotMemberKind::kRing);
    if (slot.ratio > 1) {
      ASSERT_NE(ring, nullptr);
      EXPECT_EQ(ring->offset_bytes, 0u);
      EXPECT_EQ(ring->size_bytes(), 131072u);
    } else {
      EXPECT_EQ(ring, nullptr);
    }
    int32_t num_swa = 0;
    for (const SlotMember& member : slot.members) {
      if (member.kind != SlotMemberKind::kSwa && member.kind != SlotMemberKind::kDraft) continue;
      EXPECT_EQ(member.offset_bytes, 0u);
      EXPECT_EQ(member.size_bytes(), 131072u);
      if (member.kind == SlotMemberKind::kSwa) {
        EXPECT_EQ(member.layer % 4, slot.slot_idx);
        ++num_swa;
      }
    }
    EXPECT_EQ(num_swa, 10);  // layers s, s+4, …, s+36
  }
}

// serving.md §3.5: compact 131,072 × 3 + 139,776 = 532,992 (index rows 64 + 4 = 68 B:
// 65,536 + 64 × 68 = 69,888 < 131,072; 131,072 + 128 × 68 = 139,776).
TEST(CachePlanTest, CompactReleaseMatchesServingSpec) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kCompact);
  EXPECT_EQ(plan.rows.index_row_bytes, 68u);
  EXPECT_THAT(PageBytes(plan), ElementsAre(131072, 131072, 131072, 139776));
  EXPECT_EQ(plan.bytes_per_block_id, 532992u);
}

// serving.md §3.5: packed with an 8-row ring = 4 × 67,584 = 270,336. Rows: KV 256 + 32 = 288,
// index 68, SWA 512 + 16 = 528; SWA member 128 × 528 = 67,584; ring max(8, next_pow2(5 + 2)) = 8
// rows × 4096 = 32,768; KV+index 64 × 356 = 22,784 and 128 × 356 = 45,568.
TEST(CachePlanTest, PackedReleaseWithDsparkUsesEightRowRing) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kPacked, /*dspark=*/true, /*spec=*/5);
  EXPECT_EQ(plan.rows.kv_row_bytes, 288u);
  EXPECT_EQ(plan.rows.index_row_bytes, 68u);
  EXPECT_EQ(plan.rows.swa_row_bytes, 528u);
  EXPECT_EQ(plan.rows.ring_rows, 8);
  EXPECT_THAT(PageBytes(plan), ElementsAre(67584, 67584, 67584, 67584));
  EXPECT_EQ(plan.bytes_per_block_id, 270336u);
}

// Without speculation the packed ring is also 8 rows (max(8, next_pow2(2))).
TEST(CachePlanTest, PackedReleaseWithoutSpeculationUsesEightRowRing) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kPacked);
  EXPECT_EQ(plan.rows.ring_rows, 8);
  EXPECT_EQ(plan.bytes_per_block_id, 270336u);
}

// serving.md §3.5: packed 131,072 × 3 + 67,584 = 460,800 with a 32-row ring. The packed ring has
// next_pow2(spec + 2) = 32 rows for 15 ≤ spec ≤ 30 (then 32 × 4096 = 131,072 dominates slots 0–2).
TEST(CachePlanTest, PackedReleaseWithThirtyTwoRowRing) {
  for (int32_t spec : {15, 30}) {
    SCOPED_TRACE(spec);
    const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kPacked, /*dspark=*/true, spec);
    EXPECT_EQ(plan.rows.ring_rows, 32);
    EXPECT_THAT(PageBytes(plan), ElementsAre(131072, 131072, 131072, 67584));
    EXPECT_EQ(plan.bytes_per_block_id, 460800u);
  }
  // 14 + 2 = 16 rows: 65,536 < the SWA member, so the page stays 67,584.
  const CachePlan plan16 = Plan(ReleasedConfig(), KvProfile::kPacked, /*dspark=*/true, 14);
  EXPECT_EQ(plan16.rows.ring_rows, 16);
  EXPECT_EQ(plan16.bytes_per_block_id, 270336u);
}

// serving.md §3.3: 12 groups (G_KV, G_RING, 10 SWA) without DSpark, 13 with it.
TEST(CachePlanTest, ReleaseGroupCounts) {
  EXPECT_EQ(Plan(ReleasedConfig(), KvProfile::kSeed).groups.size(), 12u);
  EXPECT_EQ(Plan(ReleasedConfig(), KvProfile::kSeed, /*dspark=*/true).groups.size(), 13u);
  EXPECT_EQ(Plan(ReleasedConfig(), KvProfile::kPacked, /*dspark=*/true, 5).groups.size(), 13u);
}

// serving.md §3.3: group k = layers 4k..4k+3 in slots 0..3 (the transpose); DSpark stages 0–2 in
// slots 0–2; the ring only for the ratio-2 sources.
TEST(CachePlanTest, ReleaseGroupMembersAreTheTranspose) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed, /*dspark=*/true);
  ASSERT_EQ(plan.num_swa_groups(), 10);
  const CacheGroup& kv = plan.groups[plan.kv_group_idx];
  EXPECT_EQ(kv.name, "kv");
  EXPECT_THAT(kv.layers, ElementsAre(2, 8, 14, 20));
  EXPECT_THAT(kv.slots, ElementsAre(0, 1, 2, 3));
  const CacheGroup& ring = plan.groups[plan.ring_group_idx];
  EXPECT_THAT(ring.layers, ElementsAre(2, 8, 14));
  EXPECT_THAT(ring.slots, ElementsAre(0, 1, 2));
  for (int32_t k = 0; k < 10; ++k) {
    SCOPED_TRACE(k);
    const CacheGroup& swa = plan.groups[plan.swa_group_idx[k]];
    EXPECT_EQ(swa.name, "swa_" + std::to_string(k));
    EXPECT_THAT(swa.layers, ElementsAre(4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3));
    EXPECT_THAT(swa.slots, ElementsAre(0, 1, 2, 3));
  }
  ASSERT_EQ(plan.num_draft_groups(), 1);
  const CacheGroup& draft = plan.groups[plan.draft_group_idx[0]];
  EXPECT_EQ(draft.name, "draft_0");
  EXPECT_THAT(draft.layers, ElementsAre(0, 1, 2));
  EXPECT_THAT(draft.slots, ElementsAre(0, 1, 2));
  EXPECT_EQ(plan.SwaSlotOfLayer(37), 1);
  EXPECT_EQ(plan.SwaGroupOfLayer(37), 9);
}

// Amortised: 540,928 / 128 = 4,226 B per token. Payload: (3 × 73,856 + 147,712) / 128 = 2,885;
// packed: (3 × 22,784 + 45,568) / 128 = 890, the model card's figure (model.md §7.10).
TEST(CachePlanTest, BytesPerToken) {
  const CachePlan seed = Plan(ReleasedConfig(), KvProfile::kSeed);
  EXPECT_EQ(seed.KvBytesPerToken(), 4226.0);
  EXPECT_EQ(seed.PayloadBytesPerToken(), 2885.0);
  const CachePlan packed = Plan(ReleasedConfig(), KvProfile::kPacked);
  EXPECT_EQ(packed.PayloadBytesPerToken(), 890.0);
}

// serving.md §3.7 (release, DSpark on, seed): ceil(L/128) + 1 + 10·2 + 2 ids; 4K → 55 (28 MiB),
// 128K → 1,047 (540 MiB), 1M → 8,215 (4.14 GiB). Plain decode steps of one token.
TEST(CachePlanTest, PerRequestNeedMatchesServingSpecExamples) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed, /*dspark=*/true);
  const RequestBlockNeed need4k = PeakRequestBlockNeed(plan, 4096, 1);
  EXPECT_EQ(need4k.kv_ids, 32);
  EXPECT_EQ(need4k.ring_ids, 1);
  EXPECT_EQ(need4k.swa_ids_per_group, 2);
  EXPECT_EQ(need4k.num_swa_groups, 10);
  EXPECT_EQ(need4k.num_draft_groups, 1);
  EXPECT_EQ(need4k.total(), 55);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 131072, 1).total(), 1047);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 1048576, 1).total(), 8215);
  constexpr double kMiB = 1024.0 * 1024.0;
  EXPECT_EQ(static_cast<int64_t>(55 * plan.bytes_per_block_id / kMiB), 28);
  EXPECT_EQ(static_cast<int64_t>(1047 * plan.bytes_per_block_id / kMiB), 540);
  EXPECT_NEAR(8215 * plan.bytes_per_block_id / (kMiB * 1024.0), 4.14, 0.005);
}

// A 6-token verify step (spec 5) keeps positions [p − 126, p + 6], 133 positions: at the worst
// alignment (start at row 127) they touch 3 blocks, so each SWA group and G_DRAFT need 3 ids:
// 32 + 1 + 11 × 3 = 66 at 4K.
TEST(CachePlanTest, VerifyStepsNeedThreeIdsPerWindowGroup) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed, /*dspark=*/true, /*spec=*/5);
  EXPECT_EQ(DecodeStepTokens(plan), 6);
  // The n-gram drafter's verify steps are as long without the draft windows.
  EXPECT_EQ(DecodeStepTokens(Plan(ReleasedConfig(), KvProfile::kSeed, false, 5)), 6);
  EXPECT_EQ(DecodeStepTokens(Plan(ReleasedConfig(), KvProfile::kSeed, false, 0)), 1);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 4096, 6).total(), 66);
  EXPECT_EQ(FixedBlocksPerRequest(plan, 6), 34);
  EXPECT_EQ(FixedBlocksPerRequest(plan, 1), 23);  // 1 + 11 × 2
}

// serving.md §3.7 bounds a C-token chunk by ceil((C + W − 1)/B) + 1 ids per SWA group. The exact
// worst case is one less when (C + W − 1) mod B = 1: C = 2 keeps 129 positions, which at worst
// start at row 127 and end at row 127 of the next block (2 blocks); C = 3 keeps 130 (3 blocks).
TEST(CachePlanTest, ChunkWindowNeedIsTheExactWorstCase) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 1 << 20, 2).swa_ids_per_group, 2);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 1 << 20, 3).swa_ids_per_group, 3);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 1 << 20, 512).swa_ids_per_group, 6);  // 639 positions
}

// Short requests never hold more window blocks than they have positions: L = 100 fits in one block.
TEST(CachePlanTest, ShortRequestNeedsOneWindowBlock) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed);
  const RequestBlockNeed need = PeakRequestBlockNeed(plan, 100, 1);
  EXPECT_EQ(need.swa_ids_per_group, 1);
  EXPECT_EQ(need.total(), 1 + 1 + 10);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 0, 1).total(), 0);
}

// Reference: the peak over every step [s, e) with e − s ≤ C and e ≤ L of the blocks touched by
// the kept window [max(0, s − W + 1), e), counted block by block.
TEST(CachePlanTest, PeakWindowNeedMatchesExhaustiveSteps) {
  for (int32_t block = 1; block <= 6; ++block) {
    for (int32_t window = 1; window <= 9; ++window) {
      ModelConfig config = MakeConfig(32, 32, window, {0, 0}, {}, 0, 64);
      const CachePlan plan = Plan(config, KvProfile::kSeed, false, 0, block);
      for (int32_t step = 1; step <= 7; ++step) {
        for (int64_t length = 0; length <= 30; ++length) {
          int64_t expected = 0;
          for (int64_t s = 0; s < length; ++s) {
            for (int64_t e = s + 1; e <= std::min<int64_t>(length, s + step); ++e) {
              std::vector<bool> touched(length / block + 1, false);
              for (int64_t p = std::max<int64_t>(0, s - window + 1); p < e; ++p) {
                touched[p / block] = true;
              }
              expected =
                  std::max<int64_t>(expected, std::count(touched.begin(), touched.end(), true));
            }
          }
          const RequestBlockNeed need = PeakRequestBlockNeed(plan, length, step);
          ASSERT_EQ(need.swa_ids_per_group, expected)
              << "B=" << block << " W=" << window << " C=" << step << " L=" << length;
        }
      }
    }
  }
}

TEST(CachePlanTest, MaxBlocksTouchedMatchesExhaustiveStarts) {
  for (int32_t block = 1; block <= 8; ++block) {
    for (int64_t span = 0; span <= 20; ++span) {
      for (int64_t max_start = 0; max_start <= 20; ++max_start) {
        int64_t expected = 0;
        for (int64_t a = 0; a <= max_start && span > 0; ++a) {
          expected = std::max(expected, (a + span - 1) / block - a / block + 1);
        }
        ASSERT_EQ(MaxBlocksTouched(span, max_start, block), expected)
            << "B=" << block << " span=" << span << " max_start=" << max_start;
      }
    }
  }
}

// serving.md §3.6: entry j of a ratio-r source is completed by token j·r + r − 1 and lives in
// block (j·r) div B, row j mod (B/r): the block of its completing token, one row per entry.
TEST(CachePlanTest, KvEntryAddressesFollowCompletingTokens) {
  for (int32_t ratio : {1, 2}) {
    for (int32_t block : {2, 4, 8, 128}) {
      const int32_t rows_per_page = block / ratio;
      std::vector<BlockRow> seen;
      for (int64_t pos = 0; pos < 3 * block; ++pos) {
        const std::optional<int64_t> entry = EntryCompletedAt(pos, ratio);
        ASSERT_EQ(entry.has_value(), (pos + 1) % ratio == 0) << pos;
        if (!entry) continue;
        const BlockRow address = KvEntryAddress(*entry, ratio, block);
        EXPECT_EQ(address.block_idx, pos / block) << "pos " << pos;
        EXPECT_EQ(address.row, *entry % rows_per_page);
        EXPECT_LT(address.row, rows_per_page);
        EXPECT_EQ(std::count(seen.begin(), seen.end(), address), 0);
        seen.push_back(address);
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), 3 * rows_per_page);
    }
  }
  EXPECT_EQ(KvEntryAddress(63, 2, 128), (BlockRow{0, 63}));
  EXPECT_EQ(KvEntryAddress(64, 2, 128), (BlockRow{1, 0}));
  EXPECT_EQ(EntryCompletedAt(0, 2), std::nullopt);
  EXPECT_EQ(EntryCompletedAt(1, 2), 0);
  EXPECT_EQ(EntryCompletedAt(5, 1), 5);
}

TEST(CachePlanTest, SwaAndRingAddressing) {
  EXPECT_EQ(SwaAddress(0, 128), (BlockRow{0, 0}));
  EXPECT_EQ(SwaAddress(127, 128), (BlockRow{0, 127}));
  EXPECT_EQ(SwaAddress(300, 128), (BlockRow{2, 44}));
  EXPECT_EQ(RingRow(33, 32), 1);
  EXPECT_EQ(RingRow(31, 32), 31);
  EXPECT_EQ(FlatRowIndex(5, 32, 1), 161);
  EXPECT_EQ(FlatRowIndex(4000000000u, 128, 7), 512000000007);
}

// checkpoint.md §8.2 tiny-v41, seed profile, B = 16. Rows: KV 2 × 64 = 128, index 32 + 2 = 34,
// SWA 128, ring 32 × (2 × 64 × 4 = 512) = 16,384.
// Slots 0, 1 (layers 2, 4, ratio 2, 8 entries): KV 8 × 128 = 1,024 at 0, index 8 × 32 = 256 at
// 1,024, 2-byte region 8 × 2 = 16 at 1,280 (KV+index 1,296); SWA 16 × 128 = 2,048; ring 16,384
// → page 16,384. Slot 2 (layer 6, ratio 1, 16 entries): KV 2,048, index 512 at 2,048, 2-byte
// region 32 at 2,560 → 2,592 > SWA 2,048 → page 2,592. Total 35,360.
// SWA groups ceil(10 / 3) = 4: {0,1,2}, {3,4,5}, {6,7,8}, {9} (slot 0).
TEST(CachePlanTest, TinyFixtureSeedPages) {
  const CachePlan plan = Plan(TinyConfig(), KvProfile::kSeed, false, 0, 16);
  EXPECT_THAT(PageBytes(plan), ElementsAre(16384, 16384, 2592));
  EXPECT_EQ(plan.bytes_per_block_id, 35360u);
  EXPECT_EQ(FindMember(plan.slots[0], SlotMemberKind::kIndexK)->offset_bytes, 1024u);
  EXPECT_EQ(FindMember(plan.slots[0], SlotMemberKind::kIndexTail)->offset_bytes, 1280u);
  EXPECT_EQ(FindMember(plan.slots[2], SlotMemberKind::kIndexK)->offset_bytes, 2048u);
  EXPECT_EQ(FindMember(plan.slots[2], SlotMemberKind::kIndexTail)->offset_bytes, 2560u);
  EXPECT_EQ(plan.slots[0].kv_index_bytes, 1296u);
  ASSERT_EQ(plan.groups.size(), 6u);  // kv, ring, 4 SWA
  EXPECT_THAT(plan.groups[plan.swa_group_idx[0]].layers, ElementsAre(0, 1, 2));
  EXPECT_THAT(plan.groups[plan.swa_group_idx[3]].layers, ElementsAre(9));
  EXPECT_THAT(plan.groups[plan.swa_group_idx[3]].slots, ElementsAre(0));
  EXPECT_THAT(plan.groups[plan.ring_group_idx].layers, ElementsAre(2, 4));
}

// tiny-v41 packed, B = 16, DSpark spec 5: KV 32 + 4 = 36, index 16 + 1 = 17, SWA 64 + 2 = 66,
// ring 8 × 512 = 4,096. Slots 0, 1: KV+index 8 × 53 = 424, SWA 16 × 66 = 1,056, ring 4,096 →
// 4,096. Slot 2: 16 × 53 = 848 < 1,056 → 1,056. Total 9,248; 7 groups with G_DRAFT.
TEST(CachePlanTest, TinyFixturePackedPages) {
  const CachePlan plan = Plan(TinyConfig(), KvProfile::kPacked, true, 5, 16);
  EXPECT_THAT(PageBytes(plan), ElementsAre(4096, 4096, 1056));
  EXPECT_EQ(plan.bytes_per_block_id, 9248u);
  EXPECT_EQ(plan.groups.size(), 7u);
  EXPECT_THAT(plan.groups[plan.draft_group_idx[0]].slots, ElementsAre(0, 1, 2));
}

// Without kv sources there is one slot holding every layer's SWA rows: 16 × 2 × 64 = 2,048 B.
TEST(CachePlanTest, NoKvSourcesUsesOneSlot) {
  const ModelConfig config = MakeConfig(64, 32, 8, {0, 0, 0, 0, 0}, {}, 0, 1024);
  const CachePlan plan = Plan(config, KvProfile::kSeed, false, 0, 16);
  ASSERT_EQ(plan.num_slots(), 1);
  EXPECT_EQ(plan.slots[0].source_layer, -1);
  EXPECT_EQ(plan.groups.size(), 5u);
  EXPECT_EQ(plan.kv_group_idx, -1);
  EXPECT_EQ(plan.ring_group_idx, -1);
  EXPECT_EQ(plan.bytes_per_block_id, 2048u);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 1000, 1).total(), 5 * 2);
}

// Every ratio pattern of up to 6 layers (kv sources = first layer of each run of equal ratio > 0,
// model.md §1.6's default), every profile, B ∈ {2, 4, 8}, DSpark on and off: one slot per source
// (or one), each layer's SWA rows in exactly one slot, members of one group disjoint, pages = max
// member end, bytes per block id = Σ pages.
TEST(CachePlanTest, LayoutInvariantsHoldForSmallConfigs) {
  for (int32_t num_layers = 1; num_layers <= 6; ++num_layers) {
    int32_t num_patterns = 1;
    for (int32_t l = 0; l < num_layers; ++l) num_patterns *= 3;
    for (int32_t code = 0; code < num_patterns; ++code) {
      std::vector<int32_t> ratios;
      std::vector<int32_t> sources;
      for (int32_t l = 0, c = code; l < num_layers; ++l, c /= 3) {
        ratios.push_back(c % 3);
        if (ratios[l] > 0 && (l == 0 || ratios[l - 1] != ratios[l])) sources.push_back(l);
      }
      const ModelConfig config = MakeConfig(64, 32, 5, ratios, sources, 2, 256);
      for (KvProfile profile : {KvProfile::kSeed, KvProfile::kCompact, KvProfile::kPacked}) {
        for (int32_t block : {2, 4, 8}) {
          for (bool dspark : {false, true}) {
            const CachePlan plan = Plan(config, profile, dspark, dspark ? 3 : 0, block);
            const int32_t num_slots = std::max<int32_t>(1, sources.size());
            ASSERT_EQ(plan.num_slots(), num_slots) << "pattern " << code;
            const bool has_ring = std::count(ratios.begin(), ratios.end(), 2) > 0;
            const size_t num_groups = (sources.empty() ? 0 : 1) + (has_ring ? 1 : 0) +
                                      (num_layers + num_slots - 1) / num_slots +
                                      (dspark ? (2 + num_slots - 1) / num_slots : 0);
            EXPECT_EQ(plan.groups.size(), num_groups) << "pattern " << code;
            std::vector<int32_t> swa_count(num_layers, 0);
            size_t total = 0;
            for (const CacheSlot& slot : plan.slots) {
              size_t max_end = 0;
              for (size_t i = 0; i < slot.members.size(); ++i) {
                const SlotMember& a = slot.members[i];
                max_end = std::max(max_end, a.end_bytes());
                if (a.kind == SlotMemberKind::kSwa) ++swa_count[a.layer];
                for (size_t j = i + 1; j < slot.members.size(); ++j) {
                  const SlotMember& b = slot.members[j];
                  if (a.group_idx != b.group_idx) continue;
                  EXPECT_TRUE(a.end_bytes() <= b.offset_bytes || b.end_bytes() <= a.offset_bytes)
                      << "pattern " << code << " slot " << slot.slot_idx;
                }
              }
              EXPECT_EQ(slot.page_bytes, max_end);
              total += slot.page_bytes;
            }
            EXPECT_EQ(plan.bytes_per_block_id, total);
            EXPECT_THAT(swa_count, ::testing::Each(1)) << "pattern " << code;
          }
        }
      }
    }
  }
}

TEST(CachePlanTest, RejectsBlockSizeNotMultipleOfRatio) {
  CachePlanOptions options;
  options.block_tokens = 127;
  const Status status = PlanStatus(ReleasedConfig(), options);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("block_tokens 127"));
  EXPECT_THAT(status.message(), HasSubstr("compress_ratios[2] = 2"));
  options.block_tokens = 0;
  EXPECT_THAT(PlanStatus(ReleasedConfig(), options).message(), HasSubstr("block_tokens 0"));
  options.block_tokens = 2;  // a multiple of 2 and 1
  EXPECT_TRUE(PlanStatus(ReleasedConfig(), options).ok());
}

// serving.md §3.6: ring_rows ≥ spec + 2, so the 32-row seed ring takes at most 30.
TEST(CachePlanTest, RejectsTooManySpeculativeTokensForRing) {
  CachePlanOptions options;
  options.dspark = true;
  options.num_speculative_tokens = 30;
  EXPECT_TRUE(PlanStatus(ReleasedConfig(), options).ok());
  options.num_speculative_tokens = 31;
  const Status status = PlanStatus(ReleasedConfig(), options);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("num_speculative_tokens 31"));
  EXPECT_THAT(status.message(), HasSubstr("32"));
  options.profile = KvProfile::kCompact;
  EXPECT_FALSE(PlanStatus(ReleasedConfig(), options).ok());
  options.profile = KvProfile::kPacked;  // sizes its ring from spec
  EXPECT_TRUE(PlanStatus(ReleasedConfig(), options).ok());
  options.num_speculative_tokens = -1;
  EXPECT_FALSE(PlanStatus(ReleasedConfig(), options).ok());
}

// Without a ratio-2 source there is no ring, so speculation is not limited by it.
TEST(CachePlanTest, NoRingWithoutRatioTwoSources) {
  const ModelConfig config = MakeConfig(64, 32, 8, {0, 1, 1, 1}, {1}, 1, 1024);
  const CachePlan plan = Plan(config, KvProfile::kSeed, true, 100, 16);
  EXPECT_EQ(plan.ring_group_idx, -1);
  EXPECT_EQ(plan.rows.ring_rows, 0);
  EXPECT_EQ(plan.groups.size(), 1u + 4u + 1u);  // kv, 4 SWA, draft
}

// Two slots, three DSpark stages: stage j in slot j mod 2 and group j div 2, so no block id
// addresses two stages' pages in one slot (serving.md §3.3's single G_DRAFT assumes stages ≤
// slots).
TEST(CachePlanTest, MoreStagesThanSlotsSplitDraftGroups) {
  const ModelConfig config = MakeConfig(64, 32, 8, {0, 2, 2, 1}, {1, 3}, 3, 1024);
  const CachePlan plan = Plan(config, KvProfile::kSeed, true, 0, 16);
  ASSERT_EQ(plan.num_draft_groups(), 2);
  const CacheGroup& draft0 = plan.groups[plan.draft_group_idx[0]];
  const CacheGroup& draft1 = plan.groups[plan.draft_group_idx[1]];
  EXPECT_EQ(draft0.name, "draft_0");
  EXPECT_THAT(draft0.layers, ElementsAre(0, 1));
  EXPECT_THAT(draft0.slots, ElementsAre(0, 1));
  EXPECT_EQ(draft1.name, "draft_1");
  EXPECT_THAT(draft1.layers, ElementsAre(2));
  EXPECT_THAT(draft1.slots, ElementsAre(0));
  // kv, ring, 2 SWA groups, 2 draft groups; at L = 1000: 63 + 1 + 4 × 2 ids.
  EXPECT_EQ(plan.groups.size(), 6u);
  EXPECT_EQ(PeakRequestBlockNeed(plan, 1000, 1).total(), 63 + 1 + 4 * 2);
}

TEST(CachePlanTest, RejectsDsparkWithoutStages) {
  const ModelConfig config = MakeConfig(64, 32, 8, {0, 2, 2}, {1}, 0, 1024);
  CachePlanOptions options;
  options.dspark = true;
  const Status status = PlanStatus(config, options);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("num_nextn_predict_layers"));
}

TEST(CachePlanTest, RejectsLayerPlanThatDisagreesWithConfig) {
  const ModelConfig config = ReleasedConfig();
  LayerPlan layer_plan = PlanLayers(config);
  layer_plan.layers.pop_back();
  EXPECT_FALSE(PlanCache(config, layer_plan, CachePlanOptions{}).ok());
  layer_plan = PlanLayers(config);
  layer_plan.layers[8].is_kv_source = false;
  const Status status = PlanCache(config, layer_plan, CachePlanOptions{}).status();
  EXPECT_THAT(status.message(), HasSubstr("kv_source_layer_ids"));
}

TEST(CachePlanTest, PackedRejectsWidthsItCannotPack) {
  ModelConfig config = TinyConfig();
  config.head_dim = 48;
  CachePlanOptions options;
  options.block_tokens = 16;
  options.profile = KvProfile::kPacked;
  EXPECT_THAT(PlanStatus(config, options).message(), HasSubstr("head_dim 48"));
  options.profile = KvProfile::kSeed;
  EXPECT_TRUE(PlanStatus(config, options).ok());
}

// serving.md §3.8: N = floor(budget / bytes_per_block_id). With DSpark and 1-token decode the
// need is ceil(L/128) + 23, so 1,047 ids hold 131,072 tokens and not one more.
TEST(CachePlanTest, SizePoolFindsLongestFittingRequest) {
  const ModelConfig config = ReleasedConfig();
  const CachePlan plan = Plan(config, KvProfile::kSeed, /*dspark=*/true);
  const PoolSizing sizing = SizePool(plan, 1047ull * 540928 + 540927, config);
  EXPECT_EQ(sizing.num_block_ids, 1047u);
  EXPECT_EQ(sizing.used_bytes, 1047ull * 540928);
  EXPECT_EQ(sizing.max_context_tokens, 131072);

  const PoolSizing huge = SizePool(plan, 1ull << 40, config);  // 1 TiB: 2,032,672 ids
  EXPECT_EQ(huge.num_block_ids, (1ull << 40) / 540928);
  EXPECT_EQ(huge.max_context_tokens, 1048576);  // capped at max_position_embeddings

  EXPECT_EQ(SizePool(plan, 540927, config).max_context_tokens, 0);
  // 13 ids: 1 KV + 1 ring + 11 window groups × 1 → positions [0, 128).
  EXPECT_EQ(SizePool(plan, 13ull * 540928, config).max_context_tokens, 128);
}

TEST(CachePlanTest, ProfileNamesRoundTrip) {
  for (KvProfile profile : {KvProfile::kSeed, KvProfile::kCompact, KvProfile::kPacked}) {
    Result<KvProfile> parsed = ParseKvProfile(KvProfileName(profile));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, profile);
  }
  EXPECT_THAT(ParseKvProfile("fp8").status().message(), HasSubstr("'fp8'"));
}

TEST(CachePlanTest, JsonAndDescriptionCarryThePlan) {
  const CachePlan plan = Plan(ReleasedConfig(), KvProfile::kSeed, /*dspark=*/true);
  const OrderedJson json = CachePlanToJson(plan);
  EXPECT_EQ(json["bytes_per_block_id"], 540928);
  ASSERT_EQ(json["slots"].size(), 4u);
  EXPECT_EQ(json["slots"][3]["page_bytes"], 147712);
  EXPECT_EQ(json["slots"][3]["source_layer"], 20);
  EXPECT_EQ(json["slots"][0]["members"][1]["offset_bytes"], 65536);
  EXPECT_EQ(json["groups"].size(), 13u);
  EXPECT_EQ(json["groups"][12]["name"], "draft_0");
  const std::string text = DescribeCachePlan(plan);
  EXPECT_THAT(text, HasSubstr("bytes per block id: 540928 (528.25 KiB)"));
  EXPECT_THAT(
      text,
      HasSubstr("slot 3: source layer 20, ratio 1, 128 entries per page, kv+index 147712 B, page "
                "147712 B"));
  EXPECT_THAT(text, HasSubstr("swa_9  layers 36 37 38 39 (slots 0 1 2 3)"));
}

}  // namespace
}  // namespace dsv41

#include "kernels/index_score_tile.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/indexer_topk.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {

// One index-key row in kv's format: dim / 2 bytes of packed E2M1 codes, then dim / 32 E8M0 bytes.
std::vector<std::byte> KeyRow(const std::vector<uint8_t>& codes,
                              const std::vector<uint8_t>& scales) {
  std::vector<std::byte> row(codes.size() / 2 + scales.size());
  for (size_t i = 0; i < codes.size(); i += 2) {
    row[i / 2] = static_cast<std::byte>(PackE2m1Pair(codes[i], codes[i + 1]));
  }
  for (size_t b = 0; b < scales.size(); ++b) {
    row[codes.size() / 2 + b] = static_cast<std::byte>(scales[b]);
  }
  return row;
}

// The reference's fp32 key values of a row.
std::vector<float> KeyValues(const std::vector<uint8_t>& codes,
                             const std::vector<uint8_t>& scales) {
  std::vector<float> values(codes.size());
  for (size_t d = 0; d < codes.size(); ++d) {
    values[d] = F32FromE2m1(codes[d]) * F32FromE8m0(scales[d / kIndexKeyBlock]);
  }
  return values;
}

bool SameScore(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

struct TileCase {
  size_t heads;
  size_t dim;
  size_t count;
  int key_scale_lo;  // E8M0 bytes drawn from [lo, hi]
  int key_scale_hi;
  bool fq4_query;         // false: arbitrary bf16 query values (heads the fast path must refuse)
  int weight_exp_spread;  // head weights 2^[−spread, spread]
};

// Scores a random case through the tile kernel on every target and compares the bits with
// IndexerScoresRef over the same keys.
void CheckCase(const TileCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> code(0, 15);
  std::uniform_int_distribution<int> key_scale(c.key_scale_lo, c.key_scale_hi);
  std::uniform_int_distribution<int> q_exp(-12, 12);
  std::uniform_int_distribution<int> w_exp(-c.weight_exp_spread, c.weight_exp_spread);
  std::vector<float> q(c.heads * c.dim);
  for (size_t b = 0; b < q.size() / kIndexKeyBlock; ++b) {
    const int e = q_exp(rng);  // the blocks of one query lie binades apart
    for (size_t d = 0; d < kIndexKeyBlock; ++d) {
      q[b * kIndexKeyBlock + d] = Bf16Round(std::ldexp(mant(rng), e + (c.fq4_query ? 0 : d % 19)));
    }
  }
  if (c.fq4_query) FakeQuantFq4B32Pow2(q);
  std::vector<float> w(c.heads);
  for (float& v : w) v = Bf16Round(std::ldexp(mant(rng), w_exp(rng)));
  std::vector<std::vector<std::byte>> rows;
  std::vector<float> keys;
  for (size_t e = 0; e < c.count; ++e) {
    std::vector<uint8_t> codes(c.dim), scales(c.dim / kIndexKeyBlock);
    for (uint8_t& v : codes) v = static_cast<uint8_t>(code(rng));
    for (uint8_t& v : scales) v = static_cast<uint8_t>(key_scale(rng));
    rows.push_back(KeyRow(codes, scales));
    const std::vector<float> values = KeyValues(codes, scales);
    keys.insert(keys.end(), values.begin(), values.end());
  }
  std::vector<float> want(c.count);
  IndexerScoresRef(q, w, keys, want);

  std::vector<const std::byte*> row_ptrs;
  for (const auto& row : rows) row_ptrs.push_back(row.data());
  auto tile = std::make_unique<IndexKeyTile>();
  std::vector<uint8_t> head_exact(c.heads);
  IndexerQueryHeadsExact(q, c.heads, head_exact);
  if (c.fq4_query) {
    for (uint8_t ok : head_exact) ASSERT_EQ(ok, 1) << "an fq4 query head takes the tiled path";
  }
  std::vector<float> scratch(IndexerScoresTileScratch(c.heads, c.dim));
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    std::vector<float> got(c.count, -7.0f);
    DecodeIndexKeyTile(row_ptrs, c.dim, *tile);
    IndexerScoresTile(q, w, head_exact, *tile, got, scratch);
    for (size_t e = 0; e < c.count; ++e) {
      ASSERT_TRUE(SameScore(got[e], want[e]))
          << hwy::TargetName(target) << " entry " << e << ": " << got[e] << " vs " << want[e];
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// fq4 queries against keys whose scales spread over ~100..140 (the released range), every head
// count past the 4-head groups, widths of 1 to 4 blocks, full and partial tiles.
TEST(IndexerScoresTileTest, EqualsTheReferenceOnFq4QueriesAndKeys) {
  uint32_t seed = 1;
  for (size_t heads : {1u, 2u, 3u, 4u, 5u, 7u, 8u, 9u, 64u}) {
    for (size_t dim : {32u, 64u, 128u}) {
      for (size_t count : {1u, 7u, 16u}) {
        SCOPED_TRACE("heads " + std::to_string(heads) + " dim " + std::to_string(dim) + " count " +
                     std::to_string(count));
        CheckCase(TileCase{heads, dim, count, 100, 140, true, 3}, seed++);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The exact fallbacks: block scales far apart in one key (the double block sum would round),
// head weights 2^±60 apart (the double head sum would round), query heads that are not fq4
// values, and scales whose fp32 keys overflow or are NaN (E8M0 253..255).
TEST(IndexerScoresTileTest, FallsBackToTheExactAccumulatorWhereDoubleWouldRound) {
  uint32_t seed = 100;
  for (const TileCase& c :
       {TileCase{4, 128, 16, 1, 250, true, 3}, TileCase{9, 64, 16, 120, 130, true, 60},
        TileCase{5, 64, 16, 120, 130, false, 3}, TileCase{4, 64, 16, 240, 255, true, 3}}) {
    for (int rep = 0; rep < 4; ++rep) {
      SCOPED_TRACE("heads " + std::to_string(c.heads) + " scales " +
                   std::to_string(c.key_scale_lo) + ".." + std::to_string(c.key_scale_hi) +
                   " fq4 " + std::to_string(c.fq4_query) + " w spread " +
                   std::to_string(c.weight_exp_spread));
      CheckCase(c, seed++);
      if (HasFatalFailure()) return;
    }
  }
}

// Scores one query against one key row through the tile kernel (every target must agree) and
// returns them beside the reference's.
std::pair<float, float> ScoreOne(const std::vector<float>& q, const std::vector<float>& w,
                                 const std::vector<uint8_t>& codes,
                                 const std::vector<uint8_t>& scales) {
  const std::vector<std::byte> row = KeyRow(codes, scales);
  const std::byte* rows[1] = {row.data()};
  auto tile = std::make_unique<IndexKeyTile>();
  DecodeIndexKeyTile(rows, codes.size(), *tile);
  std::vector<uint8_t> head_exact(w.size());
  IndexerQueryHeadsExact(q, w.size(), head_exact);
  std::vector<float> scratch(IndexerScoresTileScratch(w.size(), codes.size()));
  std::vector<float> want(1), got(1);
  IndexerScoresRef(q, w, KeyValues(codes, scales), want);
  IndexerScoresTile(q, w, head_exact, *tile, got, scratch);
  return {got[0], want[0]};
}

// Built so that a double sum would round where the exact one does not: four block terms 1, 2^−8,
// 2^−24 and 2^−60 (one value per block) sum to just above an fp32 tie that lies on a bf16 tie,
// so dropping the 2^−60 term turns the score from 1 + 2^−7 into 1. Only the exponent-spread
// check keeps it exact.
TEST(IndexerScoresTileTest, BlockTermsTooFarApartTakeTheExactDot) {
  std::vector<float> q(128, 0.0f);
  std::vector<uint8_t> codes(128, 0), scales = {127, 119, 103, 67};  // 2^0, 2^−8, 2^−24, 2^−60
  for (size_t b = 0; b < 4; ++b) {
    q[b * 32] = 1.0f;
    codes[b * 32] = 2;  // E2M1 1.0
  }
  const auto [got, want] = ScoreOne(q, {1.0f}, codes, scales);
  EXPECT_EQ(want, 1.0f + 0x1p-7f);
  EXPECT_EQ(got, want);
}

// The same in the head sum: four heads whose terms are 1, 2^−8, 2^−24 and 2^−60.
TEST(IndexerScoresTileTest, HeadTermsTooFarApartTakeTheExactSum) {
  std::vector<float> q(4 * 32, 0.0f);
  for (size_t h = 0; h < 4; ++h) q[h * 32] = 1.0f;
  std::vector<uint8_t> codes(32, 0), scales = {127};
  codes[0] = 2;
  const auto [got, want] = ScoreOne(q, {1.0f, 0x1p-8f, 0x1p-24f, 0x1p-60f}, codes, scales);
  EXPECT_EQ(want, 1.0f + 0x1p-7f);
  EXPECT_EQ(got, want);
}

// Every E2M1 code at every element position of every lane decodes to F32FromE2m1 (signed zero
// included), the lanes past the rows to +0, on every target.
TEST(IndexKeyTileTest, DecodesEveryCodeAtEveryPosition) {
  const size_t dim = 64;
  std::vector<std::vector<std::byte>> rows;
  std::vector<std::vector<uint8_t>> codes_of;
  for (size_t l = 0; l < 11; ++l) {
    std::vector<uint8_t> codes(dim);
    for (size_t d = 0; d < dim; ++d) codes[d] = static_cast<uint8_t>((d + 3 * l) % 16);
    rows.push_back(KeyRow(codes, {static_cast<uint8_t>(100 + l), static_cast<uint8_t>(140 - l)}));
    codes_of.push_back(codes);
  }
  std::vector<const std::byte*> row_ptrs;
  for (const auto& row : rows) row_ptrs.push_back(row.data());
  auto tile = std::make_unique<IndexKeyTile>();
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    DecodeIndexKeyTile(row_ptrs, dim, *tile);
    for (size_t l = 0; l < kIndexKeyTileEntries; ++l) {
      for (size_t d = 0; d < dim; ++d) {
        const float want = l < rows.size() ? F32FromE2m1(codes_of[l][d]) : 0.0f;
        ASSERT_EQ(std::bit_cast<uint32_t>(tile->values[d * kIndexKeyTileEntries + l]),
                  std::bit_cast<uint32_t>(want))
            << hwy::TargetName(target) << " lane " << l << " element " << d;
      }
      if (l < rows.size()) {
        EXPECT_EQ(tile->exponents[l], static_cast<int32_t>(100 + l) - 127);
        EXPECT_EQ(tile->scales[kIndexKeyTileEntries + l],
                  std::ldexp(1.0, 13 - static_cast<int>(l)));
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// A query that is not fq4 (a block spanning more than 14 binades) is refused head by head.
TEST(IndexerScoresTileTest, QueryCheckRefusesWideBlocks) {
  std::vector<float> q(2 * 32, 0.0f);
  q[0] = 1.0f;
  q[1] = std::ldexp(1.0f, -14);  // head 0 spans exactly 14: taken
  q[32] = 1.0f;
  q[33] = std::ldexp(1.5f, -14);  // head 1's lowest bit is 2^−15: refused
  std::vector<uint8_t> exact(2);
  IndexerQueryHeadsExact(q, 2, exact);
  EXPECT_EQ(exact, (std::vector<uint8_t>{1, 0}));
}

}  // namespace
}  // namespace dsv41

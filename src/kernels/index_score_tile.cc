// Indexer scores over a decoded key tile (index_score_tile.h): the Highway kernel and the
// per-lane exact fallbacks.
#ifndef DSV41_KERNELS_INDEX_SCORE_TILE_CC_ONCE
#define DSV41_KERNELS_INDEX_SCORE_TILE_CC_ONCE

#include "kernels/index_score_tile.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41::index_score_tile_internal {

constexpr size_t kLanes = kIndexKeyTileEntries;
constexpr size_t kMaxBlocks = kIndexKeyMaxDim / kIndexKeyBlock;

// Binades two terms may lie apart for the blocks of one head (four fp32 sums of 24-bit
// significands) to add exactly in double: 53 − 24 − 2 (carries of up to 4 terms).
constexpr int32_t kBlockSpread = 27;

// The largest exponent spread over `heads` bf16 terms (8-bit significands) whose double sum is
// exact: 53 − 8 − ⌈log2 heads⌉.
inline int32_t HeadSpread(size_t heads) {
  return 45 - static_cast<int32_t>(std::bit_width(heads > 1 ? heads - 1 : size_t{1}));
}

// The exact dot of head h with lane `lane`'s key (rebuilt as the reference's fp32 values).
inline float ExactLaneDot(const float* q_head, size_t dim, const IndexKeyTile& tile, size_t lane,
                          float* key) {
  for (size_t d = 0; d < dim; ++d) {
    key[d] =
        tile.values[d * kLanes + lane] * tile.fp32_scales[(d / kIndexKeyBlock) * kLanes + lane];
  }
  return ExactDot(std::span<const float>(q_head, dim), std::span<const float>(key, dim));
}

}  // namespace dsv41::index_score_tile_internal

#endif  // DSV41_KERNELS_INDEX_SCORE_TILE_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/index_score_tile.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace ist = index_score_tile_internal;

using TileF = hn::CappedTag<float, kIndexKeyTileEntries>;
using TileI = hn::RebindToSigned<TileF>;

// acc[(g · blocks + b) · kLanes + lane] = Σ_{d in block b} q_{h0 + g}[d] · values[d][lane] in
// fp32 for the `group` (1 or 4) heads from h0: exact for heads IndexerQueryHeadsExact passed,
// whatever the order. Four heads share each key load; two chains per head hide the FMA latency.
void BlockSums(const float* q, size_t dim, size_t h0, size_t group, const IndexKeyTile& tile,
               float* acc) {
  const TileF df;
  const size_t nf = hn::Lanes(df);
  const size_t blocks = dim / kIndexKeyBlock;
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t l0 = 0; l0 < ist::kLanes; l0 += nf) {
      const float* keys = tile.values + b * kIndexKeyBlock * ist::kLanes + l0;
      if (group == 4) {
        const float* q0 = q + h0 * dim + b * kIndexKeyBlock;
        const float* q1 = q0 + dim;
        const float* q2 = q1 + dim;
        const float* q3 = q2 + dim;
        auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
        auto c0 = hn::Zero(df), c1 = hn::Zero(df), c2 = hn::Zero(df), c3 = hn::Zero(df);
        for (size_t d = 0; d < kIndexKeyBlock; d += 2) {
          const auto k0 = hn::LoadU(df, keys + d * ist::kLanes);
          const auto k1 = hn::LoadU(df, keys + (d + 1) * ist::kLanes);
          a0 = hn::MulAdd(hn::Set(df, q0[d]), k0, a0);
          a1 = hn::MulAdd(hn::Set(df, q1[d]), k0, a1);
          a2 = hn::MulAdd(hn::Set(df, q2[d]), k0, a2);
          a3 = hn::MulAdd(hn::Set(df, q3[d]), k0, a3);
          c0 = hn::MulAdd(hn::Set(df, q0[d + 1]), k1, c0);
          c1 = hn::MulAdd(hn::Set(df, q1[d + 1]), k1, c1);
          c2 = hn::MulAdd(hn::Set(df, q2[d + 1]), k1, c2);
          c3 = hn::MulAdd(hn::Set(df, q3[d + 1]), k1, c3);
        }
        hn::Store(hn::Add(a0, c0), df, acc + (0 * blocks + b) * ist::kLanes + l0);
        hn::Store(hn::Add(a1, c1), df, acc + (1 * blocks + b) * ist::kLanes + l0);
        hn::Store(hn::Add(a2, c2), df, acc + (2 * blocks + b) * ist::kLanes + l0);
        hn::Store(hn::Add(a3, c3), df, acc + (3 * blocks + b) * ist::kLanes + l0);
      } else {
        const float* q0 = q + h0 * dim + b * kIndexKeyBlock;
        auto a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
        for (size_t d = 0; d < kIndexKeyBlock; d += 4) {
          a0 = hn::MulAdd(hn::Set(df, q0[d]), hn::LoadU(df, keys + d * ist::kLanes), a0);
          a1 = hn::MulAdd(hn::Set(df, q0[d + 1]), hn::LoadU(df, keys + (d + 1) * ist::kLanes), a1);
          a2 = hn::MulAdd(hn::Set(df, q0[d + 2]), hn::LoadU(df, keys + (d + 2) * ist::kLanes), a2);
          a3 = hn::MulAdd(hn::Set(df, q0[d + 3]), hn::LoadU(df, keys + (d + 3) * ist::kLanes), a3);
        }
        hn::Store(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), df, acc + b * ist::kLanes + l0);
      }
    }
  }
}

// Per lane: 1 when the head's block terms acc[b] · 2^exponent[b] lie within kBlockSpread binades
// of each other (zeros aside), so their double sum is exact.
void BlockSpreadOk(const float* acc, size_t blocks, const IndexKeyTile& tile, int32_t* ok) {
  const TileF df;
  const TileI di;
  const size_t nf = hn::Lanes(df);
  for (size_t l0 = 0; l0 < ist::kLanes; l0 += nf) {
    auto hi = hn::Set(di, -100000), lo = hn::Set(di, 100000);
    for (size_t b = 0; b < blocks; ++b) {
      const auto a = hn::Load(df, acc + b * ist::kLanes + l0);
      const auto e = hn::Add(hn::And(hn::ShiftRight<23>(hn::BitCast(di, a)), hn::Set(di, 0xFF)),
                             hn::LoadU(di, tile.exponents + b * ist::kLanes + l0));
      const auto nonzero = hn::RebindMask(di, hn::Ne(a, hn::Zero(df)));
      hi = hn::IfThenElse(nonzero, hn::Max(hi, e), hi);
      lo = hn::IfThenElse(nonzero, hn::Min(lo, e), lo);
    }
    const auto fits = hn::Lt(hn::Sub(hi, lo), hn::Set(di, ist::kBlockSpread + 1));
    hn::Store(hn::IfThenElseZero(fits, hn::Set(di, 1)), di, ok + l0);
  }
}

// Per lane: 1 when the heads' bf16 terms lie within `spread` binades (zeros aside).
void HeadSpreadOk(const float* terms, size_t heads, int32_t spread, int32_t* ok) {
  const TileF df;
  const TileI di;
  const size_t nf = hn::Lanes(df);
  for (size_t l0 = 0; l0 < ist::kLanes; l0 += nf) {
    auto hi = hn::Set(di, -100000), lo = hn::Set(di, 100000);
    for (size_t h = 0; h < heads; ++h) {
      const auto t = hn::LoadU(df, terms + h * ist::kLanes + l0);
      const auto e = hn::And(hn::ShiftRight<23>(hn::BitCast(di, t)), hn::Set(di, 0xFF));
      const auto nonzero = hn::RebindMask(di, hn::Ne(t, hn::Zero(df)));
      hi = hn::IfThenElse(nonzero, hn::Max(hi, e), hi);
      lo = hn::IfThenElse(nonzero, hn::Min(lo, e), lo);
    }
    const auto fits = hn::Lt(hn::Sub(hi, lo), hn::Set(di, spread + 1));
    hn::Store(hn::IfThenElseZero(fits, hn::Set(di, 1)), di, ok + l0);
  }
}

// values[d][lane] = the E2M1 value of element d of staged row `lane` (rows of stride_words
// 32-bit words holding the packed codes, element 2k in the low nibble of byte k): one gather of
// a word per lane gives eight elements, each built from its code's bits.
void DecodeTileValues(const uint32_t* staged, size_t stride_words, size_t dim, float* values) {
  const TileF df;
  const TileI di;
  const hn::RebindToUnsigned<TileF> du;
  const size_t nf = hn::Lanes(df);
  const auto three = hn::Set(du, 3u), one = hn::Set(du, 1u), nibble = hn::Set(du, 0xFu);
  const auto half = hn::Set(du, 0x3F000000u), bias = hn::Set(du, 126u), sign = hn::Set(du, 8u);
  const int32_t* words = reinterpret_cast<const int32_t*>(staged);
  for (size_t l0 = 0; l0 < ist::kLanes; l0 += nf) {
    const auto offsets = hn::Mul(hn::Iota(di, static_cast<int32_t>(l0)),
                                 hn::Set(di, static_cast<int32_t>(stride_words)));
    for (size_t w = 0; w < dim / 8; ++w) {
      const auto packed = hn::BitCast(du, hn::GatherIndex(di, words + w, offsets));
      for (int k = 0; k < 8; ++k) {
        const auto code = hn::And(hn::ShiftRightSame(packed, 4 * k), nibble);
        const auto e = hn::And(hn::ShiftRight<1>(code), three);
        const auto m = hn::And(code, one);
        // 2^(e−1) · (1 + m/2) for e > 0; m · 0.5 for e = 0; the sign from bit 3.
        const auto normal = hn::Or(hn::ShiftLeft<23>(hn::Add(e, bias)), hn::ShiftLeft<22>(m));
        const auto small = hn::IfThenElseZero(hn::Eq(m, one), half);
        const auto magnitude = hn::IfThenElse(hn::Eq(e, hn::Zero(du)), small, normal);
        const auto bits = hn::Or(magnitude, hn::ShiftLeft<28>(hn::And(code, sign)));
        hn::StoreU(hn::BitCast(df, bits), df, values + (8 * w + k) * ist::kLanes + l0);
      }
    }
  }
}

void ScoreTile(const float* q, const float* w, const uint8_t* head_exact, size_t heads,
               const IndexKeyTile& tile, size_t count, float* scores, float* scratch) {
  const size_t dim = tile.dim;
  const size_t blocks = dim / kIndexKeyBlock;
  float* terms = scratch;                      // [heads][kLanes]
  float* key = scratch + heads * ist::kLanes;  // [max(dim, heads)]
#if HWY_HAVE_FLOAT64
  const TileF df;
  const size_t nf = hn::Lanes(df);
  const hn::CappedTag<double, kIndexKeyTileEntries> dd;
  const hn::Rebind<float, decltype(dd)> dh;
  const size_t nd = hn::Lanes(dd);
  HWY_ALIGN float acc[4 * ist::kMaxBlocks * ist::kLanes];
  HWY_ALIGN float dot[ist::kLanes];
  HWY_ALIGN int32_t ok[ist::kLanes];
  for (size_t h0 = 0; h0 < heads;) {
    const size_t group = heads - h0 >= 4 ? 4 : 1;
    BlockSums(q, dim, h0, group, tile, acc);
    for (size_t g = 0; g < group; ++g) {
      const size_t h = h0 + g;
      const float* head_acc = acc + g * blocks * ist::kLanes;
      BlockSpreadOk(head_acc, blocks, tile, ok);
      for (size_t l = 0; l < ist::kLanes; l += nd) {
        auto x = hn::Zero(dd);
        for (size_t b = 0; b < blocks; ++b) {
          x = hn::MulAdd(hn::PromoteTo(dd, hn::Load(dh, head_acc + b * ist::kLanes + l)),
                         hn::LoadU(dd, tile.scales + b * ist::kLanes + l), x);
        }
        hn::Store(hn::DemoteTo(dh, x), dh, dot + l);
      }
      for (size_t l = 0; l < count; ++l) {
        if (head_exact[h] == 0 || ok[l] == 0 || tile.force_exact[l] != 0) {
          dot[l] = ist::ExactLaneDot(q + h * dim, dim, tile, l, key);
        }
      }
      const auto zero = hn::Zero(df);
      const auto weight = hn::Set(df, w[h]);
      for (size_t l0 = 0; l0 < ist::kLanes; l0 += nf) {
        const auto rounded = Bf16RoundLanes(df, hn::Load(df, dot + l0));
        const auto relu = hn::IfThenElse(hn::Gt(rounded, zero), rounded, zero);
        hn::StoreU(Bf16RoundLanes(df, hn::Mul(weight, relu)), df, terms + h * ist::kLanes + l0);
      }
    }
    h0 += group;
  }
  HeadSpreadOk(terms, heads, ist::HeadSpread(heads), ok);
  for (size_t l = 0; l < ist::kLanes; l += nd) {
    auto sum = hn::Set(dd, -0.0);  // −0 is the additive identity: a sum of −0 terms stays −0
    for (size_t h = 0; h < heads; ++h) {
      sum = hn::Add(sum, hn::PromoteTo(dd, hn::LoadU(dh, terms + h * ist::kLanes + l)));
    }
    hn::Store(hn::DemoteTo(dh, sum), dh, dot + l);
  }
  for (size_t l = 0; l < count; ++l) {
    if (ok[l] == 0) {
      for (size_t h = 0; h < heads; ++h) key[h] = terms[h * ist::kLanes + l];
      dot[l] = ExactSum(std::span<const float>(key, heads));
    }
  }
  for (size_t l0 = 0; l0 < ist::kLanes; l0 += nf) {
    hn::Store(Bf16RoundLanes(df, hn::Load(df, dot + l0)), df, dot + l0);
  }
  std::copy_n(dot, count, scores);
#else
  // No double vectors: every lane through the exact accumulator, term by term as the reference.
  for (size_t l = 0; l < count; ++l) {
    for (size_t h = 0; h < heads; ++h) {
      const float d = Bf16Round(ist::ExactLaneDot(q + h * dim, dim, tile, l, key));
      terms[h] = Bf16Round(w[h] * (d > 0.0f ? d : 0.0f));
    }
    scores[l] = Bf16Round(ExactSum(std::span<const float>(terms, heads)));
  }
  (void)head_exact;
#endif
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {

HWY_EXPORT(ScoreTile);
HWY_EXPORT(DecodeTileValues);

namespace {

// The exponent of v's largest bit and of its lowest set bit (v finite and nonzero).
void BitRange(float v, int32_t& top, int32_t& low) {
  const uint32_t bits = std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu;
  const int32_t field = static_cast<int32_t>(bits >> 23);
  const uint32_t significand = field == 0 ? bits : ((bits & 0x7FFFFFu) | 0x800000u);
  const int32_t lsb_weight = field == 0 ? -149 : field - 150;  // weight of significand bit 0
  top = lsb_weight + static_cast<int32_t>(std::bit_width(significand)) - 1;
  low = lsb_weight + std::countr_zero(significand);
}

}  // namespace

void DecodeIndexKeyTile(std::span<const std::byte* const> rows, size_t dim, IndexKeyTile& tile) {
  constexpr size_t kLanes = kIndexKeyTileEntries;
  DSV41_CHECK(
      rows.size() <= kLanes && dim % kIndexKeyBlock == 0 && dim > 0 && dim <= kIndexKeyMaxDim,
      "index key tile: %zu rows of %zu values", rows.size(), dim);
  tile.dim = dim;
  tile.count = rows.size();
  const size_t blocks = dim / kIndexKeyBlock;
  // The rows' packed codes side by side (dim / 2 bytes each, a whole number of words since dim is
  // a multiple of 32), zeros for the lanes past the rows; then one vector pass decodes them.
  const size_t stride_words = dim / 8;
  uint32_t staged[kLanes * kIndexKeyMaxDim / 8];
  for (size_t l = 0; l < kLanes; ++l) {
    uint32_t* dst = staged + l * stride_words;
    if (l < rows.size()) {
      std::memcpy(dst, rows[l], dim / 2);
    } else {
      std::fill_n(dst, stride_words, 0u);
    }
  }
  HWY_DYNAMIC_DISPATCH(DecodeTileValues)(staged, stride_words, dim, tile.values);
  for (size_t l = 0; l < kLanes; ++l) {
    tile.force_exact[l] = 0;
    if (l >= rows.size()) {
      for (size_t b = 0; b < blocks; ++b) {
        tile.exponents[b * kLanes + l] = 0;
        tile.scales[b * kLanes + l] = 1.0;
        tile.fp32_scales[b * kLanes + l] = 1.0f;
      }
      continue;
    }
    const auto* bytes = reinterpret_cast<const uint8_t*>(rows[l]);
    for (size_t b = 0; b < blocks; ++b) {
      const uint8_t code = bytes[dim / 2 + b];
      const int32_t exponent = static_cast<int32_t>(code) - 127;
      tile.exponents[b * kLanes + l] = exponent;
      // 2^exponent (−127..128) as a double, built from its bits; the fp32 the reference uses.
      tile.scales[b * kLanes + l] =
          std::bit_cast<double>(static_cast<uint64_t>(exponent + 1023) << 52);
      tile.fp32_scales[b * kLanes + l] = F32FromE8m0(code);
      // 6 · 2^exponent must stay below 2^128 for the fp32 keys to be finite.
      if (code >= 253) tile.force_exact[l] = 1;
    }
  }
}

void IndexerQueryHeadsExact(std::span<const float> q, size_t heads, std::span<uint8_t> head_exact) {
  DSV41_CHECK(heads >= 1 && q.size() % heads == 0 && head_exact.size() >= heads,
              "query heads: %zu values for %zu heads", q.size(), heads);
  const size_t dim = q.size() / heads;
  DSV41_CHECK(dim % kIndexKeyBlock == 0, "query heads of %zu values", dim);
  for (size_t h = 0; h < heads; ++h) {
    bool exact = true;
    for (size_t b = 0; b < dim / kIndexKeyBlock && exact; ++b) {
      int32_t top = -1000, low = 1000;
      for (size_t d = 0; d < kIndexKeyBlock; ++d) {
        const float v = q[h * dim + b * kIndexKeyBlock + d];
        if (v == 0.0f) continue;
        if (!std::isfinite(v)) {
          exact = false;
          break;
        }
        int32_t v_top = 0, v_low = 0;
        BitRange(v, v_top, v_low);
        top = std::max(top, v_top);
        low = std::min(low, v_low);
      }
      // Products with E2M1 values (lowest bit 2^−1, below 2^3) summed over 32: below
      // 2^(top + 9), multiples of 2^(low − 1); fp32 holds them when that spans ≤ 24 bits.
      if (top >= low && top - low > 14) exact = false;
    }
    head_exact[h] = exact ? 1 : 0;
  }
}

size_t IndexerScoresTileScratch(size_t heads, size_t dim) {
  return heads * kIndexKeyTileEntries + std::max(dim, heads);
}

void IndexerScoresTile(std::span<const float> q, std::span<const float> w,
                       std::span<const uint8_t> head_exact, const IndexKeyTile& tile,
                       std::span<float> scores, std::span<float> scratch) {
  const size_t heads = w.size();
  DSV41_CHECK(heads >= 1 && q.size() == heads * tile.dim && head_exact.size() >= heads &&
                  scores.size() <= tile.count &&
                  scratch.size() >= IndexerScoresTileScratch(heads, tile.dim),
              "indexer tile scores: q %zu for %zu heads of %zu, %zu scores of %zu lanes, scratch "
              "%zu",
              q.size(), heads, tile.dim, scores.size(), tile.count, scratch.size());
  HWY_DYNAMIC_DISPATCH(ScoreTile)
  (q.data(), w.data(), head_exact.data(), heads, tile, scores.size(), scores.data(),
   scratch.data());
}

}  // namespace dsv41
#endif  // HWY_ONCE

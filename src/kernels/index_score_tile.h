#pragma once

// The lightning indexer's scores (model.md §7.5 step 3) straight from the paged index-key rows,
// a tile of entries at a time, with the bits of IndexerScoresRef (kernels/indexer_topk.h) and no
// exact accumulator on the common path. Why that is possible: a key row is E2M1 values with one
// E8M0 scale per 32, and the query is fq4_b32_pow2 (E2M1 values with a power-of-two scale per 32),
// so each 32-value block's dot product is a sum of 13-bit numbers that fp32 holds exactly in any
// order; the few blocks of a head then sum exactly in double, and so do the bf16 head terms, as
// long as their exponents lie close enough together — checked per lane, and a lane that fails
// takes the exact accumulator (ExactDot / ExactSum). The result never depends on the tile split,
// the order of entries or the thread count.

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsv41 {

// Entries per key tile.
inline constexpr size_t kIndexKeyTileEntries = 16;
// Values per E8M0 scale in an index-key row.
inline constexpr size_t kIndexKeyBlock = 32;
// The widest index key a tile holds (index_head_dim; the release has 128).
inline constexpr size_t kIndexKeyMaxDim = 1024;

// Up to kIndexKeyTileEntries index keys, decoded for IndexerScoresTile. Lane l is entry l of the
// tile; lanes past `count` hold zeros.
struct IndexKeyTile {
  size_t dim = 0;
  size_t count = 0;
  alignas(64) float values[kIndexKeyMaxDim *
                           kIndexKeyTileEntries];  // [dim][lane]: the E2M1 values, unscaled
  // [dim / 32][lane]: each block's scale as an exponent, as a double 2^exponent and as the fp32
  // the reference multiplies by (F32FromE8m0).
  int32_t exponents[kIndexKeyMaxDim / kIndexKeyBlock * kIndexKeyTileEntries];
  double scales[kIndexKeyMaxDim / kIndexKeyBlock * kIndexKeyTileEntries];
  float fp32_scales[kIndexKeyMaxDim / kIndexKeyBlock * kIndexKeyTileEntries];
  // Lanes whose scales could take an fp32 key value out of range (E8M0 ≥ 253, or NaN): scored by
  // the exact accumulator.
  uint8_t force_exact[kIndexKeyTileEntries];
};

// Decodes rows.size() ≤ kIndexKeyTileEntries index-key rows of `dim` values (a multiple of 32, at
// most kIndexKeyMaxDim; checked) into `tile`. A row is kv's index-key row: dim / 2 bytes of packed
// E2M1 codes (element 2k in the low nibble), then dim / 32 E8M0 scale bytes.
void DecodeIndexKeyTile(std::span<const std::byte* const> rows, size_t dim, IndexKeyTile& tile);

// Per head of one token's query q ([heads, dim]): 1 when each of its 32-value blocks spans at
// most 14 binades from its largest value's exponent down to its lowest set bit, so the block's
// fp32 sum against E2M1 values is exact in any order (fq4_b32_pow2 values span 3); 0 sends the
// head to the exact accumulator.
void IndexerQueryHeadsExact(std::span<const float> q, size_t heads, std::span<uint8_t> head_exact);

// Scratch floats IndexerScoresTile needs.
size_t IndexerScoresTileScratch(size_t heads, size_t dim);

// scores[l] for the first scores.size() ≤ tile.count lanes: bit for bit IndexerScoresRef(q, w,
// keys) with keys[l][d] = values[d][l] · fp32_scales[d / 32][l]. q: [heads, dim] (w.size() heads),
// head_exact from IndexerQueryHeadsExact(q), scratch of IndexerScoresTileScratch floats.
void IndexerScoresTile(std::span<const float> q, std::span<const float> w,
                       std::span<const uint8_t> head_exact, const IndexKeyTile& tile,
                       std::span<float> scores, std::span<float> scratch);

}  // namespace dsv41

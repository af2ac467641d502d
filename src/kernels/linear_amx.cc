// The kAmxBf16 Linear kernel: weight products on the AMX-BF16 tiles (TDPBF16PS), with a scalar
// model of the tile instruction standing in on CPUs without them (the unit tests run the kernel's
// packing and loops over it; on AMX hardware they compare the two).
//
// The tiles compute C[m][n] += A[m] · B[:, n] for a 16 × 32 bf16 tile A and a 16 × 16 tile B of
// bf16 pairs (VNNI layout). Here A holds 16 weight rows' 32 K elements, decoded exactly to bf16
// with their block scale folded into the exponent, and B the prepared activations of 16 input
// rows for the same K tile; C[m][n] is output m of input row n.
//
// The fixed order, per (output, input row): K in chunks of kChunkTiles tiles of 32. Within a
// chunk, C starts at 0; each K tile adds (even + odd) to it, where even and odd are fp32 sums from
// 0 over the tile's 16 element pairs — TDPBF16PS as the SDM defines it (RNE FMA, inputs and
// results below 2^-126 taken as 0). At the chunk's end C is added into an fp64 sum, and the sum is
// rounded to fp32 once at the end. A K tile whose block scale cannot be folded exactly into bf16
// weights (a scale byte outside 10..246 for FP8, 2..252 for MXFP4) is dotted unscaled into fresh
// tiles of its own and added to the fp64 sums times its scale (exact in double). Every step
// depends only on the weight and the (output, row) pair, so the result never depends on the
// batch, the tiling or the thread split, and the hardware tiles and the model give the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/cpu_features.h"
#include "kernels/linear_internal.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV41_HAVE_AMX 1
#include <immintrin.h>
#else
#define DSV41_HAVE_AMX 0
#endif

namespace dsv41::linear_internal {
namespace {

constexpr int64_t kTileK = 32;                      // bf16 elements of K per tile product
constexpr int64_t kTileRows = 16;                   // outputs per A tile, input rows per B tile
constexpr int64_t kChunkTiles = 16;                 // K tiles per fp32 run (512 elements)
constexpr int64_t kTileWords = kTileRows * kTileK;  // bf16 words of an A tile (and of a B tile)

// ---- the tile units ---------------------------------------------------------------------------
// Tiles 0..3 accumulate C (rows [A0, A1] × columns [B0, B1]), 4..5 hold A, 6..7 hold B; every
// tile is 16 rows of 64 bytes.

float FlushDenormal(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}

// The scalar model of the unit: TDPBF16PS as the SDM's pseudo-code defines it.
struct EmulatedTiles {
  struct alignas(64) Tile {
    uint8_t bytes[kTileRows * 64];
  };
  static Tile* Tiles() {
    static thread_local Tile tiles[8];
    return tiles;
  }
  static void Begin() {}
  static void End() {}
  template <int kT>
  static void Zero() {
    std::memset(Tiles()[kT].bytes, 0, sizeof(Tile));
  }
  template <int kT>
  static void Load(const void* p, int64_t stride_bytes) {
    for (int64_t r = 0; r < kTileRows; ++r) {
      std::memcpy(Tiles()[kT].bytes + 64 * r, static_cast<const uint8_t*>(p) + r * stride_bytes,
                  64);
    }
  }
  template <int kT>
  static void Store(void* p, int64_t stride_bytes) {
    for (int64_t r = 0; r < kTileRows; ++r) {
      std::memcpy(static_cast<uint8_t*>(p) + r * stride_bytes, Tiles()[kT].bytes + 64 * r, 64);
    }
  }
  static float Bf16At(const Tile& t, int64_t row, int64_t word) {
    uint16_t bits;
    std::memcpy(&bits, t.bytes + 64 * row + 2 * word, 2);
    return FlushDenormal(F32FromBf16(bits));  // inputs below 2^-126 are zero
  }
  template <int kC, int kA, int kB>
  static void Dp() {
    Tile& c = Tiles()[kC];
    const Tile& a = Tiles()[kA];
    const Tile& b = Tiles()[kB];
    for (int64_t m = 0; m < kTileRows; ++m) {
      for (int64_t n = 0; n < kTileRows; ++n) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t k = 0; k < kTileRows; ++k) {
          even = FlushDenormal(std::fma(Bf16At(a, m, 2 * k), Bf16At(b, k, 2 * n), even));
          odd = FlushDenormal(std::fma(Bf16At(a, m, 2 * k + 1), Bf16At(b, k, 2 * n + 1), odd));
        }
        float acc;
        std::memcpy(&acc, c.bytes + 64 * m + 4 * n, 4);
        acc = FlushDenormal(acc + FlushDenormal(even + odd));
        std::memcpy(c.bytes + 64 * m + 4 * n, &acc, 4);
      }
    }
  }
};

#if DSV41_HAVE_AMX
#define DSV41_AMX_TARGET __attribute__((target("amx-tile,amx-bf16")))

// The CPU's tiles (AMX-TILE, AMX-BF16; the process holds the tile state: CpuHasAmxBf16).
struct HardwareTiles {
  DSV41_AMX_TARGET static void Begin() {
    static const AmxTileConfig config;
    _tile_loadconfig(&config);
  }
  DSV41_AMX_TARGET static void End() { _tile_release(); }
  // GCC's tile intrinsics paste the tile number into the instruction text: literals only.
  template <int kT>
  DSV41_AMX_TARGET static void Zero() {
    static_assert(kT >= 0 && kT <= 3);
    if constexpr (kT == 0) _tile_zero(0);
    if constexpr (kT == 1) _tile_zero(1);
    if constexpr (kT == 2) _tile_zero(2);
    if constexpr (kT == 3) _tile_zero(3);
  }
  template <int kT>
  DSV41_AMX_TARGET static void Load(const void* p, int64_t stride_bytes) {
    static_assert(kT >= 4 && kT <= 7);
    if constexpr (kT == 4) _tile_loadd(4, p, stride_bytes);
    if constexpr (kT == 5) _tile_loadd(5, p, stride_bytes);
    if constexpr (kT == 6) _tile_loadd(6, p, stride_bytes);
    if constexpr (kT == 7) _tile_loadd(7, p, stride_bytes);
  }
  template <int kT>
  DSV41_AMX_TARGET static void Store(void* p, int64_t stride_bytes) {
    static_assert(kT >= 0 && kT <= 3);
    if constexpr (kT == 0) _tile_stored(0, p, stride_bytes);
    if constexpr (kT == 1) _tile_stored(1, p, stride_bytes);
    if constexpr (kT == 2) _tile_stored(2, p, stride_bytes);
    if constexpr (kT == 3) _tile_stored(3, p, stride_bytes);
  }
  template <int kC, int kA, int kB>
  DSV41_AMX_TARGET static void Dp() {
    if constexpr (kC == 0 && kA == 4 && kB == 6) _tile_dpbf16ps(0, 4, 6);
    if constexpr (kC == 1 && kA == 4 && kB == 7) _tile_dpbf16ps(1, 4, 7);
    if constexpr (kC == 2 && kA == 5 && kB == 6) _tile_dpbf16ps(2, 5, 6);
    if constexpr (kC == 3 && kA == 5 && kB == 7) _tile_dpbf16ps(3, 5, 7);
  }
};
#endif

// ---- weights to A tiles -----------------------------------------------------------------------

// The e4m3 / e2m1 code tables as fp32.
struct CodeTables {
  float e4m3[256];
  float e2m1[16];
  CodeTables() {
    for (int c = 0; c < 256; ++c) e4m3[c] = F32FromE4m3(static_cast<uint8_t>(c));
    for (int c = 0; c < 16; ++c) e2m1[c] = F32FromE2m1(static_cast<uint8_t>(c));
  }
};
const CodeTables& Codes() {
  static const CodeTables tables;
  return tables;
}

bool Foldable(WeightFormat format, uint8_t scale_byte) {
  return format == WeightFormat::kFp8Block ? scale_byte >= 10 && scale_byte <= 246
                                           : scale_byte >= 2 && scale_byte <= 252;
}

uint8_t ScaleByte(std::span<const std::byte> scale, int64_t idx) {
  return static_cast<uint8_t>(scale[static_cast<size_t>(idx)]);
}

// Decodes K tile t of weight rows [o, o + 16) into `a` (16 rows of 32 bf16; rows past `out` and
// elements past `in` are 0). With `folded`, each value carries its block scale (exact: the caller
// checked Foldable); without, the raw code values, and `row_scale[m]` receives 2^(s − 127) of row
// m. Returns whether every row's scale was foldable (then `a` is folded).
bool DecodeATile(const LinearWeight& w, int64_t o, int64_t t, uint16_t* a, double* row_scale) {
  const CodeTables& codes = Codes();
  const int64_t k0 = t * kTileK;
  const int64_t k_end = std::min(w.in, k0 + kTileK);
  bool foldable = true;
  uint8_t scale_bytes[kTileRows];
  for (int64_t m = 0; m < kTileRows; ++m) {
    const int64_t row = o + m;
    scale_bytes[m] = 127;
    if (row >= w.out) continue;
    if (w.format == WeightFormat::kFp8Block) {
      scale_bytes[m] = ScaleByte(w.scale, row / kFp8Tile * NumTiles(w.in) + k0 / kFp8Tile);
    } else if (w.format == WeightFormat::kMxfp4) {
      scale_bytes[m] = ScaleByte(w.scale, row * (w.in / kMxfp4Block) + k0 / kMxfp4Block);
    }
    if (w.format != WeightFormat::kBf16) foldable &= Foldable(w.format, scale_bytes[m]);
  }
  for (int64_t m = 0; m < kTileRows; ++m) {
    const int64_t row = o + m;
    uint16_t* dst = a + m * kTileK;
    row_scale[m] = std::ldexp(1.0, scale_bytes[m] - 127);
    if (row >= w.out) {
      std::fill(dst, dst + kTileK, uint16_t{0});
      continue;
    }
    const float fold = foldable ? static_cast<float>(row_scale[m]) : 1.0f;
    const auto* bytes = reinterpret_cast<const uint8_t*>(w.weight.data());
    for (int64_t k = k0; k < k0 + kTileK; ++k) {
      float v = 0.0f;
      if (k < k_end) {
        switch (w.format) {
          case WeightFormat::kBf16: {
            uint16_t bits;
            std::memcpy(&bits, bytes + 2 * (row * w.in + k), 2);
            v = F32FromBf16(bits);
            break;
          }
          case WeightFormat::kFp8Block:
            v = codes.e4m3[bytes[row * w.in + k]] * fold;
            break;
          case WeightFormat::kMxfp4:
            v = codes.e2m1[E2m1CodeAt(bytes + row * (w.in / 2), k)] * fold;
            break;
          case WeightFormat::kF32:
            DSV41_CHECK(false, "the AMX kernel takes no fp32 weights");
        }
      }
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      DSV41_DCHECK((bits & 0xFFFFu) == 0, "weight %a is not exact in bf16", static_cast<double>(v));
      dst[k - k0] = static_cast<uint16_t>(bits >> 16);
    }
  }
  return foldable;
}

// ---- the kernel -------------------------------------------------------------------------------

// Adds the 16 × 16 fp32 tile `c` (row m = output, column n = input row) into `sums` [16][16],
// each times `scale[m]` (1 for folded tiles).
void AddTile(const float* c, const double* scale, double* sums) {
  for (int64_t m = 0; m < kTileRows; ++m) {
    for (int64_t n = 0; n < kTileRows; ++n) {
      sums[m * kTileRows + n] += static_cast<double>(c[m * kTileRows + n]) * scale[m];
    }
  }
}

// A worker thread's buffers, grown to the largest call and kept (no allocation in steady state).
struct Scratch {
  std::vector<uint16_t> a;        // a chunk's A tiles: [tile][half][16 × 32] bf16
  std::vector<double> row_scale;  // [tile][half][16]: 2^(s − 127) of each row
  std::vector<uint8_t> folded;    // [tile][half]
  std::vector<double> sums;       // [group pair][2 halves][2 groups][16 × 16]
};
Scratch& ThreadScratch() {
  static thread_local Scratch scratch;
  return scratch;
}

// Outputs [o, min(o + 32, o_end)) (two A tiles, "halves") for every input row: each K chunk's A
// tiles are decoded once, then every pair of 16-row groups runs the chunk on the tiles.
template <typename Unit>
void OutputBlock(const LinearWeight& w, const LinearInput& x, int64_t o, int64_t o_end, float* y,
                 int64_t y_stride) {
  const int64_t num_tiles = x.stride / kTileK;
  const int64_t num_groups = (x.rows + kTileRows - 1) / kTileRows;
  const int64_t num_pairs = (num_groups + 1) / 2;
  constexpr int64_t kTileSums = kTileRows * kTileRows;
  Scratch& scratch = ThreadScratch();
  scratch.a.resize(static_cast<size_t>(kChunkTiles * 2 * kTileWords));
  scratch.row_scale.resize(static_cast<size_t>(kChunkTiles * 2 * kTileRows));
  scratch.folded.resize(static_cast<size_t>(kChunkTiles * 2));
  scratch.sums.assign(static_cast<size_t>(num_pairs * 4 * kTileSums), 0.0);
  const auto* blocks = reinterpret_cast<const uint8_t*>(x.bf16);
  alignas(64) static const uint8_t kZeroTile[kTileWords * 2] = {};
  static const double kOnes[kTileRows] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  alignas(64) float c[kTileSums];
  for (int64_t chunk = 0; chunk < num_tiles; chunk += kChunkTiles) {
    const int64_t chunk_tiles = std::min(num_tiles - chunk, kChunkTiles);
    for (int64_t i = 0; i < chunk_tiles * 2; ++i) {
      scratch.folded[i] =
          DecodeATile(w, o + (i % 2) * kTileRows, chunk + i / 2, &scratch.a[i * kTileWords],
                      &scratch.row_scale[i * kTileRows]);
    }
    for (int64_t pair = 0; pair < num_pairs; ++pair) {
      double* sums = &scratch.sums[pair * 4 * kTileSums];  // [half][group][16 × 16]
      auto b_tile = [&](int64_t j, int64_t t) -> const uint8_t* {
        const int64_t g = 2 * pair + j;
        return g < num_groups ? blocks + (g * num_tiles + t) * kTileWords * 2 : kZeroTile;
      };
      auto flush = [&](const double* scale0, const double* scale1) {
        Unit::template Store<0>(c, 64);
        AddTile(c, scale0, sums);
        Unit::template Store<1>(c, 64);
        AddTile(c, scale0, sums + kTileSums);
        Unit::template Store<2>(c, 64);
        AddTile(c, scale1, sums + 2 * kTileSums);
        Unit::template Store<3>(c, 64);
        AddTile(c, scale1, sums + 3 * kTileSums);
      };
      auto zero = [] {
        Unit::template Zero<0>();
        Unit::template Zero<1>();
        Unit::template Zero<2>();
        Unit::template Zero<3>();
      };
      auto products = [&](int64_t i) {  // chunk tile i
        Unit::template Load<4>(&scratch.a[(2 * i) * kTileWords], 64);
        Unit::template Load<5>(&scratch.a[(2 * i + 1) * kTileWords], 64);
        Unit::template Load<6>(b_tile(0, chunk + i), 64);
        Unit::template Load<7>(b_tile(1, chunk + i), 64);
        Unit::template Dp<0, 4, 6>();
        Unit::template Dp<1, 4, 7>();
        Unit::template Dp<2, 5, 6>();
        Unit::template Dp<3, 5, 7>();
      };
      zero();
      for (int64_t i = 0; i < chunk_tiles; ++i) {
        const bool folded0 = scratch.folded[2 * i], folded1 = scratch.folded[2 * i + 1];
        if (folded0 && folded1) {
          products(i);
          continue;
        }
        // An unfoldable scale (that A tile holds the raw codes): this K tile alone, added times
        // its rows' scales.
        flush(kOnes, kOnes);
        zero();
        products(i);
        flush(folded0 ? kOnes : &scratch.row_scale[(2 * i) * kTileRows],
              folded1 ? kOnes : &scratch.row_scale[(2 * i + 1) * kTileRows]);
        zero();
      }
      flush(kOnes, kOnes);
    }
  }
  for (int64_t pair = 0; pair < num_pairs; ++pair) {
    const double* sums = &scratch.sums[pair * 4 * kTileSums];
    for (int64_t half = 0; half < 2; ++half) {
      for (int64_t m = 0; m < kTileRows; ++m) {
        const int64_t out = o + half * kTileRows + m;
        if (out >= o_end) continue;  // another call's outputs
        for (int64_t j = 0; j < 2; ++j) {
          for (int64_t n = 0; n < kTileRows; ++n) {
            const int64_t row = (2 * pair + j) * kTileRows + n;
            if (row >= x.rows) continue;
            y[row * y_stride + out] =
                static_cast<float>(sums[(half * 2 + j) * kTileSums + m * kTileRows + n]);
          }
        }
      }
    }
  }
}

template <typename Unit>
void AmxOutputsOn(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                  float* y, int64_t y_stride) {
  Unit::Begin();
  for (int64_t o = o_begin; o < o_end; o += 2 * kTileRows) {
    OutputBlock<Unit>(w, x, o, o_end, y, y_stride);
  }
  Unit::End();
}

}  // namespace

int64_t AmxStride(const LinearWeight& w) { return (w.in + kTileK - 1) / kTileK * kTileK; }

size_t AmxBlockWords(int64_t rows, int64_t stride) {
  return static_cast<size_t>((rows + kTileRows - 1) / kTileRows * kTileRows * stride);
}

void AmxPrepare(const float* x, int64_t rows, int64_t stride, uint16_t* blocks) {
  const int64_t num_tiles = stride / kTileK;
  const int64_t num_groups = (rows + kTileRows - 1) / kTileRows;
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t t = 0; t < num_tiles; ++t) {
      uint16_t* block = blocks + (g * num_tiles + t) * kTileWords;
      // Row k of the block: input row n's elements 2k and 2k + 1 of the K tile, at words 2n, 2n+1.
      for (int64_t k = 0; k < kTileRows; ++k) {
        for (int64_t n = 0; n < kTileRows; ++n) {
          const int64_t row = g * kTileRows + n;
          for (int64_t h = 0; h < 2; ++h) {
            uint16_t bf16 = 0;
            if (row < rows) {
              uint32_t bits;
              std::memcpy(&bits, x + row * stride + t * kTileK + 2 * k + h, 4);
              DSV41_DCHECK((bits & 0xFFFFu) == 0, "Linear input is not a bf16 value");
              bf16 = static_cast<uint16_t>(bits >> 16);
            }
            block[k * kTileK + 2 * n + h] = bf16;
          }
        }
      }
    }
  }
}

bool AmxTilesPresent() { return DSV41_HAVE_AMX && CpuHasAmxBf16(); }

void AmxOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                float* y, int64_t y_stride, AmxUnit unit) {
  DSV41_CHECK(w.format != WeightFormat::kF32, "the AMX kernel takes no fp32 weights");
#if DSV41_HAVE_AMX
  if (unit == AmxUnit::kHardware || (unit == AmxUnit::kBest && AmxTilesPresent())) {
    DSV41_CHECK(AmxTilesPresent(), "AMX tiles asked for on a CPU without them");
    AmxOutputsOn<HardwareTiles>(w, x, o_begin, o_end, y, y_stride);
    return;
  }
#else
  DSV41_CHECK(unit != AmxUnit::kHardware, "AMX tiles asked for on a CPU without them");
#endif
  AmxOutputsOn<EmulatedTiles>(w, x, o_begin, o_end, y, y_stride);
}

}  // namespace dsv41::linear_internal

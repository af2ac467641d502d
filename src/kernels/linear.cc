// Linear: the weight GEMM over stored formats. LinearRef is the plain scalar loop; Linear runs the
// Highway path of the best compiled target (dispatched once per call, STYLE.md §7).
//
// Fast path layout. Activations are prepared once per call into xp [rows, in_pad] fp32 (in_pad =
// in rounded up to 32, zero padded; fq8_b32-quantised when asked; for MXFP4 each 32-block is
// stored as its 16 even elements then its 16 odd ones, matching the low and high nibbles of 16
// packed bytes), then widened to fp64 (exact). Weights are never expanded in memory: a tile of kO
// output rows × kR input rows walks K in 32-blocks, decodes each weight vector once (exact fp32),
// widens it to fp64 and FMAs it into kO·kR fp64 accumulators; the sum is rounded to fp32 once.
// The fp32 × fp32 products are exact in fp64 and the fp64 sum's error is far below half an fp32
// ulp of the result unless the sum cancels almost completely, so the output is, in practice,
// LinearRef's correctly rounded exact sum whatever the order. Every (output, input row) pair owns
// one accumulator vector that sees K in the same order whatever the tiling, the number of rows in
// the call or the thread split, so results depend only on (format, in, the target): batch- and
// thread-invariant.
#ifndef DSV41_KERNELS_LINEAR_CC_ONCE
#define DSV41_KERNELS_LINEAR_CC_ONCE

#include "kernels/linear.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "base/check.h"
#include "base/thread_pool.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace linear_internal {

// What one per-target call computes: output rows [o_begin, o_end) for all input rows.
struct LinearArgs {
  const LinearWeight* w = nullptr;
  const double* xp = nullptr;  // prepared activations [rows, in_pad], widened to fp64
  int64_t rows = 0;
  int64_t in_pad = 0;
  float* y = nullptr;  // [rows, out]
  int64_t o_begin = 0;
  int64_t o_end = 0;
};

inline constexpr int64_t kBlock = 32;  // K block: FP8 tile width, MXFP4 block, fq8 block
inline constexpr int64_t kOTile = 4;   // output rows per tile

}  // namespace linear_internal
}  // namespace dsv41

#endif  // DSV41_KERNELS_LINEAR_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear.cc"
#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using linear_internal::kBlock;
using linear_internal::kOTile;
using linear_internal::LinearArgs;

// At most 16 lanes: one vector covers at most half a 32-block (16 packed MXFP4 bytes).
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;
// The fp64 accumulators: an fp32 vector widens into kParts fp64 vectors (its halves; the whole of
// it on the one-lane scalar target).
#if HWY_TARGET == HWY_SCALAR
using DH = DF;
inline constexpr int kParts = 1;
#else
using DH = hn::Half<DF>;
inline constexpr int kParts = 2;
#endif
using DD = hn::Rebind<double, DH>;
using VD = hn::Vec<DD>;

// Part `part` of v, widened to fp64 (exact).
HWY_INLINE VD WidenPart(VF v, int part) {
#if HWY_TARGET == HWY_SCALAR
  (void)part;
  return hn::PromoteTo(DD(), v);
#else
  return hn::PromoteTo(DD(), part == 0 ? hn::LowerHalf(DH(), v) : hn::UpperHalf(DH(), v));
#endif
}

#if HWY_TARGET <= HWY_AVX3
inline constexpr int kMaxR = 4;  // 32 vector registers: 16 accumulators fit
inline constexpr int kBufR = 6;  // buffered path: 4 × 6 accumulators
#else
inline constexpr int kMaxR = 2;
inline constexpr int kBufR = 2;
#endif

// 2^e as fp32 for a normal exponent (−126 <= e <= 127), by its bits.
HWY_INLINE float Pow2(int e) {
  const uint32_t bits = static_cast<uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// ---- per-format decoders. Scales<kO>(o0, kb, f1, f2) gives the block's factors for rows
// o0..o0+kO and returns true when the block needs the exact two-step path;
// DecodePair<kBig>(d, p, f1, f2, j, lo, hi) gives elements (j..j+N) and (16+j..16+j+N) of the
// block at p, in the order xp uses, as exact fp32 weights.

// FP8 e4m3 through IEEE binary16: fp16 bits = sign << 15 | (e4m3 & 0x7F) << 7 is the e4m3 value
// times 2^-8 (normals and subnormals alike), which the F16C conversion widens exactly; the block
// factor is then 2^(b−127+8). A scale byte above 246 would overflow that factor: such blocks take
// the two-step path (×2^8, then ×2^(b−127)). The rows of a tile (4, aligned) share one tile scale.
struct Fp8Decoder {
  static constexpr int64_t kBlockBytes = kBlock;
  const uint8_t* weight;
  int64_t row_bytes;
  const uint8_t* scale;
  int64_t tiles_in;

  static HWY_INLINE VF Widen(DF d, const uint8_t* p) {
    const hn::Rebind<int8_t, DF> d8;
    const hn::Rebind<int16_t, DF> d16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto v16 = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)));
    const auto bits = hn::And(hn::ShiftLeft<7>(v16), hn::Set(d16, static_cast<int16_t>(0xBF80)));
    return hn::PromoteTo(d, hn::BitCast(dh, bits));
  }
  template <bool kBig>
  static HWY_INLINE void DecodePair(DF d, const uint8_t* p, float f1, float f2, size_t j, VF& lo,
                                    VF& hi) {
    const VF a = Widen(d, p + j);
    const VF c = Widen(d, p + 16 + j);
    if constexpr (kBig) {
      const VF k256 = hn::Set(d, 256.0f);
      const VF s = hn::Set(d, f2);
      lo = hn::Mul(hn::Mul(a, k256), s);
      hi = hn::Mul(hn::Mul(c, k256), s);
    } else {
      const VF f = hn::Set(d, f1);
      lo = hn::Mul(a, f);
      hi = hn::Mul(c, f);
    }
  }
  template <int kO>
  HWY_INLINE bool Scales(int64_t o0, int64_t kb, float* f1, float* f2) const {
    static_assert(kBlock % kO == 0, "a tile's rows share one 32-row group");
    const uint8_t byte = scale[(o0 / kBlock) * tiles_in + kb];
    const bool big = byte > 246;
    const float one = big ? 0.0f : Pow2(byte - 127 + 8);
    const float two = big ? F32FromE8m0(byte) : 0.0f;
    for (int o = 0; o < kO; ++o) {
      f1[o] = one;
      f2[o] = two;
    }
    return big;
  }
};

// MXFP4: 16 bytes hold the block's even elements (low nibbles) and odd ones (high nibbles).
struct Mxfp4Decoder {
  static constexpr int64_t kBlockBytes = kBlock / 2;
  const uint8_t* weight;
  int64_t row_bytes;
  const uint8_t* scale;
  int64_t blocks_in;

#if HWY_TARGET <= HWY_AVX3
  // 16 lanes: the nibble indexes a 16-entry fp32 table of e2m1 values times 2^(b−127).
  template <bool kBig>
  static HWY_INLINE void DecodePair(DF d, const uint8_t* p, float f1, float /*f2*/, size_t j,
                                    VF& lo, VF& hi) {
    static_assert(hn::MaxLanes(DF()) == 16);
    HWY_ALIGN static constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                  4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                  -2.0f, -3.0f, -4.0f, -6.0f};
    const hn::Rebind<uint8_t, DF> d8;
    const hn::RebindToUnsigned<DF> du;
    const hn::RebindToSigned<DF> di;
    // The table times the block scale (exact: e2m1 values times a power of two), then looked up.
    const VF table = hn::Mul(hn::Load(d, kE2m1), hn::Set(d, f1));
    const auto v = hn::PromoteTo(du, hn::LoadU(d8, p + j));
    const auto nlo = hn::BitCast(di, hn::And(v, hn::Set(du, 0xFu)));
    const auto nhi = hn::BitCast(di, hn::ShiftRight<4>(v));
    lo = hn::TableLookupLanes(table, hn::IndicesFromVec(d, nlo));
    hi = hn::TableLookupLanes(table, hn::IndicesFromVec(d, nhi));
  }
  template <int kO>
  HWY_INLINE bool Scales(int64_t o0, int64_t kb, float* f1, float* f2) const {
    for (int o = 0; o < kO; ++o) {
      const uint8_t byte = scale[(o0 + o) * blocks_in + kb];
      // Bytes 0 (a subnormal scale) and 255 (NaN) through the codec; the rest by their bits.
      f1[o] = (byte == 0 || byte == 255) ? F32FromE8m0(byte) : Pow2(byte - 127);
      f2[o] = 0.0f;
    }
    return false;
  }
#else
  // Fewer lanes: e2m1 through binary16 as for FP8: bits = sign << 15 | magnitude << 9 is the
  // value times 2^-14; factor 2^(b−127+14), two-step above byte 240.
  static HWY_INLINE VF Widen(DF d, hn::Vec<hn::Rebind<uint16_t, DF> > n) {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto bits = hn::Or(hn::ShiftLeft<9>(hn::And(n, hn::Set(d16, uint16_t{7}))),
                             hn::ShiftLeft<12>(hn::And(n, hn::Set(d16, uint16_t{8}))));
    return hn::PromoteTo(d, hn::BitCast(dh, bits));
  }
  template <bool kBig>
  static HWY_INLINE void DecodePair(DF d, const uint8_t* p, float f1, float f2, size_t j, VF& lo,
                                    VF& hi) {
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Rebind<uint16_t, DF> d16;
    const auto v = hn::PromoteTo(d16, hn::LoadU(d8, p + j));
    const VF a = Widen(d, hn::And(v, hn::Set(d16, uint16_t{0xF})));
    const VF c = Widen(d, hn::ShiftRight<4>(v));
    if constexpr (kBig) {
      const VF k = hn::Set(d, 16384.0f);
      const VF s = hn::Set(d, f2);
      lo = hn::Mul(hn::Mul(a, k), s);
      hi = hn::Mul(hn::Mul(c, k), s);
    } else {
      const VF f = hn::Set(d, f1);
      lo = hn::Mul(a, f);
      hi = hn::Mul(c, f);
    }
  }
  template <int kO>
  HWY_INLINE bool Scales(int64_t o0, int64_t kb, float* f1, float* f2) const {
    bool big = false;
    for (int o = 0; o < kO; ++o) {
      const uint8_t byte = scale[(o0 + o) * blocks_in + kb];
      big |= byte > 240;
      f1[o] = byte > 240 ? 0.0f : Pow2(byte - 127 + 14);
      f2[o] = F32FromE8m0(byte);
    }
    return big;
  }
#endif
};

struct Bf16Decoder {
  static constexpr int64_t kBlockBytes = 2 * kBlock;
  const uint8_t* weight;
  int64_t row_bytes;

  static HWY_INLINE VF Widen(DF d, const uint8_t* p) {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::RebindToUnsigned<DF> du;
    const auto v = hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p)));
    return hn::BitCast(d, hn::ShiftLeft<16>(v));
  }
  template <bool kBig>
  static HWY_INLINE void DecodePair(DF d, const uint8_t* p, float, float, size_t j, VF& lo,
                                    VF& hi) {
    lo = Widen(d, p + 2 * j);
    hi = Widen(d, p + 2 * (16 + j));
  }
  template <int kO>
  HWY_INLINE bool Scales(int64_t, int64_t, float*, float*) const {
    return false;
  }
};

struct F32Decoder {
  static constexpr int64_t kBlockBytes = 4 * kBlock;
  const uint8_t* weight;
  int64_t row_bytes;

  template <bool kBig>
  static HWY_INLINE void DecodePair(DF d, const uint8_t* p, float, float, size_t j, VF& lo,
                                    VF& hi) {
    lo = hn::LoadU(d, reinterpret_cast<const float*>(p) + j);
    hi = hn::LoadU(d, reinterpret_cast<const float*>(p) + 16 + j);
  }
  template <int kO>
  HWY_INLINE bool Scales(int64_t, int64_t, float*, float*) const {
    return false;
  }
};

// One tile: output rows o0..o0+kO, input rows r0..r0+kR, all of K.
template <int kO, int kR, class Decoder>
HWY_INLINE void Tile(const Decoder& dec, const LinearArgs& a, int64_t o0, int64_t r0) {
  const DF d;
  const size_t n = hn::Lanes(d);
  const int64_t in = a.w->in;
  const int64_t full_blocks = in / kBlock;
  const int64_t blocks = a.in_pad / kBlock;
  const int64_t out = a.w->out;
  const uint8_t* base[kO];
  for (int o = 0; o < kO; ++o) base[o] = dec.weight + (o0 + o) * dec.row_bytes;
  const DD dd;
  const size_t nd = hn::Lanes(dd);
  VD acc[kO][kR];
  for (int o = 0; o < kO; ++o) {
    for (int r = 0; r < kR; ++r) acc[o][r] = hn::Zero(dd);
  }
  const double* x0 = a.xp + r0 * a.in_pad;
  auto body = [&](const uint8_t* const* p, const float* f1, const float* f2, int64_t kb,
                  auto big) HWY_ATTR {
    constexpr bool kBig = decltype(big)::value;
    const double* xb = x0 + kb * kBlock;
    for (size_t j = 0; j < 16; j += n) {
      VF lo[kO], hi[kO];
      for (int o = 0; o < kO; ++o) {
        Decoder::template DecodePair<kBig>(d, p[o], f1[o], f2[o], j, lo[o], hi[o]);
      }
      // Per lane chain: elements j, j + nd, 16 + j, 16 + j + nd (as in ChunkFma).
      for (int half = 0; half < 2; ++half) {
        for (int part = 0; part < kParts; ++part) {
          VD wd[kO];
          for (int o = 0; o < kO; ++o) wd[o] = WidenPart(half == 0 ? lo[o] : hi[o], part);
          const size_t k = j + 16 * static_cast<size_t>(half) + nd * static_cast<size_t>(part);
          for (int r = 0; r < kR; ++r) {
            const VD xd = hn::LoadU(dd, xb + r * a.in_pad + k);
            for (int o = 0; o < kO; ++o) acc[o][r] = hn::MulAdd(wd[o], xd, acc[o][r]);
          }
        }
      }
    }
  };
  HWY_ALIGN uint8_t tails[kO][Decoder::kBlockBytes];
  for (int64_t kb = 0; kb < blocks; ++kb) {
    const uint8_t* p[kO];
    if (HWY_LIKELY(kb < full_blocks)) {
      for (int o = 0; o < kO; ++o) p[o] = base[o] + kb * Decoder::kBlockBytes;
    } else {  // the zero-padded partial last block (in % 32 != 0; never MXFP4)
      const int64_t tail_bytes = (in - kb * kBlock) * Decoder::kBlockBytes / kBlock;
      for (int o = 0; o < kO; ++o) {
        std::memset(tails[o], 0, Decoder::kBlockBytes);
        std::memcpy(tails[o], base[o] + kb * Decoder::kBlockBytes, static_cast<size_t>(tail_bytes));
        p[o] = tails[o];
      }
    }
    float f1[kO], f2[kO];
    if (HWY_UNLIKELY(dec.template Scales<kO>(o0, kb, f1, f2))) {
      body(p, f1, f2, kb, std::true_type());
    } else {
      body(p, f1, f2, kb, std::false_type());
    }
  }
  for (int o = 0; o < kO; ++o) {
    for (int r = 0; r < kR; ++r) {
      a.y[(r0 + r) * out + o0 + o] = static_cast<float>(hn::GetLane(hn::SumOfLanes(dd, acc[o][r])));
    }
  }
}

// ---- many input rows: decode once, multiply from a buffer ----------------------------------
// With more rows than one register tile holds, decoding the weights again for every group of kR
// rows costs more than the FMAs. Instead the tile's weights are decoded chunk by chunk (kChunk
// elements of K, widened to fp64, L1-resident) into wbuf in xp's order, and every group of input
// rows runs its
// FMAs from there, its accumulators parked in accbuf between chunks. Each (output, input row)
// lane chain sees the same products in the same order as in Tile (block by block; within a block
// j = 0, n, ...: elements j, j + nd, 16 + j, 16 + j + nd), so both paths give the same bits.
inline constexpr int64_t kChunkBlocks = 16;
inline constexpr int64_t kChunk = kChunkBlocks * kBlock;

template <int kO, class Decoder>
HWY_INLINE void DecodeChunk(const Decoder& dec, const LinearArgs& a, int64_t o0, int64_t kb0,
                            int64_t nb, double* wbuf) {
  const DF d;
  const size_t n = hn::Lanes(d);
  const DD dd;
  const size_t nd = hn::Lanes(dd);
  const int64_t in = a.w->in;
  const int64_t full_blocks = in / kBlock;
  HWY_ALIGN uint8_t tails[kO][Decoder::kBlockBytes];
  for (int64_t kb = kb0; kb < kb0 + nb; ++kb) {
    const uint8_t* p[kO];
    for (int o = 0; o < kO; ++o) {
      const uint8_t* block = dec.weight + (o0 + o) * dec.row_bytes + kb * Decoder::kBlockBytes;
      if (HWY_LIKELY(kb < full_blocks)) {
        p[o] = block;
      } else {
        const int64_t tail_bytes = (in - kb * kBlock) * Decoder::kBlockBytes / kBlock;
        std::memset(tails[o], 0, Decoder::kBlockBytes);
        std::memcpy(tails[o], block, static_cast<size_t>(tail_bytes));
        p[o] = tails[o];
      }
    }
    float f1[kO], f2[kO];
    const bool big = dec.template Scales<kO>(o0, kb, f1, f2);
    for (int o = 0; o < kO; ++o) {
      double* dst = wbuf + o * kChunk + (kb - kb0) * kBlock;
      for (size_t j = 0; j < 16; j += n) {
        VF lo, hi;
        if (HWY_UNLIKELY(big)) {
          Decoder::template DecodePair<true>(d, p[o], f1[o], f2[o], j, lo, hi);
        } else {
          Decoder::template DecodePair<false>(d, p[o], f1[o], f2[o], j, lo, hi);
        }
        for (int part = 0; part < kParts; ++part) {
          hn::Store(WidenPart(lo, part), dd, dst + j + nd * part);
          hn::Store(WidenPart(hi, part), dd, dst + 16 + j + nd * part);
        }
      }
    }
  }
}

// FMAs of input rows r0..r0+kR with the decoded chunk (nb blocks from block kb0); accumulators in
// accbuf[(o · rows + r) · nd] (fp64), zero on the first chunk.
template <int kO, int kR>
HWY_INLINE void ChunkFma(const LinearArgs& a, const double* wbuf, int64_t kb0, int64_t nb,
                         int64_t r0, double* accbuf, bool first) {
  const size_t n = hn::Lanes(DF());
  const DD dd;
  const size_t nd = hn::Lanes(dd);
  VD acc[kO][kR];
  for (int o = 0; o < kO; ++o) {
    for (int r = 0; r < kR; ++r) {
      acc[o][r] = first ? hn::Zero(dd) : hn::Load(dd, accbuf + (o * a.rows + r0 + r) * nd);
    }
  }
  const double* x0 = a.xp + r0 * a.in_pad + kb0 * kBlock;
  for (int64_t b = 0; b < nb; ++b) {
    for (size_t j = 0; j < 16; j += n) {
      // The order of Tile: elements j, j + nd, 16 + j, 16 + j + nd of the block.
      for (int half = 0; half < 2; ++half) {
        for (int part = 0; part < kParts; ++part) {
          const size_t k = static_cast<size_t>(b * kBlock) + j + 16 * static_cast<size_t>(half) +
                           nd * static_cast<size_t>(part);
          VD wd[kO];
          for (int o = 0; o < kO; ++o) wd[o] = hn::Load(dd, wbuf + o * kChunk + k);
          for (int r = 0; r < kR; ++r) {
            const VD xd = hn::LoadU(dd, x0 + r * a.in_pad + k);
            for (int o = 0; o < kO; ++o) acc[o][r] = hn::MulAdd(wd[o], xd, acc[o][r]);
          }
        }
      }
    }
  }
  for (int o = 0; o < kO; ++o) {
    for (int r = 0; r < kR; ++r) hn::Store(acc[o][r], dd, accbuf + (o * a.rows + r0 + r) * nd);
  }
}

template <int kO, class Decoder>
HWY_INLINE void BufferedRowTile(const Decoder& dec, const LinearArgs& a, int64_t o0,
                                double* accbuf) {
  const DD dd;
  const size_t nd = hn::Lanes(dd);
  HWY_ALIGN double wbuf[kO * kChunk];
  const int64_t blocks = a.in_pad / kBlock;
  for (int64_t kb0 = 0; kb0 < blocks; kb0 += kChunkBlocks) {
    const int64_t nb = std::min(kChunkBlocks, blocks - kb0);
    DecodeChunk<kO>(dec, a, o0, kb0, nb, wbuf);
    int64_t r = 0;
    for (; r + kBufR <= a.rows; r += kBufR)
      ChunkFma<kO, kBufR>(a, wbuf, kb0, nb, r, accbuf, kb0 == 0);
    for (; r < a.rows; ++r) ChunkFma<kO, 1>(a, wbuf, kb0, nb, r, accbuf, kb0 == 0);
  }
  for (int o = 0; o < kO; ++o) {
    for (int64_t r = 0; r < a.rows; ++r) {
      const VD acc = blocks == 0 ? hn::Zero(dd) : hn::Load(dd, accbuf + (o * a.rows + r) * nd);
      a.y[r * a.w->out + o0 + o] = static_cast<float>(hn::GetLane(hn::SumOfLanes(dd, acc)));
    }
  }
}

// Rows <= kMaxR (decode, speculative drafts): one register tile covers them all, so each weight
// is decoded once.
template <int kO, class Decoder>
HWY_INLINE void RowTile(const Decoder& dec, const LinearArgs& a, int64_t o0) {
  switch (a.rows) {
    case 1:
      Tile<kO, 1>(dec, a, o0, 0);
      break;
    case 2:
      Tile<kO, 2>(dec, a, o0, 0);
      break;
    default:
      if constexpr (kMaxR >= 4) {
        if (a.rows == 3) {
          Tile<kO, 3>(dec, a, o0, 0);
        } else {
          Tile<kO, 4>(dec, a, o0, 0);
        }
      }
      break;
  }
}

template <class Decoder>
void RunRows(const Decoder& dec, const LinearArgs& a) {
  int64_t o = a.o_begin;
  if (a.rows > kMaxR) {
    const size_t nd = hn::Lanes(DD());
    auto accbuf = hwy::AllocateAligned<double>(static_cast<size_t>(kOTile * a.rows) * nd);
    for (; o + kOTile <= a.o_end; o += kOTile) BufferedRowTile<kOTile>(dec, a, o, accbuf.get());
    for (; o < a.o_end; ++o) BufferedRowTile<1>(dec, a, o, accbuf.get());
    return;
  }
  static_assert(kMaxR == 2 || kMaxR == 4);
  for (; o + kOTile <= a.o_end; o += kOTile) RowTile<kOTile>(dec, a, o);
  for (; o < a.o_end; ++o) RowTile<1>(dec, a, o);
}

// model.md §12.3 in place on rows of `stride` floats (zero-padded to a multiple of 32): per block
// of 32, s = Pow2Ceil(max(amax, 1e-4) · fp32(1/448)), y = clamp(x · (1/s), ±448) (exact: s is a
// power of two), value = e4m3(y) · s. The e4m3 RNE rounding without codes: for |y| >= 2^-6 round
// the fp32 bits to 3 mantissa bits (ties to even, carries into the exponent); below, where e4m3
// is subnormal with spacing 2^-9, (|y| + 2^14) − 2^14 rounds to that spacing (the ulp at 2^14 is
// 2^-9). Equal bit for bit to QuantizeActivationFq8B32 + DequantizeActivationFq8B32 (tested).
void QuantizeActivationsSimd(float* xp, int64_t rows, int64_t stride) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const size_t n = hn::Lanes(d);
  const VF kMax = hn::Set(d, kE4m3Max);
  const VF kSubnormalLimit = hn::Set(d, 0x1p-6f);
  const VF kMagic = hn::Set(d, 0x1p14f);
  const auto kHalfUlp = hn::Set(du, 0x7FFFFu);
  const auto kKeep = hn::Set(du, 0xFFF00000u);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < stride; b += kBlock) {
      float* block = xp + r * stride + b;
      VF amax_v = hn::Zero(d);
      for (size_t j = 0; j < static_cast<size_t>(kBlock); j += n) {
        amax_v = hn::Max(amax_v, hn::Abs(hn::LoadU(d, block + j)));
      }
      const float amax = std::max(hn::GetLane(hn::MaxOfLanes(d, amax_v)), 1e-4f);
      const float scale = Pow2Ceil(amax * (1.0f / 448.0f));
      const VF s = hn::Set(d, scale);
      const VF inv_s = hn::Set(d, 1.0f / scale);  // exact: a power of two
      for (size_t j = 0; j < static_cast<size_t>(kBlock); j += n) {
        const VF x = hn::LoadU(d, block + j);
        const VF y = hn::Min(hn::Max(hn::Mul(x, inv_s), hn::Neg(kMax)), kMax);
        const auto bits = hn::BitCast(du, y);
        const auto odd = hn::And(hn::ShiftRight<20>(bits), hn::Set(du, 1u));
        const VF normal = hn::BitCast(d, hn::And(hn::Add(bits, hn::Add(kHalfUlp, odd)), kKeep));
        const VF a = hn::Abs(y);
        const VF sub = hn::CopySignToAbs(hn::Sub(hn::Add(a, kMagic), kMagic), y);
        const VF q = hn::IfThenElse(hn::Lt(a, kSubnormalLimit), sub, normal);
        hn::StoreU(hn::Mul(q, s), d, block + j);
      }
    }
  }
}

void LinearRowsSimd(const LinearArgs& a) {
  const LinearWeight& w = *a.w;
  const auto* weight = reinterpret_cast<const uint8_t*>(w.weight.data());
  const auto* scale = reinterpret_cast<const uint8_t*>(w.scale.data());
  switch (w.format) {
    case WeightFormat::kBf16:
      RunRows(Bf16Decoder{weight, 2 * w.in}, a);
      break;
    case WeightFormat::kF32:
      RunRows(F32Decoder{weight, 4 * w.in}, a);
      break;
    case WeightFormat::kFp8Block:
      RunRows(Fp8Decoder{weight, w.in, scale, NumTiles(w.in)}, a);
      break;
    case WeightFormat::kMxfp4:
      RunRows(Mxfp4Decoder{weight, w.in / 2, scale, w.in / kBlock}, a);
      break;
  }
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(LinearRowsSimd);
HWY_EXPORT(QuantizeActivationsSimd);

namespace {

using linear_internal::kBlock;
using linear_internal::kOTile;
using linear_internal::LinearArgs;

std::span<const uint8_t> AsBytes(std::span<const std::byte> s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Bugs, not input: the model layer builds LinearWeight from validated checkpoint views.
void CheckShapes(const LinearWeight& w, std::span<const float> x, int64_t rows,
                 std::span<const float> y) {
  DSV41_CHECK(w.out >= 0 && w.in >= 0 && rows >= 0, "Linear: out %lld in %lld rows %lld",
              static_cast<long long>(w.out), static_cast<long long>(w.in),
              static_cast<long long>(rows));
  DSV41_CHECK(static_cast<int64_t>(x.size()) == rows * w.in, "Linear: x has %zu values, want %lld",
              x.size(), static_cast<long long>(rows * w.in));
  DSV41_CHECK(static_cast<int64_t>(y.size()) == rows * w.out, "Linear: y has %zu values, want %lld",
              y.size(), static_cast<long long>(rows * w.out));
  const int64_t n = w.out * w.in;
  switch (w.format) {
    case WeightFormat::kBf16:
      DSV41_CHECK(static_cast<int64_t>(w.weight.size()) == 2 * n && w.scale.empty(),
                  "Linear bf16: %zu weight bytes", w.weight.size());
      break;
    case WeightFormat::kF32:
      DSV41_CHECK(static_cast<int64_t>(w.weight.size()) == 4 * n && w.scale.empty(),
                  "Linear f32: %zu weight bytes", w.weight.size());
      break;
    case WeightFormat::kFp8Block:
      DSV41_CHECK(static_cast<int64_t>(w.weight.size()) == n &&
                      static_cast<int64_t>(w.scale.size()) == NumTiles(w.out) * NumTiles(w.in),
                  "Linear fp8: %zu weight bytes, %zu scale bytes", w.weight.size(), w.scale.size());
      break;
    case WeightFormat::kMxfp4:
      DSV41_CHECK(w.in % kMxfp4Block == 0 && static_cast<int64_t>(w.weight.size()) == n / 2 &&
                      static_cast<int64_t>(w.scale.size()) == n / kMxfp4Block,
                  "Linear mxfp4: in %lld, %zu weight bytes, %zu scale bytes",
                  static_cast<long long>(w.in), w.weight.size(), w.scale.size());
      break;
  }
}

// Row o of W, exactly dequantised into out[in].
void DequantizeRowRef(const LinearWeight& w, int64_t o, std::span<float> out) {
  const int64_t in = w.in;
  switch (w.format) {
    case WeightFormat::kBf16:
      for (int64_t i = 0; i < in; ++i) {
        uint16_t bits;
        std::memcpy(&bits, w.weight.data() + 2 * (o * in + i), 2);
        out[i] = F32FromBf16(bits);
      }
      break;
    case WeightFormat::kF32:
      if (in > 0) std::memcpy(out.data(), w.weight.data() + 4 * o * in, 4 * in);
      break;
    case WeightFormat::kFp8Block:
      DequantizeFp8Row(w.out, in, AsBytes(w.weight), AsBytes(w.scale), o, out);
      break;
    case WeightFormat::kMxfp4:
      DequantizeMxfp4Row(w.out, in, AsBytes(w.weight), AsBytes(w.scale), o, out);
      break;
  }
}

// The activations as the GEMM sees them (model.md §12.3), row r at out[r·stride]: x itself, or
// its fq8_b32 quantisation per block of 32 along K. A partial last block (in % 32 != 0, FP8 edge
// tiles) is quantised on its own elements: it is padded with zeros, which change neither its amax
// nor its other codes. out[r·stride + in .. stride) is zero.
void PrepareActivations(std::span<const float> x, int64_t rows, int64_t in, int64_t stride,
                        bool quantize, std::span<float> out) {
  const int64_t padded = NumTiles(in) * kBlock;
  DSV41_CHECK(stride >= padded);
  std::vector<uint8_t> codes(quantize ? padded : 0);
  std::vector<float> scales(quantize ? padded / kBlock : 0);
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<float> row = out.subspan(r * stride, stride);
    std::copy(x.begin() + r * in, x.begin() + (r + 1) * in, row.begin());
    std::fill(row.begin() + in, row.end(), 0.0f);
    if (quantize && in > 0) {
      QuantizeActivationFq8B32(row.first(padded), codes, scales);
      DequantizeActivationFq8B32(codes, scales, row.first(padded));
    }
  }
}

// Reorders each 32-block of every row to [16 even elements, 16 odd elements] (MXFP4 nibbles).
void DeinterleaveBlocks(std::span<float> xp) {
  float tmp[kBlock];
  for (size_t b = 0; b + kBlock <= xp.size(); b += kBlock) {
    for (int64_t j = 0; j < kBlock / 2; ++j) {
      tmp[j] = xp[b + 2 * j];
      tmp[kBlock / 2 + j] = xp[b + 2 * j + 1];
    }
    std::copy(tmp, tmp + kBlock, xp.begin() + b);
  }
}

}  // namespace

void LinearRef(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
               const LinearOptions& options) {
  CheckShapes(w, x, rows, y);
  const int64_t stride = NumTiles(w.in) * kBlock;
  std::vector<float> xq(rows * stride);
  PrepareActivations(x, rows, w.in, stride, options.quantize_activations, xq);
  std::vector<float> wrow(w.in);
  for (int64_t o = 0; o < w.out; ++o) {
    DequantizeRowRef(w, o, wrow);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = xq.data() + r * stride;
      double sum = 0.0;  // fp32 × fp32 products are exact in double
      for (int64_t i = 0; i < w.in; ++i) {
        sum += static_cast<double>(wrow[i]) * static_cast<double>(xr[i]);
      }
      y[r * w.out + o] = static_cast<float>(sum);
    }
  }
}

void Linear(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
            const LinearOptions& options, ThreadPool* pool) {
  CheckShapes(w, x, rows, y);
  if (rows == 0 || w.out == 0) return;
  const int64_t in_pad = NumTiles(w.in) * kBlock;
  thread_local std::vector<float> xp;
  xp.resize(rows * in_pad);
  PrepareActivations(x, rows, w.in, in_pad, /*quantize=*/false, xp);
  if (options.quantize_activations && w.in > 0) {
    HWY_DYNAMIC_DISPATCH(QuantizeActivationsSimd)(xp.data(), rows, in_pad);
  }
  if (w.format == WeightFormat::kMxfp4) DeinterleaveBlocks(xp);
  thread_local std::vector<double> xd;  // widened once here, not once per output tile
  xd.assign(xp.begin(), xp.end());

  LinearArgs args;
  args.w = &w;
  args.xp = xd.data();
  args.rows = rows;
  args.in_pad = in_pad;
  args.y = y.data();
  const auto run = HWY_DYNAMIC_DISPATCH(LinearRowsSimd);
  const int64_t tiles = (w.out + kOTile - 1) / kOTile;
  if (pool == nullptr || pool->num_threads() == 1 || tiles == 1) {
    args.o_begin = 0;
    args.o_end = w.out;
    run(args);
    return;
  }
  pool->ParallelFor(tiles, 1, [&](int64_t begin, int64_t end, int /*thread_idx*/) {
    LinearArgs part = args;
    part.o_begin = begin * kOTile;
    part.o_end = std::min(end * kOTile, w.out);
    run(part);
  });
}

}  // namespace dsv41
#endif  // HWY_ONCE

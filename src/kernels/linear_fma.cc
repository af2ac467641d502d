// The kFma Linear kernel: Highway, one body per compiled target, dispatched once per call.
//
// Weights are never expanded in memory: each weight vector is decoded exactly to fp32 (FP8 codes
// by their bits, MXFP4 nibbles through a table, byte lookups (AVX2) or binary16, bf16 by a shift)
// with its block scale applied (or, for FP8 in the register tiles, that scale on the input rows
// where exact), and FMA'd into fp32 accumulators. The fixed order, the same on every target: each
// (output o, input row r) pair owns 16 fp32 lanes per chunk of kChunk positions of K; lane l takes,
// for every 32-block of the chunk in order, the products of positions l and then 16 + l of the
// prepared row; at the chunk's end the lanes are added into 16 fp64 lane sums, which one fixed
// tree adds (Finish) and rounds to fp32 once (short fp32 runs, exact cross-lane sums: close to the
// exact sum). A target with N-lane vectors holds the 16 lanes in kVecs = 16 / N vectors: vector j
// takes positions [jN, jN + N) and then [16 + jN, 16 + jN + N). The register tiles (few rows,
// weights decoded in registers) and the buffered path (weights decoded once per row block into an
// L1 buffer, shared by every row group) run exactly that chain per pair, so a row's bits depend
// only on (format, in), never on the vector width, the rows beside it, the tiling or the thread
// split.
//
// MXFP4 positions: positions 0..15 of a 32-block hold its even elements (the low nibbles of its 16
// packed bytes), positions 16..31 its odd ones (the high nibbles). For the other formats positions
// are elements.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/check.h"
#include "kernels/linear_internal.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear_fma.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using linear_internal::kBlock;
using linear_internal::kRowBlock;

// The order's 16 lanes (half a 32-block: 16 packed MXFP4 bytes), in kVecs vectors of kN lanes.
inline constexpr size_t kLanes = 16;
using DF = hn::CappedTag<float, kLanes>;
using VF = hn::Vec<DF>;
inline constexpr size_t kN = hn::MaxLanes(DF());
inline constexpr size_t kVecs = kLanes / kN;
static_assert(kVecs * kN == kLanes);
// The fp64 lane sums: an fp32 vector widens into kParts fp64 vectors (its halves; the whole of it
// on the one-lane scalar target).
#if HWY_TARGET == HWY_SCALAR
using DH = DF;
inline constexpr int kParts = 1;
#else
using DH = hn::Half<DF>;
inline constexpr int kParts = 2;
#endif
using DD = hn::Rebind<double, DH>;
using VD = hn::Vec<DD>;

// Positions of K per fp32 run of a pair's accumulator (a multiple of 32).
inline constexpr int64_t kChunkBlocks = 16;
inline constexpr int64_t kChunk = kChunkBlocks * kBlock;

// Adds the N fp32 lanes of acc into N of the pair's fp64 lane sums (kept in memory); the first
// chunk's lanes are stored instead (the same bits as adding them to zeros: an fp32 accumulator is
// never −0).
HWY_INLINE void Flush(VF acc, double* sums, bool first) {
  const DD dd;
  const size_t nd = hn::Lanes(dd);
#if HWY_TARGET == HWY_SCALAR
  const VD parts[kParts] = {hn::PromoteTo(dd, acc)};
#else
  const VD parts[kParts] = {hn::PromoteTo(dd, hn::LowerHalf(DH(), acc)),
                            hn::PromoteTo(dd, hn::UpperHalf(DH(), acc))};
#endif
  DSV41_UNROLL
  for (int k = 0; k < kParts; ++k) {
    double* dst = sums + k * nd;
    hn::Store(first ? parts[k] : hn::Add(hn::Load(dd, dst), parts[k]), dd, dst);
  }
}

// Adds the lanes of v by halves: lanes i and i + n/2, then again, down to one.
template <class D>
HWY_INLINE double HalvingSum(D d, hn::Vec<D> v) {
#if HWY_TARGET == HWY_SCALAR
  return hn::GetLane(v);
#else
  if constexpr (hn::MaxLanes(d) == 1) {
    return hn::GetLane(v);
  } else {
    const hn::Half<D> dh;
    return HalvingSum(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  }
#endif
}

// The pair's result: its 16 fp64 lane sums l added by one tree — v[i] = l[i] + l[i + 8], then
// t[i] = v[i] + v[i + 4], u[i] = t[i] + t[i + 2], u[0] + u[1] — rounded once. The sums are
// kParts · kVecs vectors of consecutive lanes: adding the upper half of them to the lower half
// until one is left, then its lanes by halves, is that tree on every target.
HWY_INLINE float TreeSum(VD (&parts)[kParts * kVecs]) {
  DSV41_UNROLL
  for (size_t n = kParts * kVecs; n > 1; n /= 2) {
    DSV41_UNROLL
    for (size_t k = 0; k < n / 2; ++k) parts[k] = hn::Add(parts[k], parts[k + n / 2]);
  }
  return static_cast<float>(HalvingSum(DD(), parts[0]));
}

// The last chunk of a pair: its last vector's lanes (the pair's lanes [16 − N, 16)) in acc, the
// other vectors' already flushed into sums; Flush of acc, then Finish, without storing the sums.
HWY_INLINE float FlushFinish(VF acc, const double* sums, bool first) {
  const DD dd;
  const size_t nd = hn::Lanes(dd);
  VD parts[kParts * kVecs];
  constexpr size_t kFlushed = kParts * (kVecs - 1);
  DSV41_UNROLL
  for (size_t k = 0; k < kFlushed; ++k) parts[k] = hn::Load(dd, sums + k * nd);
#if HWY_TARGET == HWY_SCALAR
  parts[kFlushed] = hn::PromoteTo(dd, acc);
#else
  parts[kFlushed] = hn::PromoteTo(dd, hn::LowerHalf(DH(), acc));
  parts[kFlushed + 1] = hn::PromoteTo(dd, hn::UpperHalf(DH(), acc));
#endif
  if (!first) {
    DSV41_UNROLL
    for (size_t k = kFlushed; k < kFlushed + kParts; ++k) {
      parts[k] = hn::Add(hn::Load(dd, sums + k * nd), parts[k]);
    }
  }
  return TreeSum(parts);
}

// Accumulator vectors a tile may keep in registers, and the input rows of a register tile.
// The buffered path's row groups take their weights as memory operands: kO × kBufferedR
// accumulators and kBufferedR rows' x in registers.
#if HWY_TARGET <= HWY_AVX3
inline constexpr int kMaxR = 4;  // 32 vector registers: 4 × 4 accumulators + rows' x + weights
inline constexpr int kAccBudget = 16;
inline constexpr int kBufferedR = 4;
#else
inline constexpr int kMaxR = 2;
inline constexpr int kAccBudget = 8;  // 16 registers on AVX2 (the narrower targets: tests only)
inline constexpr int kBufferedR = 3;  // 12 accumulators + 3 rows' x
#endif

// 2^e as fp32 for a normal exponent (−126 <= e <= 127), by its bits.
HWY_INLINE float Pow2(int e) {
  const uint32_t bits = static_cast<uint32_t>(e + 127) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Every e8m0 byte's fp32 value (the codec's, 2^-127 and NaN included): a scale is one load.
inline constexpr std::array<float, 256> kE8m0Values = [] {
  std::array<float, 256> values{};
  for (int b = 0; b < 256; ++b) values[b] = F32FromE8m0(static_cast<uint8_t>(b));
  return values;
}();

// ---- per-format decoders. Scales<kO>(o0, kb, f1, f2) gives block kb's factors for rows
// o0..o0+kO and returns true when the block needs the exact two-step path;
// Decode<kBig>(d, p, f1, f2, j, v0, v1) gives positions [jN, jN + N) and [16 + jN, 16 + jN + N)
// of the block at p as exact fp32 weights.

// FP8 e4m3 by its bits: the sign-extended code shifted left by 20, the bits between sign and
// exponent cleared, is sign << 31 | (e4m3 & 0x7F) << 20: the e4m3 value times 2^-120 as fp32
// (three integer operations; the rare subnormal codes become fp32 denormals, exact, slower on
// some CPUs). The block factor is then 2^(b−127+120); a scale byte above 134 would overflow it,
// so such blocks take the two-step path (×2^120, then ×2^(b−127)). Either is one rounding of the
// exact product. The rows of a tile share one tile scale, so a register tile puts the factor on
// its input rows instead where that is exact (InputScaleBytes): then a weight vector costs the
// three integer operations and no multiply. (The NaN codes 0x7F/0xFF decode as numbers: a corrupt
// checkpoint, rejected where scanned.)
struct Fp8Decoder {
  static constexpr int64_t kBlockBytes = kBlock;
  // The widened code is the e4m3 value times 2^-kBias.
  static constexpr int kBias = 120;
  const uint8_t* weight;
  int64_t row_bytes;
  const uint8_t* scale;
  int64_t tiles_in;
  // The scale bytes whose factor a register tile puts on its input rows (InputScaleBytes); empty
  // by default.
  int input_lo = 1;
  int input_hi = 0;

  static HWY_INLINE VF Widen(DF d, const uint8_t* p) {
    const hn::Rebind<int8_t, DF> d8;
    const hn::RebindToSigned<DF> di;
    const auto code = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)));
    const auto keep = hn::Set(di, static_cast<int32_t>(0x87F00000u));  // sign, exponent's low 4
    return hn::BitCast(d, hn::And(hn::ShiftLeft<20>(code), keep));
  }
  // The weights times 2^-kBias, for a block whose factor is on the input (InputFactor).
  static HWY_INLINE void Raw(DF d, const uint8_t* p, size_t j, VF& v0, VF& v1) {
    v0 = Widen(d, p + j * kN);
    v1 = Widen(d, p + kLanes + j * kN);
  }
  // True when block kb's factor 2^(b−127+kBias) may multiply the input rows instead of the
  // weights; then *factor is it.
  HWY_INLINE bool InputFactor(int64_t o0, int64_t kb, float* factor) const {
    const int byte = scale[(o0 / kBlock) * tiles_in + kb];
    if (byte < input_lo || byte > input_hi) return false;
    *factor = Pow2(byte - 127 + kBias);
    return true;
  }
  template <bool kBig>
  static HWY_INLINE void Decode(DF d, const uint8_t* p, float f1, float f2, size_t j, VF& v0,
                                VF& v1) {
    const VF a = Widen(d, p + j * kN);
    const VF c = Widen(d, p + kLanes + j * kN);
    if constexpr (kBig) {
      const VF unbias = hn::Set(d, Pow2(kBias));
      const VF s = hn::Set(d, f2);
      v0 = hn::Mul(hn::Mul(a, unbias), s);
      v1 = hn::Mul(hn::Mul(c, unbias), s);
    } else {
      const VF f = hn::Set(d, f1);
      v0 = hn::Mul(a, f);
      v1 = hn::Mul(c, f);
    }
  }
  template <int kO>
  HWY_INLINE bool Scales(int64_t o0, int64_t kb, float* f1, float* f2) const {
    static_assert(kBlock % kO == 0, "a tile's rows share one 32-row group");
    const uint8_t byte = scale[(o0 / kBlock) * tiles_in + kb];
    const bool big = byte - 127 + kBias > 127;
    const float one = big ? 0.0f : Pow2(byte - 127 + kBias);
    const float two = big ? F32FromE8m0(byte) : 0.0f;
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      f1[o] = one;
      f2[o] = two;
    }
    return big;
  }
};

// MXFP4: packed bytes [jN, jN + N) hold positions [jN, jN + N) (their low nibbles, even elements)
// and [16 + jN, 16 + jN + N) (their high nibbles, odd elements).
struct Mxfp4Decoder {
  static constexpr int64_t kBlockBytes = kBlock / 2;
  const uint8_t* weight;
  int64_t row_bytes;
  const uint8_t* scale;
  int64_t blocks_in;

#if HWY_TARGET <= HWY_AVX2
  // Table lookups of e2m1 values times the block scale 2^(b−127) (exact: a power of two).
  template <bool kBig>
  static HWY_INLINE void Decode(DF d, const uint8_t* p, float f1, float /*f2*/, size_t j, VF& v0,
                                VF& v1) {
    const hn::Rebind<uint8_t, DF> d8;
    const hn::RebindToUnsigned<DF> du;
    const auto v = hn::PromoteTo(du, hn::LoadU(d8, p + j * kN));
#if HWY_TARGET <= HWY_AVX3
    // 16 lanes: the nibble indexes the 16 signed values.
    static_assert(kN == 16);
    const hn::RebindToSigned<DF> di;
    HWY_ALIGN static constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                                  4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                                  -2.0f, -3.0f, -4.0f, -6.0f};
    const VF table = hn::Mul(hn::Load(d, kE2m1), hn::Set(d, f1));
    const auto nlo = hn::BitCast(di, hn::And(v, hn::Set(du, 0xFu)));
    const auto nhi = hn::BitCast(di, hn::ShiftRight<4>(v));
    v0 = hn::TableLookupLanes(table, hn::IndicesFromVec(d, nlo));
    v1 = hn::TableLookupLanes(table, hn::IndicesFromVec(d, nhi));
#else
    // 8 lanes: vpermps reads the low 3 bits of each index, i.e. a nibble's magnitude bits. The
    // table holds magnitude m times the scale with m << 28 XORed in, so XORing the nibble << 28
    // back clears those bits and sets the sign from the nibble's top bit.
    static_assert(kN == 8);
    HWY_ALIGN static constexpr float kE2m1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f,
                                                           2.0f, 3.0f, 4.0f, 6.0f};
    HWY_ALIGN static constexpr uint32_t kIndexBits[8] = {0u << 28, 1u << 28, 2u << 28, 3u << 28,
                                                         4u << 28, 5u << 28, 6u << 28, 7u << 28};
    const __m256 table = _mm256_xor_ps(
        _mm256_mul_ps(_mm256_load_ps(kE2m1Magnitudes), _mm256_set1_ps(f1)),
        _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(kIndexBits))));
    const __m256i lo = v.raw;
    const __m256i hi = _mm256_srli_epi32(lo, 4);
    v0 = VF{_mm256_xor_ps(_mm256_permutevar8x32_ps(table, lo),
                          _mm256_castsi256_ps(_mm256_slli_epi32(lo, 28)))};
    v1 = VF{_mm256_xor_ps(_mm256_permutevar8x32_ps(table, hi),
                          _mm256_castsi256_ps(_mm256_slli_epi32(hi, 28)))};
#endif
  }
#if HWY_TARGET == HWY_AVX2
  // The whole block at once, without the lane-crossing vpermps (on Zen 3 the two of 16 weights
  // took about half of Decode's time, in a standalone loop): in-lane byte lookups give each
  // nibble's signed e2m1 value as bf16 (exact: at most two significant bits), and one multiply
  // applies the block scale — the same product as the table's scaled magnitude, so the same
  // weights. v[2j] holds positions [8j, 8j + 8) and v[2j + 1] positions [16 + 8j, 16 + 8j + 8),
  // the order's vectors, so the rows' inputs keep their layout. The bf16 values are arranged so
  // that a 32-bit lane's low half holds a position of [0, 8) (or [16, 24)) and its high half the
  // position 8 further: a shift and a mask widen them to fp32 in place. So the index's 128-bit
  // half 0 takes the low nibbles of bytes 0, 8, 1, 9, 2, 10, 3, 11, then their high nibbles, and
  // half 1 bytes 4, 12, …, 7, 15 likewise.
  static HWY_INLINE void DecodeBlock(const uint8_t* p, float f1, VF (&v)[2 * kVecs]) {
    const __m256i spread = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 0, 8, 1, 9, 2, 10, 3, 11,  //
                                            4, 12, 5, 13, 6, 14, 7, 15, 4, 12, 5, 13, 6, 14, 7, 15);
    // bf16 of e2m1 codes 0..15 (0, 0.5, 1, 1.5, 2, 3, 4, 6, then the same negated), split into
    // their high and low bytes.
    const __m256i high_bytes = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, static_cast<char>(0x80),
                      static_cast<char>(0xBF), static_cast<char>(0xBF), static_cast<char>(0xBF),
                      static_cast<char>(0xC0), static_cast<char>(0xC0), static_cast<char>(0xC0),
                      static_cast<char>(0xC0)));
    const __m256i low_bytes = _mm256_broadcastsi128_si256(_mm_setr_epi8(
        0x00, 0x00, static_cast<char>(0x80), static_cast<char>(0xC0), 0x00, 0x40,
        static_cast<char>(0x80), static_cast<char>(0xC0), 0x00, 0x00, static_cast<char>(0x80),
        static_cast<char>(0xC0), 0x00, 0x40, static_cast<char>(0x80), static_cast<char>(0xC0)));
    const __m256i raw =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i nibbles = _mm256_and_si256(
        _mm256_srlv_epi64(_mm256_shuffle_epi8(raw, spread), _mm256_setr_epi64x(0, 4, 0, 4)),
        _mm256_set1_epi8(0x0F));
    const __m256i high = _mm256_shuffle_epi8(high_bytes, nibbles);
    const __m256i low = _mm256_shuffle_epi8(low_bytes, nibbles);
    const __m256i first = _mm256_unpacklo_epi8(low, high);   // positions 0-15 as bf16
    const __m256i second = _mm256_unpackhi_epi8(low, high);  // positions 16-31
    const __m256i upper = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m256 scale = _mm256_set1_ps(f1);
    v[0] = VF{_mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(first, 16)), scale)};
    v[1] = VF{_mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(second, 16)), scale)};
    v[2] = VF{_mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(first, upper)), scale)};
    v[3] = VF{_mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(second, upper)), scale)};
  }
#endif
  template <int kO>
  HWY_INLINE bool Scales(int64_t o0, int64_t kb, float* f1, float* f2) const {
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      f1[o] = kE8m0Values[scale[(o0 + o) * blocks_in + kb]];
      f2[o] = 0.0f;
    }
    return false;
  }
#else
  // Fewer lanes: e2m1 through binary16: bits = sign << 15 | magnitude << 9 is the value times
  // 2^-14 (its subnormal 0.5 too); factor 2^(b−127+14), two-step above byte 240.
  static HWY_INLINE VF Widen(DF d, hn::Vec<hn::Rebind<uint16_t, DF> > n) {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto bits = hn::Or(hn::ShiftLeft<9>(hn::And(n, hn::Set(d16, uint16_t{7}))),
                             hn::ShiftLeft<12>(hn::And(n, hn::Set(d16, uint16_t{8}))));
    return hn::PromoteTo(d, hn::BitCast(dh, bits));
  }
  template <bool kBig>
  static HWY_INLINE void Decode(DF d, const uint8_t* p, float f1, float f2, size_t j, VF& v0,
                                VF& v1) {
    const hn::Rebind<uint8_t, DF> d8;
    const hn::Rebind<uint16_t, DF> d16;
    const auto v = hn::PromoteTo(d16, hn::LoadU(d8, p + j * kN));
    const VF a = Widen(d, hn::And(v, hn::Set(d16, uint16_t{0xF})));
    const VF c = Widen(d, hn::ShiftRight<4>(v));
    if constexpr (kBig) {
      const VF k = hn::Set(d, 16384.0f);
      const VF s = hn::Set(d, f2);
      v0 = hn::Mul(hn::Mul(a, k), s);
      v1 = hn::Mul(hn::Mul(c, k), s);
    } else {
      const VF f = hn::Set(d, f1);
      v0 = hn::Mul(a, f);
      v1 = hn::Mul(c, f);
    }
  }
  template <int kO>
  HWY_INLINE bool Scales(int64_t o0, int64_t kb, float* f1, float* f2) const {
    bool big = false;
    DSV41_UNROLL
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
  static HWY_INLINE void Decode(DF d, const uint8_t* p, float, float, size_t j, VF& v0, VF& v1) {
    v0 = Widen(d, p + 2 * (j * kN));
    v1 = Widen(d, p + 2 * (kLanes + j * kN));
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
  static HWY_INLINE void Decode(DF d, const uint8_t* p, float, float, size_t j, VF& v0, VF& v1) {
    v0 = hn::LoadU(d, reinterpret_cast<const float*>(p) + j * kN);
    v1 = hn::LoadU(d, reinterpret_cast<const float*>(p) + kLanes + j * kN);
  }
  template <int kO>
  HWY_INLINE bool Scales(int64_t, int64_t, float*, float*) const {
    return false;
  }
};

struct Args {
  const LinearWeight* w;
  const float* x;  // prepared rows [rows, stride]
  int64_t rows;
  int64_t stride;
  float* y;
  int64_t y_stride;
};

// Decoders that decode a whole block at once (DecodeBlock: the order's 2 · kVecs vectors, v[2j]
// and v[2j + 1] as Decode's v0 and v1 for j), and whose Scales never ask for the two-step path.
template <class Decoder>
inline constexpr bool kDecodesBlocks = requires(const uint8_t* p, float f, VF (&v)[2 * kVecs]) {
  Decoder::DecodeBlock(p, f, v);
};

// Decoders whose block factor a register tile may put on its input rows (Fp8Decoder).
template <class Decoder>
inline constexpr bool kScalesInput = requires(const Decoder& dec, float* f) {
  dec.InputFactor(int64_t{0}, int64_t{0}, f);
};

// The FP8 scale bytes b for which FMA(w · 2^-120, x · 2^(b−7)) equals FMA(w · 2^(b−127), x) for
// every weight w and every input x of the rows: x · 2^(b−7) exact (zero or normal: x normal, its
// exponent plus b − 7 within [−126, 127]); w · 2^(b−127) is exact for every b <= 134 (its lowest
// bit is at least 2^-9 · 2^-127, above fp32's 2^-149), so both FMAs round the same exact product.
// Empty when an input is subnormal, infinite or NaN.
void InputScaleBytes(const Args& a, int* lo, int* hi) {
  const DF d;
  const VF inf = hn::Set(d, std::numeric_limits<float>::infinity());
  VF max_abs = hn::Zero(d);
  VF min_nonzero = inf;
  const int64_t count = a.rows * a.stride;  // rows of stride floats, a multiple of 32
  for (int64_t i = 0; i < count; i += static_cast<int64_t>(kN)) {
    const VF magnitude = hn::Abs(hn::LoadU(d, a.x + i));
    const VF v = hn::IfThenElse(hn::IsNaN(magnitude), inf, magnitude);  // NaN empties the range
    max_abs = hn::Max(max_abs, v);
    min_nonzero = hn::Min(min_nonzero, hn::IfThenElse(hn::Eq(v, hn::Zero(d)), inf, v));
  }
  const float largest = hn::GetLane(hn::MaxOfLanes(d, max_abs));
  const float smallest = hn::GetLane(hn::MinOfLanes(d, min_nonzero));
  *lo = 1;
  *hi = 0;
  if (!(largest < std::numeric_limits<float>::infinity())) return;
  if (largest == 0.0f) {
    *lo = 0;
    *hi = 127 + 7;
    return;
  }
  if (smallest < std::numeric_limits<float>::min()) return;
  const auto exponent = [](float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return static_cast<int>(bits >> 23) - 127;
  };
  *lo = std::max(0, -126 - exponent(smallest) + 7);
  *hi = std::min(127 + 7, 127 - exponent(largest) + 7);
}

// Pointers to block kb of rows o0..o0+kO (the zero-padded copy in `tails` for a partial last
// block: in % 32 != 0, never MXFP4).
template <int kO, class Decoder>
HWY_INLINE void BlockPointers(const Decoder& dec, const Args& a, int64_t o0, int64_t kb,
                              const uint8_t** p, uint8_t (*tails)[Decoder::kBlockBytes]) {
  const int64_t in = a.w->in;
  DSV41_UNROLL
  for (int o = 0; o < kO; ++o) {
    const uint8_t* block = dec.weight + (o0 + o) * dec.row_bytes + kb * Decoder::kBlockBytes;
    if (HWY_LIKELY((kb + 1) * kBlock <= in)) {
      p[o] = block;
    } else {
      const int64_t tail_bytes = (in - kb * kBlock) * Decoder::kBlockBytes / kBlock;
      std::memset(tails[o], 0, Decoder::kBlockBytes);
      std::memcpy(tails[o], block, static_cast<size_t>(tail_bytes));
      p[o] = tails[o];
    }
  }
}

// ---- register tile: output rows o0..o0+kO × input rows r0..r0+kR, all of K ---------------------
// The first chunk's Flush stores every lane sum before any is read; GCC does not follow the flag.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <int kO, int kR, class Decoder>
HWY_INLINE void Tile(const Decoder& dec, const Args& a, int64_t o0, int64_t r0) {
  const DF d;
  const int64_t blocks = a.stride / kBlock;
  HWY_ALIGN double sums[kO][kR][kLanes];
  const float* x0 = a.x + r0 * a.stride;
  HWY_ALIGN uint8_t tails[kO][Decoder::kBlockBytes];
  for (int64_t kb0 = 0; kb0 < blocks; kb0 += kChunkBlocks) {
    const int64_t kb_end = std::min(blocks, kb0 + kChunkBlocks);
    const bool first = kb0 == 0;
    const bool last = kb_end == blocks;
    VF acc[kO][kR][kVecs];
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      DSV41_UNROLL
      for (int r = 0; r < kR; ++r) {
        DSV41_UNROLL
        for (size_t j = 0; j < kVecs; ++j) acc[o][r][j] = hn::Zero(d);
      }
    }
    for (int64_t kb = kb0; kb < kb_end; ++kb) {
      const uint8_t* p[kO];
      BlockPointers<kO>(dec, a, o0, kb, p, tails);
      DSV41_UNROLL
      for (int o = 0; o < kO; ++o) {
        linear_internal::PrefetchWeights(p[o] + linear_internal::kPrefetchBytes);
      }
      float f1[kO], f2[kO];
      const bool big = dec.template Scales<kO>(o0, kb, f1, f2);
      float input_factor = 1.0f;
      bool on_input = false;
      if constexpr (kScalesInput<Decoder>) on_input = dec.InputFactor(o0, kb, &input_factor);
      const float* xb = x0 + kb * kBlock;
      if constexpr (kDecodesBlocks<Decoder>) {
        DSV41_DCHECK(!big, "a block decoder has no two-step path");
        // One output's block at a time; the inputs come from L1 for each output.
        DSV41_UNROLL
        for (int o = 0; o < kO; ++o) {
          VF v[2 * kVecs];
          Decoder::DecodeBlock(p[o], f1[o], v);
          DSV41_UNROLL
          for (size_t j = 0; j < kVecs; ++j) {
            DSV41_UNROLL
            for (int r = 0; r < kR; ++r) {
              const float* xr = xb + r * a.stride + j * kN;
              acc[o][r][j] = hn::MulAdd(v[2 * j], hn::LoadU(d, xr), acc[o][r][j]);
              acc[o][r][j] = hn::MulAdd(v[2 * j + 1], hn::LoadU(d, xr + kLanes), acc[o][r][j]);
            }
          }
        }
        continue;
      }
      DSV41_UNROLL
      for (size_t j = 0; j < kVecs; ++j) {
        VF x0v[kR], x1v[kR];
        DSV41_UNROLL
        for (int r = 0; r < kR; ++r) {
          x0v[r] = hn::LoadU(d, xb + r * a.stride + j * kN);
          x1v[r] = hn::LoadU(d, xb + r * a.stride + kLanes + j * kN);
          if (on_input) {
            x0v[r] = hn::Mul(x0v[r], hn::Set(d, input_factor));
            x1v[r] = hn::Mul(x1v[r], hn::Set(d, input_factor));
          }
        }
        DSV41_UNROLL
        for (int o = 0; o < kO; ++o) {
          VF v0, v1;
          if constexpr (kScalesInput<Decoder>) {
            if (on_input) Decoder::Raw(d, p[o], j, v0, v1);
          }
          if (!on_input) {
            if (HWY_UNLIKELY(big)) {
              Decoder::template Decode<true>(d, p[o], f1[o], f2[o], j, v0, v1);
            } else {
              Decoder::template Decode<false>(d, p[o], f1[o], f2[o], j, v0, v1);
            }
          }
          DSV41_UNROLL
          for (int r = 0; r < kR; ++r) {
            acc[o][r][j] = hn::MulAdd(v0, x0v[r], acc[o][r][j]);
            acc[o][r][j] = hn::MulAdd(v1, x1v[r], acc[o][r][j]);
          }
        }
      }
    }
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      DSV41_UNROLL
      for (int r = 0; r < kR; ++r) {
        DSV41_UNROLL
        for (size_t j = 0; j + 1 < kVecs; ++j) Flush(acc[o][r][j], sums[o][r] + j * kN, first);
        if (last) {
          a.y[(r0 + r) * a.y_stride + o0 + o] =
              FlushFinish(acc[o][r][kVecs - 1], sums[o][r], first);
        } else {
          Flush(acc[o][r][kVecs - 1], sums[o][r] + (kVecs - 1) * kN, first);
        }
      }
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Tile<kO, kR>, as output tiles narrow enough for the target's registers (the same chains).
template <int kO, int kR, class Decoder>
HWY_INLINE void FittedTile(const Decoder& dec, const Args& a, int64_t o0, int64_t r0) {
  if constexpr (kO > 1 && kO * kR * static_cast<int>(kVecs) > kAccBudget) {
    FittedTile<kO / 2, kR>(dec, a, o0, r0);
    FittedTile<kO - kO / 2, kR>(dec, a, o0 + kO / 2, r0);
  } else {
    Tile<kO, kR>(dec, a, o0, r0);
  }
}

template <int kO, class Decoder>
HWY_INLINE void RowTiles(const Decoder& dec, const Args& a, int64_t o0) {
  int64_t r = 0;
  if constexpr (kMaxR >= 4) {
    for (; r + 4 <= a.rows; r += 4) FittedTile<kO, 4>(dec, a, o0, r);
    if (a.rows - r == 3) {
      FittedTile<kO, 3>(dec, a, o0, r);
      return;
    }
  }
  for (; r + 2 <= a.rows; r += 2) FittedTile<kO, 2>(dec, a, o0, r);
  if (r < a.rows) FittedTile<kO, 1>(dec, a, o0, r);
}

// ---- buffered: many input rows -----------------------------------------------------------------
// For a row block of up to kRowBlock rows, the kO weight rows of a tile are decoded chunk by
// chunk (one fp32 run, kChunk positions, exact fp32, L1-resident) into wbuf in position order, and
// every group of rows FMAs from there into its fp64 lane sums in sumbuf: the same chain per pair
// as Tile.
template <int kO, class Decoder>
HWY_INLINE void DecodeChunk(const Decoder& dec, const Args& a, int64_t o0, int64_t kb0, int64_t nb,
                            float* wbuf) {
  const DF d;
  HWY_ALIGN uint8_t tails[kO][Decoder::kBlockBytes];
  for (int64_t kb = kb0; kb < kb0 + nb; ++kb) {
    const uint8_t* p[kO];
    BlockPointers<kO>(dec, a, o0, kb, p, tails);
    float f1[kO], f2[kO];
    const bool big = dec.template Scales<kO>(o0, kb, f1, f2);
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      linear_internal::PrefetchWeights(p[o] + linear_internal::kPrefetchBytes);
      float* dst = wbuf + o * kChunk + (kb - kb0) * kBlock;
      if constexpr (kDecodesBlocks<Decoder>) {
        DSV41_DCHECK(!big, "a block decoder has no two-step path");
        VF v[2 * kVecs];
        Decoder::DecodeBlock(p[o], f1[o], v);
        DSV41_UNROLL
        for (size_t j = 0; j < kVecs; ++j) {
          hn::Store(v[2 * j], d, dst + j * kN);
          hn::Store(v[2 * j + 1], d, dst + kLanes + j * kN);
        }
        continue;
      }
      DSV41_UNROLL
      for (size_t j = 0; j < kVecs; ++j) {
        VF v0, v1;
        if (HWY_UNLIKELY(big)) {
          Decoder::template Decode<true>(d, p[o], f1[o], f2[o], j, v0, v1);
        } else {
          Decoder::template Decode<false>(d, p[o], f1[o], f2[o], j, v0, v1);
        }
        hn::Store(v0, d, dst + j * kN);
        hn::Store(v1, d, dst + kLanes + j * kN);
      }
    }
  }
}

// Buffered outputs o0..o0+kO × rows r0..r0+kR of the chunk (nb blocks from block kb0),
// flushed into the fp64 lane sums sumbuf[(o · kRowBlock + r − row_base) · 16] (stored by the
// first chunk; the last chunk's results go to y). The vectors of the 16 lanes are independent
// chains, so each runs over the whole chunk in turn (kO · kR accumulators at a time).
template <int kO, int kR>
HWY_INLINE void ChunkFma(const Args& a, const float* wbuf, int64_t o0, int64_t kb0, int64_t nb,
                         bool first, bool last, int64_t r0, int64_t row_base, double* sumbuf) {
  const DF d;
  const float* x0 = a.x + r0 * a.stride + kb0 * kBlock;
  const size_t positions = static_cast<size_t>(nb * kBlock);
  for (size_t j = 0; j < kVecs; ++j) {
    VF acc[kO][kR];
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      DSV41_UNROLL
      for (int r = 0; r < kR; ++r) acc[o][r] = hn::Zero(d);
    }
    for (size_t k = j * kN; k < positions; k += kBlock) {
      // Positions k.. and then k + 16.. of every pair.
      DSV41_UNROLL
      for (size_t half = 0; half < 2 * kLanes; half += kLanes) {
        VF xv[kR];
        DSV41_UNROLL
        for (int r = 0; r < kR; ++r) xv[r] = hn::LoadU(d, x0 + r * a.stride + k + half);
        DSV41_UNROLL
        for (int o = 0; o < kO; ++o) {
          const VF v = hn::Load(d, wbuf + o * kChunk + k + half);
          DSV41_UNROLL
          for (int r = 0; r < kR; ++r) acc[o][r] = hn::MulAdd(v, xv[r], acc[o][r]);
        }
      }
    }
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      DSV41_UNROLL
      for (int r = 0; r < kR; ++r) {
        double* sums = sumbuf + (o * kRowBlock + r0 + r - row_base) * kLanes;
        if (last && j + 1 == kVecs) {
          a.y[(r0 + r) * a.y_stride + o0 + o] = FlushFinish(acc[o][r], sums, first);
        } else {
          Flush(acc[o][r], sums + j * kN, first);
        }
      }
    }
  }
}

template <int kO, class Decoder>
HWY_INLINE void BufferedTile(const Decoder& dec, const Args& a, int64_t o0, int64_t row_base,
                             int64_t row_end, float* wbuf, double* sumbuf) {
  const int64_t blocks = a.stride / kBlock;
  for (int64_t kb0 = 0; kb0 < blocks; kb0 += kChunkBlocks) {
    const int64_t nb = std::min(kChunkBlocks, blocks - kb0);
    const bool first = kb0 == 0;
    const bool last = kb0 + nb == blocks;
    DecodeChunk<kO>(dec, a, o0, kb0, nb, wbuf);
    int64_t r = row_base;
    for (; r + kBufferedR <= row_end; r += kBufferedR) {
      ChunkFma<kO, kBufferedR>(a, wbuf, o0, kb0, nb, first, last, r, row_base, sumbuf);
    }
    if (row_end - r >= 2) {
      ChunkFma<kO, 2>(a, wbuf, o0, kb0, nb, first, last, r, row_base, sumbuf);
      r += 2;
    }
    if (r < row_end) ChunkFma<kO, 1>(a, wbuf, o0, kb0, nb, first, last, r, row_base, sumbuf);
  }
}

template <class Decoder>
void RunOutputs(const Decoder& dec, const Args& a, int64_t o_begin, int64_t o_end) {
  constexpr int kO = 4;
  // Single rows up to the next multiple of kO keep every tile inside one 32-row FP8 group.
  int64_t o = o_begin;
  const int64_t aligned = std::min(o_end, (o_begin + kO - 1) / kO * kO);
  if (a.rows <= kMaxR) {
    for (; o < aligned; ++o) RowTiles<1>(dec, a, o);
    for (; o + kO <= o_end; o += kO) RowTiles<kO>(dec, a, o);
    for (; o < o_end; ++o) RowTiles<1>(dec, a, o);
    return;
  }
  HWY_ALIGN float wbuf[kO * kChunk];
  HWY_ALIGN double sumbuf[kO * kRowBlock * kLanes];
  for (int64_t row_base = 0; row_base < a.rows; row_base += kRowBlock) {
    const int64_t row_end = std::min(a.rows, row_base + kRowBlock);
    int64_t t = o_begin;
    for (; t < aligned; ++t) BufferedTile<1>(dec, a, t, row_base, row_end, wbuf, sumbuf);
    for (; t + kO <= o_end; t += kO) BufferedTile<kO>(dec, a, t, row_base, row_end, wbuf, sumbuf);
    for (; t < o_end; ++t) BufferedTile<1>(dec, a, t, row_base, row_end, wbuf, sumbuf);
  }
}

void FmaOutputsSimd(const LinearWeight& w, const float* x, int64_t rows, int64_t stride,
                    int64_t o_begin, int64_t o_end, float* y, int64_t y_stride) {
  const Args a{&w, x, rows, stride, y, y_stride};
  if (stride == 0) {  // in == 0: empty sums
    for (int64_t r = 0; r < rows; ++r)
      std::fill(y + r * y_stride + o_begin, y + r * y_stride + o_end, 0.0f);
    return;
  }
  const auto* weight = reinterpret_cast<const uint8_t*>(w.weight.data());
  const auto* scale = reinterpret_cast<const uint8_t*>(w.scale.data());
  switch (w.format) {
    case WeightFormat::kBf16:
      RunOutputs(Bf16Decoder{weight, 2 * w.in}, a, o_begin, o_end);
      break;
    case WeightFormat::kF32:
      RunOutputs(F32Decoder{weight, 4 * w.in}, a, o_begin, o_end);
      break;
    case WeightFormat::kFp8Block: {
      Fp8Decoder dec{weight, w.in, scale, NumTiles(w.in)};
      if (rows <= kMaxR) InputScaleBytes(a, &dec.input_lo, &dec.input_hi);
      RunOutputs(dec, a, o_begin, o_end);
      break;
    }
    case WeightFormat::kMxfp4:
      RunOutputs(Mxfp4Decoder{weight, w.in / 2, scale, w.in / kBlock}, a, o_begin, o_end);
      break;
  }
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

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41::linear_internal {
HWY_EXPORT(FmaOutputsSimd);
HWY_EXPORT(QuantizeActivationsSimd);

int64_t FmaStride(const LinearWeight& w) { return NumTiles(w.in) * kBlock; }

void FmaOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                float* y, int64_t y_stride) {
  DSV41_DCHECK(x.kernel == GemmKernel::kFma && x.format == w.format && x.in == w.in,
               "prepared input does not match the weight");
  HWY_DYNAMIC_DISPATCH(FmaOutputsSimd)(w, x.f32, x.rows, x.stride, o_begin, o_end, y, y_stride);
}

void QuantizeActivations(float* x, int64_t rows, int64_t stride) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationsSimd)(x, rows, stride);
}

// The positions of each MXFP4 32-block of a prepared row: its even elements, then its odd ones.
void FmaReorderMxfp4(float* x, int64_t rows, int64_t stride) {
  float tmp[kBlock];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < stride; b += kBlock) {
      float* block = x + r * stride + b;
      for (int64_t i = 0; i < kBlock / 2; ++i) {
        tmp[i] = block[2 * i];
        tmp[kBlock / 2 + i] = block[2 * i + 1];
      }
      std::copy(tmp, tmp + kBlock, block);
    }
  }
}

}  // namespace dsv41::linear_internal
#endif  // HWY_ONCE

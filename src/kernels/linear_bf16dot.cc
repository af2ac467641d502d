// The kBf16Dot Linear kernel: x86-64 with AVX512-BF16 (VDPBF16PS) and AVX512-VBMI, written with
// intrinsics in functions compiled for those features and called only when the CPU has them
// (Highway 1.0 has no bf16 dot-product op). Where the dot product is the faster unit (AMD Zen 4
// runs it at twice the fp32 FMA rate) it is the default fast kernel.
//
// Every weight is decoded exactly to bf16: e4m3 codes through two 128-entry byte tables (VPERMI2B,
// the bf16 bits' high and low bytes), e2m1 nibbles through one 16-entry table of bf16 words
// (VPERMW: a word's four nibbles shifted down in turn, one instruction each), bf16 as stored. One
// VDPBF16PS multiplies 32 bf16 pairs exactly and adds each fp32 lane's two products to the lane's
// accumulator. The prepared activations are bf16 (exact: fq8_b32 values or the caller's bf16
// values) in the order the weight decode produces (see SourceElement).
//
// Block scales:
//   FP8    the 32×32 tile scale 2^s is added to the decoded bf16 exponents of non-zero weights
//   (exact
//          while the result stays a normal bf16: scale bytes 10..246); a superblock with a byte
//          outside that range is instead dotted unscaled into a zero partial and added to the
//          accumulator as FMA(partial, 2^s, acc).
//   MXFP4  always the second form: per 64-byte superblock (4 blocks of 32, one per 128-bit lane),
//          partial = four chained dot products from zero, acc = FMA(partial, scale vector, acc).
// The fixed order: each (output, input row) pair has one fp32 accumulator vector per chunk of
// kChunkElements of K, a chain over the chunk's superblocks in order; at the chunk's end its 16
// lanes are added into 16 fp64 lane sums, which are summed (fixed tree) and rounded to fp32 once.
// The fp32 runs stay short and the cross-lane sums exact, so the result is far closer to the
// exact sum than an fp32 reduction (small models turn one flipped bf16 rounding downstream into
// O(1) logit changes). The register tiles and the buffered path run the same chain, so results do
// not depend on the batch, the tiling or the thread split.
// Domain: VDPBF16PS flushes bf16 inputs and fp32 results below 2^-126 to zero, so products of
// unscaled weights with x must stay above that — always so for fq8_b32 activations (|x| >= 2^-31
// or 0) and for any activation a model computes; raw inputs near 2^-120 are outside it.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/check.h"
#include "kernels/linear_internal.h"
#include "kernels/simd_cap.h"
#include "numerics/block_quant.h"
#include "numerics/codecs.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DSV41_HAVE_BF16DOT 1
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics start their masked builtins from _mm512_undefined_*() and then warn
// about it where they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#else
#define DSV41_HAVE_BF16DOT 0
#endif

namespace dsv41::linear_internal {
namespace {

inline bool Likely(bool b) { return __builtin_expect(b, 1); }
inline bool Unlikely(bool b) { return __builtin_expect(b, 0); }

constexpr int64_t SuperblockElements(WeightFormat format) {
  switch (format) {
    case WeightFormat::kFp8Block:
      return 64;
    case WeightFormat::kMxfp4:
      return 128;
    default:
      return 32;
  }
}

// The element of a superblock (within it) that bf16 word `p` of the decoded superblock holds.
// Word p is word i = p % 32 of vector z = p / 32, in 128-bit lane L = i / 8 at j = i % 8;
// for FP8, unpacklo/unpackhi (z even/odd) take bytes 0..7 / 8..15 of each lane.
int64_t SourceElement(WeightFormat format, int64_t p) {
  const int64_t z = p / 32, i = p % 32, lane = i / 8, j = i % 8;
  switch (format) {
    case WeightFormat::kFp8Block:  // 64 codes: lane L holds codes 16L..16L+15
      return 16 * lane + 8 * z + j;
    case WeightFormat::kMxfp4:  // 64 bytes as 32 words: vector z holds nibble z of each word
      return 4 * i + z;
    default:
      return p;
  }
}

}  // namespace

int64_t Bf16DotStride(const LinearWeight& w) {
  const int64_t sb = SuperblockElements(w.format);
  return (w.in + sb - 1) / sb * sb;
}

void Bf16DotPrepareScalar(WeightFormat format, const float* x, int64_t rows, int64_t src_stride,
                          int64_t stride, uint16_t* out) {
  const int64_t sb = SuperblockElements(format);
  int32_t perm[128];
  for (int64_t p = 0; p < sb; ++p) perm[p] = static_cast<int32_t>(SourceElement(format, p));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * src_stride;
    uint16_t* dst = out + r * stride;
    for (int64_t base = 0; base < stride; base += sb) {
      for (int64_t p = 0; p < sb; ++p) {
        uint32_t bits;
        std::memcpy(&bits, src + base + perm[p], 4);
        DSV41_DCHECK((bits & 0xFFFFu) == 0, "Linear input %a is not a bf16 value",
                     static_cast<double>(src[base + perm[p]]));
        dst[base + p] = static_cast<uint16_t>(bits >> 16);
      }
    }
  }
}

void Bf16ExponentRangeScalar(const uint16_t* x, int64_t n, int* low, int* high) {
  *low = 256;
  *high = 0;
  for (int64_t i = 0; i < n; ++i) {
    if ((x[i] & 0x7FFF) == 0) continue;
    const int e = (x[i] >> 7) & 0xFF;
    *low = std::min(*low, e);
    *high = std::max(*high, e);
  }
}

#if DSV41_HAVE_BF16DOT

#define DSV41_BF16DOT_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))
// For the per-superblock helpers: inlined into the tiles, so decoded vectors stay in registers.
#define DSV41_BF16DOT_INLINE           \
  inline __attribute__((always_inline, \
                        target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi")))

bool Bf16DotUnitPresent() {
  static const bool present =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
  return present;
}

bool Bf16DotSupported() {
  return Bf16DotUnitPresent() && CurrentSimdCap() == SimdCap::kBest;  // any cap stops AVX-512
}

namespace {

// The bf16 bits of e4m3 magnitude codes 0..127 (exact; 0x7F, the NaN code, gives a bf16 NaN),
// split into their high and low bytes.
struct Fp8Tables {
  alignas(64) uint8_t hi[128];
  alignas(64) uint8_t lo[128];
};
const Fp8Tables& Fp8ByteTables() {
  static const Fp8Tables tables = [] {
    Fp8Tables t;
    for (int c = 0; c < 128; ++c) {
      const uint16_t b = Bf16FromF32(F32FromE4m3(static_cast<uint8_t>(c)));
      t.hi[c] = static_cast<uint8_t>(b >> 8);
      t.lo[c] = static_cast<uint8_t>(b & 0xFF);
    }
    return t;
  }();
  return tables;
}

// The bf16 bits of the 16 e2m1 codes (sign included), twice over: VPERMW reads an index's low
// five bits, so a nibble with any bit above it picks its own code.
struct E2m1Table {
  alignas(64) uint16_t words[32];
};
const E2m1Table& E2m1WordTable() {
  static const E2m1Table table = [] {
    E2m1Table t;
    for (int i = 0; i < 32; ++i)
      t.words[i] = Bf16FromF32(F32FromE2m1(static_cast<uint8_t>(i % 16)));
    return t;
  }();
  return table;
}

DSV41_BF16DOT_INLINE __m512 Dot(__m512 acc, __m512i w, __m512i x) {
  return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x);
}

// 64 weight bytes in one load. Left to itself the compiler folds the load into each decode
// instruction that reads the bytes (two for FP8 and MXFP4), so every weight line is loaded twice;
// from DRAM that second load made the few-row products 10-20 % slower.
DSV41_BF16DOT_INLINE __m512i LoadWeightBytes(const uint8_t* p) {
  __m512i v = _mm512_loadu_si512(p);
  asm("" : "+v"(v));  // the value in a register: later uses cannot re-read memory
  return v;
}

// Loads bytes [offset, offset + 64) of a row of `row_bytes` bytes, zeros past its end.
DSV41_BF16DOT_INLINE __m512i LoadRowBytes(const uint8_t* row, int64_t offset, int64_t row_bytes) {
  const int64_t left = row_bytes - offset;
  if (left >= 64) return LoadWeightBytes(row + offset);
  const __mmask64 mask = left <= 0 ? 0 : (~uint64_t{0} >> (64 - left));
  return _mm512_maskz_loadu_epi8(mask, row + offset);
}

// shift (s << 7 per bf16 word) added to the exponents of the non-zero values of v.
DSV41_BF16DOT_INLINE __m512i AddExponents(__m512i v, __m512i shift) {
  return _mm512_mask_add_epi16(v, _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7FFF)), v, shift);
}

// The least and the greatest of 64 bytes: bytes to words, words to dwords, then the reduction.
DSV41_BF16DOT_INLINE int MinByte(__m512i v) {
  const __m512i words =
      _mm512_min_epu16(_mm512_and_si512(v, _mm512_set1_epi16(0xFF)), _mm512_srli_epi16(v, 8));
  return static_cast<int>(_mm512_reduce_min_epu32(_mm512_min_epu32(
      _mm512_and_si512(words, _mm512_set1_epi32(0xFFFF)), _mm512_srli_epi32(words, 16))));
}
DSV41_BF16DOT_INLINE int MaxByte(__m512i v) {
  const __m512i words =
      _mm512_max_epu16(_mm512_and_si512(v, _mm512_set1_epi16(0xFF)), _mm512_srli_epi16(v, 8));
  return static_cast<int>(_mm512_reduce_max_epu32(_mm512_max_epu32(
      _mm512_and_si512(words, _mm512_set1_epi32(0xFFFF)), _mm512_srli_epi32(words, 16))));
}

// The least and the greatest of the n bytes from p (255 and 0 when n = 0).
struct ByteSpan {
  int low = 255, high = 0;
};
DSV41_BF16DOT_INLINE ByteSpan ByteRange(const uint8_t* p, int64_t n) {
  ByteSpan span;
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 m = n - i >= 64 ? ~__mmask64{0} : ~__mmask64{0} >> (64 - (n - i));
    const __m512i v = _mm512_maskz_loadu_epi8(m, p + i);
    span.low = std::min(span.low, MinByte(_mm512_mask_blend_epi8(m, _mm512_set1_epi8(-1), v)));
    span.high = std::max(span.high, MaxByte(v));
  }
  return span;
}

// Whether the n bytes from p all lie in [lo, hi].
DSV41_BF16DOT_INLINE bool BytesWithin(const uint8_t* p, int64_t n, int lo, int hi) {
  const ByteSpan span = ByteRange(p, n);
  return n == 0 || (span.low >= lo && span.high <= hi);
}

// K elements per fp32 run of a pair's accumulator (a multiple of every superblock).
inline constexpr int64_t kChunkElements = 1024;

// Adds the 16 fp32 lanes of acc into the pair's 16 fp64 lane sums; the first chunk's lanes are
// stored instead (the same bits as adding them to zeros: an fp32 accumulator is never −0).
DSV41_BF16DOT_INLINE void Flush(__m512 acc, double* sums, bool first) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(acc));
  const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(acc, 1));
  if (first) {
    _mm512_store_pd(sums, lo);
    _mm512_store_pd(sums + 8, hi);
    return;
  }
  _mm512_store_pd(sums, _mm512_add_pd(_mm512_load_pd(sums), lo));
  _mm512_store_pd(sums + 8, _mm512_add_pd(_mm512_load_pd(sums + 8), hi));
}

// A pair's fp64 lane sums before its tree: Flush's sums, lanes i and i + 8 added.
DSV41_BF16DOT_INLINE __m512d LanePairSums(__m512 acc, const double* sums, bool first) {
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(acc));
  __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(acc, 1));
  if (!first) {
    lo = _mm512_add_pd(_mm512_load_pd(sums), lo);
    hi = _mm512_add_pd(_mm512_load_pd(sums + 8), hi);
  }
  return _mm512_add_pd(lo, hi);
}

// The last chunk of a pair: Flush, then its result — the fp64 lane sums added (lanes i and i + 8,
// then a fixed tree) and rounded — without storing the sums.
DSV41_BF16DOT_INLINE float FlushFinish(__m512 acc, const double* sums, bool first) {
  return static_cast<float>(_mm512_reduce_add_pd(LanePairSums(acc, sums, first)));
}

// FlushFinish's tree for eight pairs at once: v[p] holds pair p's LanePairSums; result p is
// ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)) of v[p], rounded to fp32 — the same adds
// as _mm512_reduce_add_pd, with the pairs side by side in the vectors instead of one at a time.
DSV41_BF16DOT_INLINE __m256 FinishEight(const __m512d* v) {
  // Lanes i and i + 4: pairs 2k and 2k + 1 in one vector, four lanes each.
  __m512d quads[4];
  DSV41_UNROLL
  for (int k = 0; k < 4; ++k) {
    quads[k] = _mm512_add_pd(_mm512_shuffle_f64x2(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f64x2(v[2 * k], v[2 * k + 1], 0xEE));
  }
  // Lanes j and j + 2: pairs 4k..4k + 3, two lanes each.
  __m512d twos[2];
  DSV41_UNROLL
  for (int k = 0; k < 2; ++k) {
    twos[k] = _mm512_add_pd(_mm512_shuffle_f64x2(quads[2 * k], quads[2 * k + 1], 0x88),
                            _mm512_shuffle_f64x2(quads[2 * k], quads[2 * k + 1], 0xDD));
  }
  // The last two lanes of each pair.
  const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m512i odd = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
  return _mm512_cvtpd_ps(_mm512_add_pd(_mm512_permutex2var_pd(twos[0], even, twos[1]),
                                       _mm512_permutex2var_pd(twos[0], odd, twos[1])));
}

// The last chunk of a tile's kO × kR pairs: their results into y (row r, output o at
// y[r * y_stride + o]), eight pairs at a time through FinishEight (padded with zero pairs when
// four or more are left), the rest one at a time. sums(o, r) gives a pair's fp64 lane sums.
template <int kO, int kR, class SumsOf>
DSV41_BF16DOT_INLINE void FinishTile(const __m512 (&acc)[kO][kR], const SumsOf& sums, bool first,
                                     float* y, int64_t y_stride) {
  constexpr int kPairs = kO * kR;
  constexpr int kBatched = (kPairs + 4) / 8 * 8;  // pairs through FinishEight, padding included
  DSV41_UNROLL
  for (int b = 0; b < kBatched; b += 8) {
    __m512d v[8];
    DSV41_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int p = b + i;
      v[i] = p < kPairs ? LanePairSums(acc[p % kO][p / kO], sums(p % kO, p / kO), first)
                        : _mm512_setzero_pd();
    }
    alignas(32) float results[8];
    _mm256_store_ps(results, FinishEight(v));
    DSV41_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int p = b + i;
      if (p < kPairs) y[(p / kO) * y_stride + p % kO] = results[i];
    }
  }
  DSV41_UNROLL
  for (int p = kBatched; p < kPairs; ++p) {
    y[(p / kO) * y_stride + p % kO] = FlushFinish(acc[p % kO][p / kO], sums(p % kO, p / kO), first);
  }
}

// Bf16DotPrepare on the vector unit: per superblock its fp32 values' high halves in natural
// order (16 per vector), then the words permuted into the kernel's order, 64 sources at a time
// (an index's bit 6 picks the pair of natural vectors). A row with a value that is not bf16 goes
// through the scalar twin, which says so in debug builds.
struct PrepareIndex {
  alignas(64) uint16_t idx[4][32];
  __mmask32 high_pair[4] = {};  // words taken from natural vectors 2 and 3
};
const PrepareIndex& PrepareIndexFor(WeightFormat format) {
  static const auto make = [](WeightFormat f) {
    PrepareIndex t;
    for (int64_t p = 0; p < SuperblockElements(f); ++p) {
      const int64_t e = SourceElement(f, p);
      t.idx[p / 32][p % 32] = static_cast<uint16_t>(e % 64);
      if (e >= 64) t.high_pair[p / 32] |= __mmask32{1} << (p % 32);
    }
    return t;
  };
  static const PrepareIndex fp8 = make(WeightFormat::kFp8Block);
  static const PrepareIndex mxfp4 = make(WeightFormat::kMxfp4);
  static const PrepareIndex bf16 = make(WeightFormat::kBf16);
  return format == WeightFormat::kFp8Block ? fp8 : format == WeightFormat::kMxfp4 ? mxfp4 : bf16;
}

// 32 consecutive fp32 values' high halves, in order.
DSV41_BF16DOT_INLINE __m512i HighWords(const float* src, __mmask16* low_bits) {
  const __m512i a = _mm512_loadu_si512(src);
  const __m512i b = _mm512_loadu_si512(src + 16);
  const __m512i low = _mm512_set1_epi32(0xFFFF);
  *low_bits |= _mm512_test_epi32_mask(a, low) | _mm512_test_epi32_mask(b, low);
  const __m256i ha = _mm512_cvtepi32_epi16(_mm512_srli_epi32(a, 16));
  const __m256i hb = _mm512_cvtepi32_epi16(_mm512_srli_epi32(b, 16));
  return _mm512_inserti64x4(_mm512_castsi256_si512(ha), hb, 1);
}

template <int kSB>
DSV41_BF16DOT_TARGET bool PrepareRow(const PrepareIndex& t, const float* src, int64_t stride,
                                     uint16_t* dst) {
  constexpr int kZ = kSB / 32;
  __mmask16 low_bits = 0;
  for (int64_t base = 0; base < stride; base += kSB) {
    __m512i natural[4];
    DSV41_UNROLL
    for (int z = 0; z < kZ; ++z) natural[z] = HighWords(src + base + 32 * z, &low_bits);
    DSV41_UNROLL
    for (int z = 0; z < kZ; ++z) {
      const __m512i idx = _mm512_load_si512(t.idx[z]);
      __m512i words;
      if constexpr (kZ == 1) {
        words = _mm512_permutexvar_epi16(idx, natural[0]);
      } else {
        words = _mm512_permutex2var_epi16(natural[0], idx, natural[1]);
        if constexpr (kZ == 4) {
          words = _mm512_mask_blend_epi16(t.high_pair[z], words,
                                          _mm512_permutex2var_epi16(natural[2], idx, natural[3]));
        }
      }
      _mm512_storeu_si512(dst + base + 32 * z, words);
    }
  }
  return low_bits == 0;
}

struct Args {
  const LinearWeight* w;
  const uint16_t* x;  // prepared rows [rows, stride]
  int64_t rows;
  int64_t stride;
  float* y;
  int64_t y_stride;
  // Where the register tiles' prefetch stream ends: a tile whose targets lie past it prefetches
  // the same distance into next_begin.. instead, where that stays inside next (the thread's next
  // weights), else nothing (bytes nobody reads). Without a next: the matrix's end.
  uintptr_t stream_end = 0;
  uintptr_t next_begin = 0, next_end = 0;
  // The least and greatest bf16 exponent field of the rows' non-zero values (LinearInput).
  int x_exp_min = 0, x_exp_max = 255;
};

// One superblock of one weight row, decoded: kZ vectors of 32 bf16.
template <int kZ>
struct Decoded {
  __m512i w[kZ];
};

// How a superblock joins a pair's chain: its products straight into the accumulator, or (scaled)
// dotted into a zero partial that is added as FMA(partial, s, acc).
struct SbScale {
  bool scaled = false;
  __m512 s;       // with scaled: the fp32 factor of each lane
  __m512i shift;  // FP8 without scaled: s << 7 per bf16 word, added to non-zero weights
};

// ---- per-format decoders -------------------------------------------------------------------
// Scale<kPlain>(o, sb) gives superblock sb's scale form for row o (for FP8 the same for every row
// of o's 32-row group, so tiles inside one group compute it once); Decode<kPlain>(o, sb, scale,
// out) fills out.w with the decoded superblock. kAlwaysScaled: every superblock takes the scaled
// form. Plain(o0, n): rows o0..o0+n-1 are plain — whole superblocks (no row ends inside one) and
// every scale byte in the common range (FP8 10..246: the exponent-add form; MXFP4 1..254: no
// codec call) — so Scale<true> and Decode<true> may skip the tail and range checks, giving the
// same values with a fraction of the instructions (a one-row tile issues ~6 instructions per
// cycle, so the checks' scalar work cost as much as the decode).

struct Bf16Dec {
  static constexpr int kZ = 1;
  static constexpr int kSB = 32;
  static constexpr bool kAlwaysScaled = false;
  static constexpr bool kScalePerRow = false;
  const uint8_t* weight;
  int64_t row_bytes;  // = 2 in
  DSV41_BF16DOT_INLINE const uint8_t* Row(int64_t o) const { return weight + o * row_bytes; }
  DSV41_BF16DOT_INLINE bool Plain(int64_t, int) const { return row_bytes % 64 == 0; }
  DSV41_BF16DOT_INLINE std::span<const uint8_t> ScaleBytes(int64_t, int64_t) const { return {}; }
  template <bool kPlain>
  DSV41_BF16DOT_INLINE SbScale Scale(int64_t, int64_t) const {
    return SbScale{};
  }
  template <bool kPlain>
  DSV41_BF16DOT_INLINE void Decode(int64_t o, int64_t sb, const SbScale&, Decoded<kZ>& out) const {
    out.w[0] =
        kPlain ? LoadWeightBytes(Row(o) + sb * 64) : LoadRowBytes(Row(o), sb * 64, row_bytes);
  }
};

struct Fp8Dec {
  static constexpr int kZ = 2;
  static constexpr int kSB = 64;
  static constexpr bool kAlwaysScaled = false;
  static constexpr bool kScalePerRow = false;
  const uint8_t* weight;
  int64_t row_bytes;  // = in
  const uint8_t* scale;
  int64_t tiles_in;
  __m512i hi0, hi1, lo0, lo1;

  DSV41_BF16DOT_TARGET explicit Fp8Dec(const LinearWeight& w)
      : weight(reinterpret_cast<const uint8_t*>(w.weight.data())),
        row_bytes(w.in),
        scale(reinterpret_cast<const uint8_t*>(w.scale.data())),
        tiles_in(NumTiles(w.in)) {
    const Fp8Tables& t = Fp8ByteTables();
    hi0 = _mm512_load_si512(t.hi);
    hi1 = _mm512_load_si512(t.hi + 64);
    lo0 = _mm512_load_si512(t.lo);
    lo1 = _mm512_load_si512(t.lo + 64);
  }
  DSV41_BF16DOT_INLINE const uint8_t* Row(int64_t o) const { return weight + o * row_bytes; }
  static constexpr int kLow = 10, kHigh = 246;  // scale bytes of the exponent-add form
  static bool InRange(int b) { return b >= kLow && b <= kHigh; }
  // One 32-row group's rows (the tiles keep inside one), whole superblocks, common-form scales.
  // The scale bytes rows o0..o0+n-1 use: their 32-row groups' rows.
  DSV41_BF16DOT_INLINE std::span<const uint8_t> ScaleBytes(int64_t o0, int64_t n) const {
    const int64_t groups = (o0 + n - 1) / kBlock - o0 / kBlock + 1;
    return {scale + (o0 / kBlock) * tiles_in, static_cast<size_t>(groups * tiles_in)};
  }
  DSV41_BF16DOT_INLINE bool Plain(int64_t o0, int n) const {
    return row_bytes % 64 == 0 && o0 / kBlock == (o0 + n - 1) / kBlock &&
           BytesWithin(scale + (o0 / kBlock) * tiles_in, tiles_in, kLow, kHigh);
  }
  // Whether a plain tile from o0 may add the scale exponents to its input row's values instead of
  // to the weights (x · 2^s for every non-zero x stays a normal bf16, so the products and their
  // sums are the same bits): the group's scale bytes against the row's exponent range.
  DSV41_BF16DOT_INLINE bool ShiftOnX(int64_t o0, int x_exp_min, int x_exp_max) const {
    const ByteSpan s = ByteRange(scale + (o0 / kBlock) * tiles_in, tiles_in);
    return x_exp_min + s.low - 127 >= 1 && x_exp_max + s.high - 127 <= 254;
  }
  // Tile columns 2sb (128-bit lanes 0-1 of a decoded vector) and 2sb + 1 (lanes 2-3) of row o's
  // 32-row group; a column past the end counts as 2^0 (its weights are zero).
  template <bool kPlain>
  DSV41_BF16DOT_INLINE SbScale Scale(int64_t o, int64_t sb) const {
    const uint8_t* row = scale + (o / kBlock) * tiles_in;
    const int b0 = kPlain || 2 * sb < tiles_in ? row[2 * sb] : 127;
    const int b1 = kPlain || 2 * sb + 1 < tiles_in ? row[2 * sb + 1] : 127;
    SbScale out;
    if (kPlain || Likely(InRange(b0) && InRange(b1))) {
      const __m256i s0 = _mm256_set1_epi16(static_cast<int16_t>((b0 - 127) * 128));
      const __m256i s1 = _mm256_set1_epi16(static_cast<int16_t>((b1 - 127) * 128));
      out.shift = _mm512_inserti64x4(_mm512_castsi256_si512(s0), s1, 1);
      out.s = _mm512_setzero_ps();
      return out;
    }
    return ScaledForm(b0, b1);
  }
  // fp32 lanes 0-7 come from 128-bit lanes 0-1 (column 2sb), lanes 8-15 from column 2sb + 1.
  // Out of line and cold: inlined, its code changes how the tiles' loops are laid out.
  __attribute__((noinline, cold)) DSV41_BF16DOT_TARGET static SbScale ScaledForm(int b0, int b1) {
    SbScale out;
    out.scaled = true;
    out.shift = _mm512_setzero_si512();
    const __m256 f0 = _mm256_set1_ps(F32FromE8m0(static_cast<uint8_t>(b0)));
    const __m256 f1 = _mm256_set1_ps(F32FromE8m0(static_cast<uint8_t>(b1)));
    out.s = _mm512_insertf32x8(_mm512_castps256_ps512(f0), f1, 1);
    return out;
  }
  // kShift false: the exponent-add form's shift goes to the inputs instead (ShiftOnX).
  template <bool kPlain, bool kShift = true>
  DSV41_BF16DOT_INLINE void Decode(int64_t o, int64_t sb, const SbScale& scale,
                                   Decoded<kZ>& out) const {
    const __m512i c =
        kPlain ? LoadWeightBytes(Row(o) + sb * 64) : LoadRowBytes(Row(o), sb * 64, row_bytes);
    const __m512i idx = _mm512_and_si512(c, _mm512_set1_epi8(0x7F));
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, idx, hi1), c,
                                                 _mm512_set1_epi8(-128), 0xF8);  // a | (b & c)
    const __m512i lo = _mm512_permutex2var_epi8(lo0, idx, lo1);
    __m512i w0 = _mm512_unpacklo_epi8(lo, hi);
    __m512i w1 = _mm512_unpackhi_epi8(lo, hi);
    if (kShift && (kPlain || Likely(!scale.scaled))) {
      w0 = AddExponents(w0, scale.shift);
      w1 = AddExponents(w1, scale.shift);
    }
    out.w[0] = w0;
    out.w[1] = w1;
  }
};

struct Mxfp4Dec {
  static constexpr int kZ = 4;
  static constexpr int kSB = 128;
  static constexpr bool kAlwaysScaled = true;
  static constexpr bool kScalePerRow = true;
  const uint8_t* weight;
  int64_t row_bytes;  // = in / 2
  const uint8_t* scale;
  int64_t blocks_in;
  __m512i table;

  DSV41_BF16DOT_TARGET explicit Mxfp4Dec(const LinearWeight& w)
      : weight(reinterpret_cast<const uint8_t*>(w.weight.data())),
        row_bytes(w.in / 2),
        scale(reinterpret_cast<const uint8_t*>(w.scale.data())),
        blocks_in(w.in / kBlock),
        table(_mm512_load_si512(E2m1WordTable().words)) {}
  DSV41_BF16DOT_INLINE const uint8_t* Row(int64_t o) const { return weight + o * row_bytes; }
  // The scale bytes rows o0..o0+n-1 use.
  DSV41_BF16DOT_INLINE std::span<const uint8_t> ScaleBytes(int64_t o0, int64_t n) const {
    return {scale + o0 * blocks_in, static_cast<size_t>(n * blocks_in)};
  }
  // Rows o0..o0+n-1: whole superblocks, no scale byte 0 or 255.
  DSV41_BF16DOT_INLINE bool Plain(int64_t o0, int n) const {
    return row_bytes % 64 == 0 && BytesWithin(scale + o0 * blocks_in, n * blocks_in, 1, 254);
  }
  // Rows o0..o0+n-1's scale bytes may all be folded into their weights (ScaleFold).
  DSV41_BF16DOT_INLINE bool Foldable(int64_t o0, int n, int low, int high) const {
    return BytesWithin(scale + o0 * blocks_in, n * blocks_in, low, high);
  }
  // fp32 lane q of a product covers 128-bit lane q / 4, i.e. block 4sb + q / 4 of row o.
  template <bool kPlain>
  DSV41_BF16DOT_INLINE SbScale Scale(int64_t o, int64_t sb) const {
    const uint8_t* row = scale + o * blocks_in;
    if constexpr (kPlain) {
      // 2^(b−127) as fp32 bits b << 23: byte q / 4 of the four into lane q.
      uint32_t packed;
      std::memcpy(&packed, row + 4 * sb, 4);
      const __m512i spread = _mm512_maskz_permutexvar_epi8(
          0x1111111111111111ull, PlainScaleIndex(), _mm512_set1_epi32(static_cast<int>(packed)));
      SbScale out;
      out.scaled = true;
      out.shift = _mm512_setzero_si512();
      out.s = _mm512_castsi512_ps(_mm512_slli_epi32(spread, 23));
      return out;
    }
    const int64_t first = 4 * sb;
    uint32_t packed = 0x7F7F7F7Fu;  // 2^0 for blocks past the end (their weights are zero)
    if (Likely(first + 4 <= blocks_in)) {
      std::memcpy(&packed, row + first, 4);
    } else {
      for (int64_t i = 0; first + i < blocks_in; ++i) {
        packed = (packed & ~(0xFFu << (8 * i))) | (uint32_t{row[first + i]} << (8 * i));
      }
    }
    // Bytes 0 (2^-127, an fp32 subnormal) and 255 (NaN) need the codec: a zero byte of packed or
    // of ~packed.
    const auto has_zero_byte = [](uint32_t v) {
      return ((v - 0x01010101u) & ~v & 0x80808080u) != 0;
    };
    if (Unlikely(has_zero_byte(packed) || has_zero_byte(~packed))) return ScaledForm(packed);
    SbScale out;
    out.scaled = true;
    out.shift = _mm512_setzero_si512();
    // 2^(b−127) as fp32 bits b << 23.
    const __m128i spread =
        _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(packed)),
                         _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    out.s = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(spread), 23));
    return out;
  }
  // Out of line and cold, as Fp8Dec's.
  __attribute__((noinline, cold)) DSV41_BF16DOT_TARGET static SbScale ScaledForm(uint32_t packed) {
    SbScale out;
    out.scaled = true;
    out.shift = _mm512_setzero_si512();
    alignas(64) float f[16];
    for (int q = 0; q < 16; ++q) f[q] = F32FromE8m0(static_cast<uint8_t>(packed >> (8 * (q / 4))));
    out.s = _mm512_load_ps(f);
    return out;
  }
  // Byte 4q of the index vector is q / 4.
  DSV41_BF16DOT_INLINE static __m512i PlainScaleIndex() {
    return _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
  }
  template <bool kPlain>
  DSV41_BF16DOT_INLINE void Decode(int64_t o, int64_t sb, const SbScale&, Decoded<kZ>& out) const {
    const __m512i v =
        kPlain ? LoadWeightBytes(Row(o) + sb * 64) : LoadRowBytes(Row(o), sb * 64, row_bytes);
    // Vector z: nibble z of each 16-bit word (bits 4z..4z+3) looked up as a bf16 word.
    out.w[0] = _mm512_permutexvar_epi16(v, table);
    out.w[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), table);
    out.w[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 8), table);
    out.w[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(v, 12), table);
  }
};

// The chain step of one superblock for one pair: acc joined with the dot products of w and x.
// kPlain: the form is known — scaled for MXFP4, unscaled for FP8 and bf16.
template <class Dec, bool kPlain>
DSV41_BF16DOT_INLINE __m512 Step(__m512 acc, const __m512i* w, const uint16_t* x,
                                 const SbScale& scale) {
  constexpr int kZ = Dec::kZ;
  if (kPlain ? !Dec::kAlwaysScaled : !scale.scaled) {
    DSV41_UNROLL
    for (int z = 0; z < kZ; ++z) acc = Dot(acc, w[z], _mm512_loadu_si512(x + 32 * z));
    return acc;
  }
  __m512 partial = _mm512_setzero_ps();
  DSV41_UNROLL
  for (int z = 0; z < kZ; ++z) partial = Dot(partial, w[z], _mm512_loadu_si512(x + 32 * z));
  return _mm512_fmadd_ps(partial, scale.s, acc);
}

// The least and the greatest exponent field of the non-zero bf16 values x[0, n), n a multiple of
// 32 (256 and 0 when all are zero).
struct ExponentSpan {
  int low = 256, high = 0;
};
DSV41_BF16DOT_INLINE ExponentSpan ExponentRange(const uint16_t* x, int64_t n) {
  __m512i low = _mm512_set1_epi16(256), high = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += 32) {
    const __m512i v = _mm512_loadu_si512(x + i);
    const __mmask32 nonzero = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7FFF));
    const __m512i e = _mm512_and_si512(_mm512_srli_epi16(v, 7), _mm512_set1_epi16(0xFF));
    low = _mm512_mask_min_epu16(low, nonzero, low, e);
    high = _mm512_mask_max_epu16(high, nonzero, high, e);
  }
  const __m512i mask = _mm512_set1_epi32(0xFFFF);
  return {static_cast<int>(_mm512_reduce_min_epu32(
              _mm512_min_epu32(_mm512_and_si512(low, mask), _mm512_srli_epi32(low, 16)))),
          static_cast<int>(_mm512_reduce_max_epu32(
              _mm512_max_epu32(_mm512_and_si512(high, mask), _mm512_srli_epi32(high, 16))))};
}

// MXFP4's buffered path may fold a block's scale 2^(b−127) into its decoded weights (an exponent
// add) and join the superblock's partial dot to the chain with an add instead of FMA(partial, s,
// acc): the same sum, bit for bit, where scaling by a power of two is exact, i.e. where no value
// of either dot product leaves the normal range (the dot flushes subnormals). With x's non-zero
// exponent fields in [xlo, xhi] and e2m1 magnitudes in {0.5 .. 6} (multiples of 2^-1), every
// product and partial sum is zero or a multiple of 2^(xlo−135), and a superblock's partial per
// lane (8 products) is below 2^(xhi−120); scaled, both move by b − 127. So: w · 2^(b−127) a
// normal bf16 (2 <= b <= 252), 2^(xlo−135) and 2^(xlo−135+b−127) at least 2^-126, and
// 2^(xhi−120+max(0,b−127)) at most 2^126 (one step of margin below the largest float).
struct ScaleFold {
  bool ok = false;
  int low = 0, high = -1;  // the scale bytes that may be folded
};
DSV41_BF16DOT_INLINE ScaleFold Mxfp4ScaleFold(const ExponentSpan& x) {
  if (x.low > x.high) return {.ok = true, .low = 2, .high = 252};  // all inputs zero
  if (x.low < 9 || x.high > 246) return {};
  return {.ok = true, .low = std::max(2, 136 - x.low), .high = std::min(252, 373 - x.high)};
}

// (b − 127) << 7 in every bf16 word of a lane whose fp32 factor s is 2^(b−127) (bits b << 23).
DSV41_BF16DOT_INLINE __m512i FoldShift(__m512 s) {
  const __m512i bits = _mm512_castps_si512(s);
  return _mm512_sub_epi16(_mm512_or_si512(bits, _mm512_srli_epi32(bits, 16)),
                          _mm512_set1_epi16(127 << 7));
}

// Step for one unscaled superblock with the inputs in registers.
template <int kZ>
DSV41_BF16DOT_INLINE __m512 StepVectors(__m512 acc, const __m512i* w, const __m512i* x) {
  DSV41_UNROLL
  for (int z = 0; z < kZ; ++z) acc = Dot(acc, w[z], x[z]);
  return acc;
}

// How far ahead of its rows' bytes the register tile of rows o0..o0+kO prefetches: its targets
// are [first, last) + sb · 64 for each row, kPrefetchBytes ahead; near the stream's end they move
// into the next weights or onto the line being read (0; no branch in the loop).
template <class Dec>
DSV41_BF16DOT_INLINE uintptr_t PrefetchAhead(const Dec& dec, const Args& a, int64_t o0, int kO) {
  const uintptr_t first = reinterpret_cast<uintptr_t>(dec.Row(o0)) + kPrefetchBytes;
  const uintptr_t last = reinterpret_cast<uintptr_t>(dec.Row(o0 + kO)) + kPrefetchBytes;
  const uintptr_t shift = a.next_begin - a.stream_end;  // modulo 2^64; 0: the next rows follow on
  if (last <= a.stream_end) return kPrefetchBytes;
  if (a.next_begin != 0 && (first >= a.stream_end || shift == 0) &&
      last - a.stream_end <= a.next_end - a.next_begin) {
    return kPrefetchBytes + shift;
  }
  return 0;
}

// ---- register tile: output rows o0..o0+kO × input rows r0..r0+kR, all of K
// --------------------- kShiftX (FP8, plain, one row, ShiftOnX): the scale exponents are added to
// the row's values once per superblock instead of to every output's weights. MXFP4 with one input
// row runs row-major: each output's superblocks of a chunk in turn, so its weights are read in
// address order (rows lie back to back) — the same chain per pair, in the same order. Read across,
// kO rows of a few hundred bytes are kO short streams the hardware prefetcher does not follow:
// 42 small experts back to back took a third longer. The other formats' chains run through every
// dot product (MXFP4's through one FMA per superblock), so they keep the rows side by side.
template <int kO, int kR, bool kPlain, class Dec, bool kShiftX = false>
DSV41_BF16DOT_TARGET void Tile(const Dec& dec, const Args& a, int64_t o0, int64_t r0) {
  static_assert(!kShiftX || (kPlain && kR == 1));
  constexpr int kZ = Dec::kZ;
  constexpr int64_t kChunkSB = kChunkElements / Dec::kSB;
  const int64_t superblocks = a.stride / Dec::kSB;
  alignas(64) double sums[kO][kR][16];  // written by the first chunk's flush
  const uintptr_t ahead = PrefetchAhead(dec, a, o0, kO);
  for (int64_t sb0 = 0; sb0 < superblocks; sb0 += kChunkSB) {
    const int64_t sb_end = std::min(superblocks, sb0 + kChunkSB);
    __m512 acc[kO][kR];
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      DSV41_UNROLL
      for (int r = 0; r < kR; ++r) acc[o][r] = _mm512_setzero_ps();
    }
    if constexpr (kR == 1 && Dec::kAlwaysScaled) {
      const uint16_t* x = a.x + r0 * a.stride;
      DSV41_UNROLL
      for (int o = 0; o < kO; ++o) {
        for (int64_t sb = sb0; sb < sb_end; ++sb) {
          PrefetchWeights(reinterpret_cast<const void*>(
              reinterpret_cast<uintptr_t>(dec.Row(o0 + o) + sb * 64) + ahead));
          const SbScale scale = dec.template Scale<kPlain>(o0 + o, sb);
          Decoded<kZ> d;
          dec.template Decode<kPlain>(o0 + o, sb, scale, d);
          acc[o][0] = Step<Dec, kPlain>(acc[o][0], d.w, x + sb * Dec::kSB, scale);
        }
      }
    } else {
      for (int64_t sb = sb0; sb < sb_end; ++sb) {
        const uint16_t* xb = a.x + r0 * a.stride + sb * Dec::kSB;
        SbScale shared;
        if constexpr (!Dec::kScalePerRow) shared = dec.template Scale<kPlain>(o0, sb);
        __m512i shifted[kZ];
        if constexpr (kShiftX) {
          DSV41_UNROLL
          for (int z = 0; z < kZ; ++z) {
            shifted[z] = AddExponents(_mm512_loadu_si512(xb + 32 * z), shared.shift);
          }
        }
        DSV41_UNROLL
        for (int o = 0; o < kO; ++o) {
          PrefetchWeights(reinterpret_cast<const void*>(
              reinterpret_cast<uintptr_t>(dec.Row(o0 + o) + sb * 64) + ahead));
          const SbScale scale = Dec::kScalePerRow ? dec.template Scale<kPlain>(o0 + o, sb) : shared;
          Decoded<kZ> d;
          if constexpr (kShiftX) {
            dec.template Decode<kPlain, false>(o0 + o, sb, scale, d);
            acc[o][0] = StepVectors<kZ>(acc[o][0], d.w, shifted);
          } else {
            dec.template Decode<kPlain>(o0 + o, sb, scale, d);
            DSV41_UNROLL
            for (int r = 0; r < kR; ++r) {
              acc[o][r] = Step<Dec, kPlain>(acc[o][r], d.w, xb + r * a.stride, scale);
            }
          }
        }
      }
    }
    if (sb_end == superblocks) {
      FinishTile<kO, kR>(
          acc, [&](int o, int r) { return sums[o][r]; }, sb0 == 0, a.y + r0 * a.y_stride + o0,
          a.y_stride);
    } else {
      DSV41_UNROLL
      for (int o = 0; o < kO; ++o) {
        DSV41_UNROLL
        for (int r = 0; r < kR; ++r) Flush(acc[o][r], sums[o][r], sb0 == 0);
      }
    }
  }
}

inline constexpr int kMaxR = 4;  // rows of one register tile

template <int kO, bool kPlain, class Dec>
DSV41_BF16DOT_TARGET void PlainRowTiles(const Dec& dec, const Args& a, int64_t o0) {
  int64_t r = 0;
  for (; r + 4 <= a.rows; r += 4) Tile<kO, 4, kPlain>(dec, a, o0, r);
  switch (a.rows - r) {
    case 3:
      Tile<kO, 3, kPlain>(dec, a, o0, r);
      break;
    case 2:
      Tile<kO, 2, kPlain>(dec, a, o0, r);
      break;
    case 1:
      Tile<kO, 1, kPlain>(dec, a, o0, r);
      break;
    default:
      break;
  }
}

template <int kO, class Dec>
DSV41_BF16DOT_TARGET void RowTiles(const Dec& dec, const Args& a, int64_t o0) {
  if (dec.Plain(o0, kO)) {
    PlainRowTiles<kO, true>(dec, a, o0);
  } else {
    PlainRowTiles<kO, false>(dec, a, o0);
  }
}

// One-row tile, plain or not; FP8's plain tiles with the scales on the row where they may.
template <int kO, class Dec>
DSV41_BF16DOT_TARGET void OneRowTile(const Dec& dec, const Args& a, int64_t o0) {
  if (dec.Plain(o0, kO)) {
    if constexpr (std::is_same_v<Dec, Fp8Dec>) {
      if (dec.ShiftOnX(o0, a.x_exp_min, a.x_exp_max)) {
        Tile<kO, 1, true, Dec, true>(dec, a, o0, 0);
        return;
      }
    }
    Tile<kO, 1, true>(dec, a, o0, 0);
  } else {
    Tile<kO, 1, false>(dec, a, o0, 0);
  }
}

// ---- buffered: many input rows
// ----------------------------------------------------------------- Per row block (kRowBlock
// rows), the kO weight rows of a tile are decoded chunk by chunk (one fp32 run, kChunkElements of
// K) into wbuf, with each superblock's scale form in sbuf, and every group of rows runs the same
// chain from there into its fp64 lane sums in sumbuf. The row groups keep their rows' activations
// of a superblock in registers across the tile's outputs.
template <class Dec>
struct Buffers {
  static constexpr int kO = 4;
  static constexpr int64_t kChunkSB = kChunkElements / Dec::kSB;
  alignas(64) __m512i w[kO * kChunkSB * Dec::kZ];
  // Each superblock's scale form, its two fields apart: a copy of a whole SbScale loads its
  // `scaled` byte (just stored) as part of a vector, which stalls on the failed store forwarding.
  alignas(64) __m512 scale_s[kO * kChunkSB];
  bool scaled[kO * kChunkSB];
  alignas(64) double sums[kO * kRowBlock * 16];
};

// Rows per group of the buffered path: their activations (kR × kZ vectors), the kO × kR
// accumulators and the decoded weights fit the 32 vector registers.
template <class Dec>
constexpr int GroupRows() {
  return Dec::kZ >= 4 ? 2 : 4;
}

// The chunk's dots of rows r0..r0+kR with the tile's kO outputs (from o0); the last chunk writes
// the results to y. kFolded: the scales are in the decoded weights (ScaleFold), a scaled
// superblock's partial is added.
template <int kO, int kR, bool kScaled, class Dec, bool kFolded>
DSV41_BF16DOT_TARGET void ChunkDots(const Args& a, const Buffers<Dec>& buf, int64_t o0, int64_t sb0,
                                    int64_t nsb, bool last, int64_t r0, int64_t row_base,
                                    double* sums) {
  const bool first = sb0 == 0;
  constexpr int kZ = Dec::kZ;
  constexpr int64_t kChunkSB = Buffers<Dec>::kChunkSB;
  __m512 acc[kO][kR];
  DSV41_UNROLL
  for (int o = 0; o < kO; ++o) {
    DSV41_UNROLL
    for (int r = 0; r < kR; ++r) acc[o][r] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < nsb; ++i) {
    const uint16_t* xb = a.x + r0 * a.stride + (sb0 + i) * Dec::kSB;
    __m512i x[kR][kZ];
    DSV41_UNROLL
    for (int r = 0; r < kR; ++r) {
      DSV41_UNROLL
      for (int z = 0; z < kZ; ++z) x[r][z] = _mm512_loadu_si512(xb + r * a.stride + 32 * z);
    }
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      const __m512i* w = buf.w + (o * kChunkSB + i) * kZ;
      if constexpr (kScaled) {
        const bool scaled = Dec::kAlwaysScaled || buf.scaled[o * kChunkSB + i];
        __m512i wz[kZ];  // each weight vector loaded once for the group's rows
        DSV41_UNROLL
        for (int z = 0; z < kZ; ++z)
          wz[z] = LoadWeightBytes(reinterpret_cast<const uint8_t*>(w + z));
        DSV41_UNROLL
        for (int r = 0; r < kR; ++r) {
          if (scaled) {
            __m512 partial = _mm512_setzero_ps();
            DSV41_UNROLL
            for (int z = 0; z < kZ; ++z) partial = Dot(partial, wz[z], x[r][z]);
            acc[o][r] = kFolded
                            ? _mm512_add_ps(acc[o][r], partial)
                            : _mm512_fmadd_ps(partial, buf.scale_s[o * kChunkSB + i], acc[o][r]);
          } else {
            DSV41_UNROLL
            for (int z = 0; z < kZ; ++z) acc[o][r] = Dot(acc[o][r], w[z], x[r][z]);
          }
        }
      } else {
        DSV41_UNROLL
        for (int z = 0; z < kZ; ++z) {
          const __m512i wz = _mm512_load_si512(w + z);
          DSV41_UNROLL
          for (int r = 0; r < kR; ++r) acc[o][r] = Dot(acc[o][r], wz, x[r][z]);
        }
      }
    }
  }
  const auto pair_sums = [&](int o, int r) {
    return sums + (o * kRowBlock + r0 + r - row_base) * 16;
  };
  if (last) {
    FinishTile<kO, kR>(acc, pair_sums, first, a.y + r0 * a.y_stride + o0, a.y_stride);
  } else {
    DSV41_UNROLL
    for (int o = 0; o < kO; ++o) {
      DSV41_UNROLL
      for (int r = 0; r < kR; ++r) Flush(acc[o][r], pair_sums(o, r), first);
    }
  }
}

template <int kO, bool kScaled, class Dec, bool kFolded>
DSV41_BF16DOT_TARGET void ChunkRows(const Args& a, const Buffers<Dec>& buf, int64_t o0, int64_t sb0,
                                    int64_t nsb, bool last, int64_t row_base, int64_t row_end,
                                    double* sums) {
  constexpr int kR = GroupRows<Dec>();
  int64_t r = row_base;
  for (; r + kR <= row_end; r += kR)
    ChunkDots<kO, kR, kScaled, Dec, kFolded>(a, buf, o0, sb0, nsb, last, r, row_base, sums);
  for (; r < row_end; ++r)
    ChunkDots<kO, 1, kScaled, Dec, kFolded>(a, buf, o0, sb0, nsb, last, r, row_base, sums);
}

template <int kO, bool kPlain, class Dec, bool kFolded = false>
DSV41_BF16DOT_TARGET void BufferedTile(const Dec& dec, const Args& a, int64_t o0, int64_t row_base,
                                       int64_t row_end, Buffers<Dec>& buf) {
  constexpr int kZ = Dec::kZ;
  constexpr int64_t kChunkSB = Buffers<Dec>::kChunkSB;
  const int64_t superblocks = a.stride / Dec::kSB;
  // The first chunk's flushes write the sums of this block's rows (only those are used); the
  // last chunk's write the results.
  for (int64_t sb0 = 0; sb0 < superblocks; sb0 += kChunkSB) {
    const int64_t nsb = std::min(kChunkSB, superblocks - sb0);
    bool any_scaled = false;
    for (int o = 0; o < kO; ++o) {
      for (int64_t i = 0; i < nsb; ++i) {
        PrefetchWeights(dec.Row(o0 + o) + (sb0 + i) * 64 + kPrefetchBytes);
        const SbScale scale = dec.template Scale<kPlain>(o0 + o, sb0 + i);
        Decoded<kZ> d;
        dec.template Decode<kPlain>(o0 + o, sb0 + i, scale, d);
        if constexpr (kFolded) {
          const __m512i shift = FoldShift(scale.s);
          for (int z = 0; z < kZ; ++z) d.w[z] = AddExponents(d.w[z], shift);
        }
        for (int z = 0; z < kZ; ++z) buf.w[(o * kChunkSB + i) * kZ + z] = d.w[z];
        buf.scale_s[o * kChunkSB + i] = scale.s;
        buf.scaled[o * kChunkSB + i] = scale.scaled;
        any_scaled |= scale.scaled;
      }
    }
    const bool last = sb0 + nsb == superblocks;
    if (Dec::kAlwaysScaled || (!kPlain && any_scaled)) {
      ChunkRows<kO, true, Dec, kFolded>(a, buf, o0, sb0, nsb, last, row_base, row_end, buf.sums);
    } else {
      ChunkRows<kO, false, Dec, false>(a, buf, o0, sb0, nsb, last, row_base, row_end, buf.sums);
    }
  }
}

template <int kO, class Dec>
DSV41_BF16DOT_TARGET void BufferedTiles(const Dec& dec, const Args& a, int64_t o0, int64_t row_base,
                                        int64_t row_end, const ScaleFold& fold, Buffers<Dec>& buf) {
  if (dec.Plain(o0, kO)) {
    if constexpr (std::is_same_v<Dec, Mxfp4Dec>) {
      if (fold.ok && dec.Foldable(o0, kO, fold.low, fold.high)) {
        BufferedTile<kO, true, Dec, true>(dec, a, o0, row_base, row_end, buf);
        return;
      }
    }
    BufferedTile<kO, true>(dec, a, o0, row_base, row_end, buf);
  } else {
    BufferedTile<kO, false>(dec, a, o0, row_base, row_end, buf);
  }
}

// Asks for the scale bytes of rows o0..o0+n-1 (none when n <= 0).
template <class Dec>
DSV41_BF16DOT_INLINE void PrefetchScales(const Dec& dec, int64_t o0, int64_t n) {
  if (n <= 0) return;
  const std::span<const uint8_t> bytes = dec.ScaleBytes(o0, n);
  for (size_t i = 0; i < bytes.size(); i += 64) _mm_prefetch(bytes.data() + i, _MM_HINT_T0);
  if (!bytes.empty()) _mm_prefetch(&bytes.back(), _MM_HINT_T0);
}

template <class Dec>
DSV41_BF16DOT_TARGET void RunOutputs(const Dec& dec, const Args& args, int64_t o_begin,
                                     int64_t o_end) {
  constexpr int kO = 4;
  // The tiles prefetch kPrefetchBytes ahead, on into the next outputs (a thread runs a job's
  // units front to back). With few rows (a decode step's GEMVs, bound by the bus) the register
  // tiles' prefetch goes on into the thread's next weights past this range (a.next_begin), or
  // stops at the matrix's end, and the range's first bytes are requested here at once: a small
  // expert's matrix is a few hundred KB, and a cold start and the bytes fetched past its end cost
  // it a tenth to a fifth of its time.
  const uint8_t* end = dec.Row(args.w->out);
  if (args.rows <= kBf16DotRegisterRows) {
    const uint8_t* first = dec.Row(o_begin);
    for (const uint8_t* p = first; p < std::min(end, first + kPrefetchBytes); p += 64) {
      PrefetchWeights(p);
    }
  }
  Args a = args;
  a.stream_end = reinterpret_cast<uintptr_t>(a.next_begin != 0 ? dec.Row(o_end) : end);
  if (a.stride == 0) {  // no inputs: every sum is empty (the tiles' flushes would write none)
    for (int64_t r = 0; r < a.rows; ++r)
      std::fill(a.y + r * a.y_stride + o_begin, a.y + r * a.y_stride + o_end, 0.0f);
    return;
  }
  int64_t o = o_begin;
  // Single rows up to the next multiple of kO keep every tile inside one 32-row FP8 group.
  const int64_t aligned = std::min(o_end, (o_begin + kO - 1) / kO * kO);
  if (a.rows <= kBf16DotRegisterRows) {
    // The scales are a stream of their own that the weights' prefetch does not cover, and a tile
    // reads its rows' scale bytes first (Plain): they are asked for a tile ahead, the first
    // tile's here (a GEMV had waited on their first load, ~4 % of an 8-stream decode step).
    PrefetchScales(dec, o, std::min<int64_t>(8, o_end - o));
    if (a.rows == 1) {
      // One row: eight outputs per tile give FP8 and bf16 eight independent chains (MXFP4 reads
      // them row-major, Tile).
      for (; o < aligned; ++o) OneRowTile<1>(dec, a, o);
      for (; o + 8 <= o_end && o % 8 == 0; o += 8) {
        PrefetchScales(dec, o + 8, std::min<int64_t>(8, o_end - o - 8));
        OneRowTile<8>(dec, a, o);
      }
    }
    for (; o < aligned; ++o) RowTiles<1>(dec, a, o);
    for (; o + kO <= o_end; o += kO) {
      PrefetchScales(dec, o + kO, std::min<int64_t>(kO, o_end - o - kO));
      RowTiles<kO>(dec, a, o);
    }
    for (; o < o_end; ++o) RowTiles<1>(dec, a, o);
    return;
  }
  // Per call: this thread's decode buffers (~40 KB) live on its stack.
  Buffers<Dec> buf;
  ScaleFold fold;
  if constexpr (std::is_same_v<Dec, Mxfp4Dec>) fold = Mxfp4ScaleFold({a.x_exp_min, a.x_exp_max});
  for (int64_t row_base = 0; row_base < a.rows; row_base += kRowBlock) {
    const int64_t row_end = std::min(a.rows, row_base + kRowBlock);
    int64_t t = o_begin;
    for (; t < aligned; ++t) BufferedTiles<1>(dec, a, t, row_base, row_end, fold, buf);
    for (; t + kO <= o_end; t += kO) BufferedTiles<kO>(dec, a, t, row_base, row_end, fold, buf);
    for (; t < o_end; ++t) BufferedTiles<1>(dec, a, t, row_base, row_end, fold, buf);
  }
}

DSV41_BF16DOT_TARGET void Outputs(const LinearWeight& w, const Args& a, int64_t o_begin,
                                  int64_t o_end) {
  switch (w.format) {
    case WeightFormat::kBf16:
      RunOutputs(Bf16Dec{reinterpret_cast<const uint8_t*>(w.weight.data()), 2 * w.in}, a, o_begin,
                 o_end);
      break;
    case WeightFormat::kFp8Block:
      RunOutputs(Fp8Dec(w), a, o_begin, o_end);
      break;
    case WeightFormat::kMxfp4:
      RunOutputs(Mxfp4Dec(w), a, o_begin, o_end);
      break;
    case WeightFormat::kF32:
      DSV41_CHECK(false, "the bf16 dot kernel has no fp32 weights");
      break;
  }
}

DSV41_BF16DOT_TARGET ExponentSpan ExponentRangeOnUnit(const uint16_t* x, int64_t n) {
  return ExponentRange(x, n);
}

}  // namespace

void Bf16DotPrepare(WeightFormat format, const float* x, int64_t rows, int64_t src_stride,
                    int64_t stride, uint16_t* out) {
  if (!Bf16DotSupported()) {
    Bf16DotPrepareScalar(format, x, rows, src_stride, stride, out);
    return;
  }
  const PrepareIndex& t = PrepareIndexFor(format);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * src_stride;
    uint16_t* dst = out + r * stride;
    bool bf16_values = false;
    switch (SuperblockElements(format)) {
      case 128:
        bf16_values = PrepareRow<128>(t, src, stride, dst);
        break;
      case 64:
        bf16_values = PrepareRow<64>(t, src, stride, dst);
        break;
      default:
        bf16_values = PrepareRow<32>(t, src, stride, dst);
        break;
    }
    if (!bf16_values) Bf16DotPrepareScalar(format, src, 1, src_stride, stride, dst);
  }
}

void Bf16ExponentRange(const uint16_t* x, int64_t n, int* low, int* high) {
  if (!Bf16DotSupported()) {
    Bf16ExponentRangeScalar(x, n, low, high);
    return;
  }
  const ExponentSpan span = ExponentRangeOnUnit(x, n);
  *low = span.low;
  *high = span.high;
}

void Bf16DotOutputs(const LinearWeight& w, const LinearInput& x, int64_t o_begin, int64_t o_end,
                    float* y, int64_t y_stride, NextWeights next) {
  DSV41_CHECK(Bf16DotSupported(), "the bf16 dot kernel needs AVX512-BF16 and AVX512-VBMI");
  DSV41_DCHECK(x.kernel == GemmKernel::kBf16Dot && x.format == w.format && x.in == w.in,
               "prepared input does not match the weight");
  Args a{&w, x.bf16, x.rows, x.stride, y, y_stride};
  a.x_exp_min = x.bf16_exp_low;
  a.x_exp_max = x.bf16_exp_high;
  if (next.begin != nullptr && next.begin < next.end) {
    a.next_begin = reinterpret_cast<uintptr_t>(next.begin);
    a.next_end = reinterpret_cast<uintptr_t>(next.end);
  }
  Outputs(w, a, o_begin, o_end);
}

#else  // !DSV41_HAVE_BF16DOT

bool Bf16DotUnitPresent() { return false; }
bool Bf16DotSupported() { return false; }

void Bf16DotPrepare(WeightFormat format, const float* x, int64_t rows, int64_t src_stride,
                    int64_t stride, uint16_t* out) {
  Bf16DotPrepareScalar(format, x, rows, src_stride, stride, out);
}

void Bf16ExponentRange(const uint16_t* x, int64_t n, int* low, int* high) {
  Bf16ExponentRangeScalar(x, n, low, high);
}

void Bf16DotOutputs(const LinearWeight&, const LinearInput&, int64_t, int64_t, float*, int64_t,
                    NextWeights) {
  DSV41_CHECK(false, "the bf16 dot kernel is not built for this CPU architecture");
}

#endif  // DSV41_HAVE_BF16DOT

}  // namespace dsv41::linear_internal

#pragma once

// Exact scalar codecs between fp32 and the checkpoint's narrow formats (model.md §12.1). One
// function per direction. Every function is pure and thread-safe. Encoders round to nearest, ties
// to even (RNE) and never depend on the FP environment's rounding mode (integer arithmetic only).

#include <bit>
#include <cstdint>

namespace dsv41 {

// ---- bf16 (1-8-7) -------------------------------------------------------------------------
// Inline: called per element in the forward's loops, which they let the compiler vectorise.
// RNE; overflow rounds to ±inf as IEEE; NaN stays NaN (quiet bit set, sign and top payload kept).
inline uint16_t Bf16FromF32(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // RNE on the low 16 bits; a carry out of the mantissa increments the exponent (and reaches
  // the infinity encoding from the largest finite binade, as IEEE overflow does).
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
// Exact.
inline float F32FromBf16(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}
// The bf16 value of x as an fp32 (F32FromBf16(Bf16FromF32(x))).
inline float Bf16Round(float x) { return F32FromBf16(Bf16FromF32(x)); }

// ---- IEEE binary16 (1-5-10) ---------------------------------------------------------------
// RNE including subnormals (smallest 2^-24); |x| at or above 65520 rounds to ±inf; NaN -> quiet
// NaN (0x7E00 | sign | top payload bits).
uint16_t F16FromF32(float x);
// Exact.
float F32FromF16(uint16_t bits);

// ---- e4m3fn (FP8: 1-4-3, bias 7, no infinities) --------------------------------------------
inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE4m3NaN = 0x7F;  // 0xFF is the negative-signed NaN
// RNE, ties to even mantissa, subnormals (m/8 · 2^-6, smallest 2^-9) included. The reference only
// casts values already clamped to ±448; beyond that this encoder SATURATES: |x| > 448 and ±inf
// give ±448 (0x7E / 0xFE). (torch's non-saturating cast would give NaN for |x| >= 480; model.md
// §12.7 asks to clamp, and a clamped input never reaches that branch.) NaN gives 0x7F | sign.
// -0 gives 0x80.
uint8_t E4m3FromF32(float x);
// Exact; 0x7F and 0xFF decode to NaN.
float F32FromE4m3(uint8_t code);

// ---- ue8m0 (scale byte) ---------------------------------------------------------------------
// 2^(b - 127) exactly: b = 0 is 2^-127 (an fp32 subnormal), b = 254 is 2^127; 0xFF is NaN.
// Inline: the kernels' rare scale paths call it inside loops whose vector registers a call
// would spill.
constexpr float F32FromE8m0(uint8_t b) {
  if (b == 0xFF) return std::bit_cast<float>(0x7FC00000u);  // quiet NaN
  if (b == 0) return std::bit_cast<float>(0x00400000u);     // 2^-127, subnormal
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 23);
}

// ---- e2m1 (FP4: bit 3 sign, magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6) ---------------------------
// RNE onto the grid with ties to the even code: 0.25, 1.25, 2.5, 5 round down; 0.75, 1.75, 3.5
// round up. |x| >= 6 (and ±inf) saturate to ±6. The sign bit is kept, so -0 (and negative values
// that round to zero) give 0x8. e2m1 has no NaN: NaN (a bug upstream, inputs are clamped) gives
// ±0 with its sign bit. Returns a code in 0..15.
uint8_t E2m1FromF32(float x);
// Exact; only the low 4 bits of `code` are read.
float F32FromE2m1(uint8_t code);

// ---- MXFP4 packing (checkpoint.md §4.2): element 2k in bits 0-3, element 2k+1 in bits 4-7 ----
inline uint8_t PackE2m1Pair(uint8_t even_code, uint8_t odd_code) {
  return static_cast<uint8_t>((even_code & 0x0F) | ((odd_code & 0x0F) << 4));
}
// The e2m1 code of element `idx` of a packed row (byte idx / 2, low nibble when idx is even).
inline uint8_t E2m1CodeAt(const uint8_t* packed, int64_t idx) {
  const uint8_t byte = packed[idx >> 1];
  return static_cast<uint8_t>((idx & 1) ? (byte >> 4) : (byte & 0x0F));
}

}  // namespace dsv41

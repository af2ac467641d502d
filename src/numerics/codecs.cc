#include "numerics/codecs.h"

#include <bit>
#include <cstdint>

namespace dsv41 {
namespace {

constexpr uint32_t kF32SignMask = 0x80000000u;
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32ExpMask = 0x7F800000u;

bool IsNanBits(uint32_t abs_bits) { return abs_bits > kF32ExpMask; }

// Rounds the finite, non-negative fp32 with bits `abs_bits` to a binary format with `man_bits`
// mantissa bits and exponent bias `bias` (subnormals included), RNE, and returns its
// exponent|mantissa code without sign. The exponent field is not bounded: a result beyond the
// format's largest finite value comes back as a larger code, for the caller to saturate or turn
// into infinity.
uint32_t RoundAbsToCode(uint32_t abs_bits, int man_bits, int bias) {
  int exp_field = static_cast<int>(abs_bits >> 23);
  uint32_t sig = abs_bits & 0x007FFFFFu;  // value = sig · 2^(max(exp_field,1) - 150)
  if (exp_field != 0) {
    sig |= 0x00800000u;
  } else {
    exp_field = 1;
  }
  // Target biased exponent of this binade; below 1 the target is subnormal and its quantum stays
  // 2^(1 - bias - man_bits).
  const int target_exp = exp_field - 127 + bias;
  const int shift = 23 - man_bits + (target_exp < 1 ? 1 - target_exp : 0);
  if (shift >= 25) return 0;  // sig < 2^24 <= half a quantum: rounds to zero (a tie goes to 0).
  uint32_t q = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  if (target_exp < 1) return q;  // q == 2^man_bits is the smallest normal: the code is the same.
  // q in [2^m, 2^(m+1)]; a carry to 2^(m+1) moves into the exponent field by itself.
  return q + (static_cast<uint32_t>(target_exp - 1) << man_bits);
}

}  // namespace

uint16_t F16FromF32(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((bits & kF32SignMask) >> 16);
  const uint32_t abs_bits = bits & kF32AbsMask;
  if (IsNanBits(abs_bits)) {
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs_bits >> 13) & 0x03FFu));
  }
  if (abs_bits == kF32ExpMask) return static_cast<uint16_t>(sign | 0x7C00u);
  const uint32_t code = RoundAbsToCode(abs_bits, 10, 15);
  return static_cast<uint16_t>(sign | (code >= 0x7C00u ? 0x7C00u : code));
}

float F32FromF16(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp_field = (bits >> 10) & 0x1Fu;
  const uint32_t man = bits & 0x03FFu;
  if (exp_field == 0x1F) return std::bit_cast<float>(sign | kF32ExpMask | (man << 13));
  if (exp_field == 0) {
    // m · 2^-24 is exact in fp32 (m < 2^10).
    const float magnitude = static_cast<float>(man) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exp_field + 112u) << 23) | (man << 13));
}

uint8_t E4m3FromF32(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits & kF32SignMask) >> 24);
  const uint32_t abs_bits = bits & kF32AbsMask;
  if (IsNanBits(abs_bits)) return static_cast<uint8_t>(sign | kE4m3NaN);
  if (abs_bits == kF32ExpMask) return static_cast<uint8_t>(sign | 0x7Eu);  // inf saturates
  const uint32_t code = RoundAbsToCode(abs_bits, 3, 7);
  return static_cast<uint8_t>(sign | (code > 0x7Eu ? 0x7Eu : code));
}

float F32FromE4m3(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exp_field = (code >> 3) & 0x0Fu;
  const uint32_t man = code & 0x07u;
  if (exp_field == 0x0F && man == 0x07) {
    return std::bit_cast<float>(sign | 0x7FC00000u);
  }
  if (exp_field == 0) {
    const float magnitude = static_cast<float>(man) * 0x1p-9f;  // m/8 · 2^-6, exact
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exp_field + 120u) << 23) | (man << 20));
}

uint8_t E2m1FromF32(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits & kF32SignMask) >> 28);
  const uint32_t abs_bits = bits & kF32AbsMask;
  if (IsNanBits(abs_bits)) return sign;
  if (abs_bits >= kF32ExpMask) return static_cast<uint8_t>(sign | 0x7u);
  // e2m1 is the binary format with 1 mantissa bit and bias 1: codes 0..7 are exactly the grid.
  const uint32_t code = RoundAbsToCode(abs_bits, 1, 1);
  return static_cast<uint8_t>(sign | (code > 7u ? 7u : code));
}

float F32FromE2m1(uint8_t code) {
  static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kMagnitudes[code & 0x7u];
  return (code & 0x8u) ? -magnitude : magnitude;
}

}  // namespace dsv41

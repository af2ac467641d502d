#pragma once

// The model's quantise-dequantise formats (model.md §12.2, QAT: part of the forward, always on)
// and the dynamic activation quantiser in front of FP8/FP4 GEMMs (§12.3). All functions are pure
// over their arguments and thread-safe; none allocates.
//
// Every fp32 operation below is one IEEE operation rounded to nearest even, exactly as the spec
// writes it: where the spec multiplies by a rounded reciprocal (fq8, fq4_b32_pow2) so do we, and
// where it divides (fq4_b16_e4m3) so do we. Outputs are exact in bf16, so rounding them to the
// tensor's bf16 dtype afterwards changes nothing.
//
// Non-finite inputs are outside the contract (the model never produces them). For the record:
// amax is a running std::max, which skips NaN, so a NaN element stays NaN and its neighbours are
// scaled by the block's finite amax; ±inf makes the scale infinite.

#include <cstdint>
#include <span>

namespace dsv41 {

inline constexpr int kFq8Block = 32;
inline constexpr int kFq4B16Block = 16;
inline constexpr int kFq4B32Block = 32;

// §12.2's pow2ceil: 2^(E - 127 + (M != 0)) where E and M are t's exponent and mantissa fields,
// i.e. the least power of two >= t. Precondition t > 0. A subnormal t gives 2^-126; t above
// 2^127 (and +inf) gives +inf.
float Pow2Ceil(float t);

// fq8_b32 (SWA KV, DSpark KV): per block of 32, amax = max(max|x|, fp32(1e-4)),
// s = Pow2Ceil(fp32(amax · fp32(1/448))), value = e4m3(clamp(x / s, ±448)) · s. In place;
// x.size() must be a multiple of 32.
void FakeQuantFq8B32(std::span<float> x);

// fq4_b16_e4m3 (compressed KV): per block of 16, amax = max(max|x|, 6·2^-9),
// s = e4m3(fp32(amax / 6)) (saturating at 448), value = e2m1(clamp(fp32(x / s), ±6)) · s. In place;
// x.size() must be a multiple of 16.
void FakeQuantFq4B16E4m3(std::span<float> x);

// fq4_b32_pow2 (index K at publish, index Q after RoPE): per block of 32,
// amax = max(max|x|, 6·2^-126), s = Pow2Ceil(fp32(amax · fp32(1/6))),
// value = e2m1(clamp(x / s, ±6)) · s. In place; x.size() must be a multiple of 32.
void FakeQuantFq4B32Pow2(std::span<float> x);

// §12.3 activation quantisation (the fq8_b32 steps, kept as codes): for block b of 32 elements of
// x, scales[b] = s (a power of two) and codes[32b + j] = e4m3(clamp(x[32b + j] / s, ±448)).
// x.size() must be a multiple of 32, codes.size() == x.size(), scales.size() == x.size() / 32.
void QuantizeActivationFq8B32(std::span<const float> x, std::span<uint8_t> codes,
                              std::span<float> scales);

// The dequantised values of QuantizeActivationFq8B32: out[i] = e4m3(codes[i]) · scales[i / 32]
// (exact). out.size() == codes.size() == 32 · scales.size(). Equals FakeQuantFq8B32 of the input.
void DequantizeActivationFq8B32(std::span<const uint8_t> codes, std::span<const float> scales,
                                std::span<float> out);

}  // namespace dsv41

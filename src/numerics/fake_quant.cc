#include "numerics/fake_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "base/check.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// Scalar constants converted to fp32 once (model.md §12.8 item 5). 1/448 and 1/6 are rounded by
// the compiler's correctly rounded fp32 division, which is what fp32(1/448) means (the tests
// check it against the double-then-float conversion too).
constexpr float kFq8AmaxFloor = 1e-4f;
constexpr float kInv448 = 1.0f / 448.0f;
constexpr float kFq4B16AmaxFloor = 6.0f * 0x1p-9f;
constexpr float kFq4B32AmaxFloor = 6.0f * 0x1p-126f;
constexpr float kInv6 = 1.0f / 6.0f;

float BlockAmax(const float* x, size_t n) {
  float amax = 0.0f;
  for (size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

float Clamp(float v, float lo, float hi) { return std::min(std::max(v, lo), hi); }

// The fq8_b32 scale of one block of 32 (§12.2 steps 1-2).
float Fq8Scale(const float* x) {
  const float amax = std::max(BlockAmax(x, kFq8Block), kFq8AmaxFloor);
  const float scaled = amax * kInv448;
  return Pow2Ceil(scaled);
}

}  // namespace

float Pow2Ceil(float t) {
  const uint32_t bits = std::bit_cast<uint32_t>(t);
  DSV41_DCHECK(t > 0.0f, "Pow2Ceil(%g)", static_cast<double>(t));
  const int exp_field = static_cast<int>((bits >> 23) & 0xFFu);
  const int k = exp_field - 127 + ((bits & 0x007FFFFFu) != 0 ? 1 : 0);  // result is 2^k
  if (k >= 128) return std::numeric_limits<float>::infinity();
  if (k >= -126) return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
  return std::bit_cast<float>(0x00400000u);  // k == -127 (t == +0 would land here): 2^-127
}

void FakeQuantFq8B32(std::span<float> x) {
  DSV41_CHECK(x.size() % kFq8Block == 0, "fq8_b32 length %zu", x.size());
  for (size_t b = 0; b < x.size(); b += kFq8Block) {
    float* block = x.data() + b;
    const float s = Fq8Scale(block);
    for (int j = 0; j < kFq8Block; ++j) {
      const float y = Clamp(block[j] / s, -kE4m3Max, kE4m3Max);  // exact: s is a power of two
      block[j] = F32FromE4m3(E4m3FromF32(y)) * s;                // exact: 4 bits times 2^k
    }
  }
}

void FakeQuantFq4B16E4m3(std::span<float> x) {
  DSV41_CHECK(x.size() % kFq4B16Block == 0, "fq4_b16 length %zu", x.size());
  for (size_t b = 0; b < x.size(); b += kFq4B16Block) {
    float* block = x.data() + b;
    const float amax = std::max(BlockAmax(block, kFq4B16Block), kFq4B16AmaxFloor);
    const float s = F32FromE4m3(E4m3FromF32(amax / 6.0f));  // fp32 division, then e4m3 RNE
    for (int j = 0; j < kFq4B16Block; ++j) {
      const float y = Clamp(block[j] / s, -6.0f, 6.0f);  // a true fp32 division
      block[j] = F32FromE2m1(E2m1FromF32(y)) * s;        // exact: 2 bits times 4 bits
    }
  }
}

void FakeQuantFq4B32Pow2(std::span<float> x) {
  DSV41_CHECK(x.size() % kFq4B32Block == 0, "fq4_b32 length %zu", x.size());
  for (size_t b = 0; b < x.size(); b += kFq4B32Block) {
    float* block = x.data() + b;
    const float amax = std::max(BlockAmax(block, kFq4B32Block), kFq4B32AmaxFloor);
    const float scaled = amax * kInv6;
    const float s = Pow2Ceil(scaled);
    for (int j = 0; j < kFq4B32Block; ++j) {
      const float y = Clamp(block[j] / s, -6.0f, 6.0f);
      block[j] = F32FromE2m1(E2m1FromF32(y)) * s;
    }
  }
}

void QuantizeActivationFq8B32(std::span<const float> x, std::span<uint8_t> codes,
                              std::span<float> scales) {
  DSV41_CHECK(x.size() % kFq8Block == 0, "activation length %zu", x.size());
  DSV41_CHECK(codes.size() == x.size() && scales.size() == x.size() / kFq8Block,
              "codes %zu, scales %zu for %zu values", codes.size(), scales.size(), x.size());
  for (size_t b = 0; b < scales.size(); ++b) {
    const float* block = x.data() + b * kFq8Block;
    const float s = Fq8Scale(block);
    scales[b] = s;
    for (int j = 0; j < kFq8Block; ++j) {
      codes[b * kFq8Block + j] = E4m3FromF32(Clamp(block[j] / s, -kE4m3Max, kE4m3Max));
    }
  }
}

void DequantizeActivationFq8B32(std::span<const uint8_t> codes, std::span<const float> scales,
                                std::span<float> out) {
  DSV41_CHECK(codes.size() == out.size() && codes.size() == scales.size() * kFq8Block,
              "codes %zu, scales %zu, out %zu", codes.size(), scales.size(), out.size());
  for (size_t i = 0; i < codes.size(); ++i) out[i] = F32FromE4m3(codes[i]) * scales[i / kFq8Block];
}

}  // namespace dsv41

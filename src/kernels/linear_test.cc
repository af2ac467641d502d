#include "kernels/linear.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace dsv41 {
namespace {

std::span<const std::byte> Bytes(const std::vector<uint8_t>& v) {
  return std::as_bytes(std::span<const uint8_t>(v));
}

// FP8 2×32, one tile with scale byte 126 (2^-1). Row 0: code 0x38 (1.0) everywhere → 0.5.
// Row 1: 0x40 (2.0) at even i, 0xB8 (−1.0) at odd i → 1.0, −0.5. x is model.md §12.2's fq8_b32
// worked example, whose quantised values the spec gives: [1.0, 0.3125, −0.009765625,
// 0.00146484375, 0, ...].
TEST(LinearRefTest, Fp8HandComputedTwoRowsWithActivationQuantisation) {
  std::vector<uint8_t> weight(64);
  for (int i = 0; i < 32; ++i) {
    weight[i] = 0x38;
    weight[32 + i] = (i % 2 == 0) ? 0x40 : 0xB8;
  }
  const std::vector<uint8_t> scale = {126};
  const LinearWeight w{WeightFormat::kFp8Block, 2, 32, Bytes(weight), Bytes(scale)};
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[1] = 0.3f;
  x[2] = -0.01f;
  x[3] = 0.0015f;
  std::vector<float> y(2);
  LinearRef(w, x, 1, y, LinearOptions{.quantize_activations = true});
  // 0.5 · (1 + 0.3125 − 0.009765625 + 0.00146484375)
  EXPECT_EQ(y[0], 0.652099609375f);
  // 1 − 0.5·0.3125 − 0.009765625 − 0.5·0.00146484375
  EXPECT_EQ(y[1], 0.833251953125f);
}

// Without activation quantisation the same weights see x itself: x = 1..32 gives
// row 0: 0.5 · 528 = 264; row 1: (1 + 3 + ... + 31) − 0.5 · (2 + 4 + ... + 32) = 256 − 136 = 120.
TEST(LinearRefTest, Fp8HandComputedWithoutActivationQuantisation) {
  std::vector<uint8_t> weight(64);
  for (int i = 0; i < 32; ++i) {
    weight[i] = 0x38;
    weight[32 + i] = (i % 2 == 0) ? 0x40 : 0xB8;
  }
  const std::vector<uint8_t> scale = {126};
  const LinearWeight w{WeightFormat::kFp8Block, 2, 32, Bytes(weight), Bytes(scale)};
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i + 1);
  std::vector<float> y(2);
  LinearRef(w, x, 1, y, LinearOptions{});
  EXPECT_EQ(y[0], 264.0f);
  EXPECT_EQ(y[1], 120.0f);
}

// MXFP4 1×32, scale byte 128 (2). Byte 0 = 0xA7: element 0 code 7 (6.0), element 1 code 0xA
// (−1.0); other bytes 0x22 (1.0, 1.0). W = [12, −2, 2 × 30]; x = 1 → 12 − 2 + 60 = 70, also with
// activation quantisation (1.0 is e4m3-exact with s = 2^-8).
TEST(LinearRefTest, Mxfp4HandComputedLowNibbleFirst) {
  std::vector<uint8_t> weight(16, 0x22);
  weight[0] = 0xA7;
  const std::vector<uint8_t> scale = {128};
  const LinearWeight w{WeightFormat::kMxfp4, 1, 32, Bytes(weight), Bytes(scale)};
  const std::vector<float> x(32, 1.0f);
  std::vector<float> y(1);
  LinearRef(w, x, 1, y, LinearOptions{});
  EXPECT_EQ(y[0], 70.0f);
  LinearRef(w, x, 1, y, LinearOptions{.quantize_activations = true});
  EXPECT_EQ(y[0], 70.0f);
}

// BF16 1×3: 0x3F80 = 1.0, 0x4040 = 3.0, 0xBF00 = −0.5; two input rows.
TEST(LinearRefTest, Bf16HandComputedTwoInputRows) {
  const uint16_t bits[3] = {0x3F80, 0x4040, 0xBF00};
  std::vector<uint8_t> weight(6);
  std::memcpy(weight.data(), bits, 6);
  const LinearWeight w{WeightFormat::kBf16, 1, 3, Bytes(weight), {}};
  const std::vector<float> x = {2.0f, 1.0f, 4.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> y(2);
  LinearRef(w, x, 2, y, LinearOptions{});
  EXPECT_EQ(y[0], 3.0f);  // 2 + 3 − 2
  EXPECT_EQ(y[1], 3.5f);  // 1 + 3 − 0.5
}

}  // namespace
}  // namespace dsv41

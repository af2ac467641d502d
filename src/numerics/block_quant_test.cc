#include "numerics/block_quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace dsv41 {
namespace {

uint32_t Bits(float x) { return std::bit_cast<uint32_t>(x); }

// Independent decoders from the format definitions (checkpoint.md §4, model.md §12.1).
double RefE4m3(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return (c & 0x80) ? -v : v;
}
double RefE2m1(uint8_t c) {
  const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (c & 8) ? -mag[c & 7] : mag[c & 7];
}
double RefScale(uint8_t b) { return std::ldexp(1.0, b - 127); }

// A random FP8 matrix as stored: codes avoid NaN; every tile's largest |code| is in (224, 448]
// (codes 0x77..0x7E) so the quantiser must pick the same scale back.
Fp8BlockWeights RandomFp8(std::mt19937& rng, int64_t rows, int64_t cols) {
  Fp8BlockWeights q;
  q.rows = rows;
  q.cols = cols;
  q.weight.resize(rows * cols);
  q.scale.resize(NumTiles(rows) * NumTiles(cols));
  std::uniform_int_distribution<int> code(0, 0xFE), scale(110, 140);
  for (auto& c : q.weight) {
    c = static_cast<uint8_t>(code(rng));
    if ((c & 0x7F) == 0x7F) c = 0x00;
  }
  for (auto& s : q.scale) s = static_cast<uint8_t>(scale(rng));
  for (int64_t tr = 0; tr < NumTiles(rows); ++tr) {
    for (int64_t tc = 0; tc < NumTiles(cols); ++tc) {
      const int64_t r0 = tr * 32, c0 = tc * 32;
      uint8_t& first = q.weight[r0 * cols + c0];
      // 0x77..0x7E are 240..448.
      first = static_cast<uint8_t>((first & 0x80) |
                                   std::uniform_int_distribution<int>(0x77, 0x7E)(rng));
    }
  }
  return q;
}

std::vector<float> RefDequantFp8(const Fp8BlockWeights& q) {
  std::vector<float> w(q.rows * q.cols);
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const double s = RefScale(q.scale[(r / 32) * NumTiles(q.cols) + c / 32]);
      w[r * q.cols + c] = static_cast<float>(RefE4m3(q.weight[r * q.cols + c]) * s);
    }
  }
  return w;
}

TEST(BlockQuantTest, Fp8DequantisesAsTheFormula) {
  std::mt19937 rng(1);
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{64, 96}, {45, 70}, {1, 1}, {33, 31}}) {
    const Fp8BlockWeights q = RandomFp8(rng, rows, cols);
    std::vector<float> out(rows * cols);
    DequantizeFp8Blocks(rows, cols, q.weight, q.scale, out);
    const std::vector<float> want = RefDequantFp8(q);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(Bits(out[i]), Bits(want[i])) << i;
    std::vector<float> row(cols);
    DequantizeFp8Row(rows, cols, q.weight, q.scale, rows - 1, row);
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(Bits(row[c]), Bits(want[(rows - 1) * cols + c]));
  }
}

TEST(BlockQuantTest, Fp8RoundTripsRepresentableValuesIncludingPartialTiles) {
  std::mt19937 rng(2);
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{64, 64}, {45, 70}, {32, 33}, {7, 100}}) {
    const Fp8BlockWeights q = RandomFp8(rng, rows, cols);
    const std::vector<float> w = RefDequantFp8(q);
    Result<Fp8BlockWeights> back = QuantizeFp8Blocks(rows, cols, w.data());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->rows, rows);
    EXPECT_EQ(back->cols, cols);
    ASSERT_EQ(back->scale.size(), static_cast<size_t>(NumTiles(rows) * NumTiles(cols)));
    EXPECT_EQ(back->scale, q.scale) << rows << "x" << cols;
    EXPECT_EQ(back->weight, q.weight) << rows << "x" << cols;
  }
}

TEST(BlockQuantTest, Fp8ScaleIsTheLeastPowerOfTwoThatFits) {
  // One 32x40 matrix: tiles (0,0) and (0,1); the second is a partial tile of 8 columns.
  std::vector<float> w(32 * 40, 0.0f);
  w[5 * 40 + 3] = 448.0f * 4;  // tile (0,0): amax = 448·2^2 exactly -> byte 129, code 448
  w[0 * 40 + 0] = -1.0f;
  w[31 * 40 + 39] = 448.0f * 4 * (1 + 0x1p-20f);  // tile (0,1): just above -> 2^3
  Result<Fp8BlockWeights> q = QuantizeFp8Blocks(32, 40, w.data());
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->scale.size(), 2u);
  EXPECT_EQ(q->scale[0], 129);
  EXPECT_EQ(q->scale[1], 130);
  EXPECT_EQ(q->weight[5 * 40 + 3], 0x7E);
  EXPECT_EQ(q->weight[0], 0xA8);             // -1 / 4 = -0.25
  EXPECT_EQ(q->weight[31 * 40 + 39], 0x76);  // 1792.0017 / 8 = 224.0002 -> 224
  // An all-zero tile gets 2^0; a tiny one clamps at 2^-127.
  std::vector<float> z(4, 0.0f);
  Result<Fp8BlockWeights> zq = QuantizeFp8Blocks(2, 2, z.data());
  ASSERT_TRUE(zq.ok());
  EXPECT_EQ(zq->scale[0], 127);
  std::vector<float> tiny = {std::numeric_limits<float>::denorm_min()};
  Result<Fp8BlockWeights> tq = QuantizeFp8Blocks(1, 1, tiny.data());
  ASSERT_TRUE(tq.ok());
  EXPECT_EQ(tq->scale[0], 0);
}

TEST(BlockQuantTest, Fp8QuantisationOfArbitraryValuesIsNearest) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const int64_t rows = 40, cols = 50;
  std::vector<float> w(rows * cols);
  for (auto& v : w) v = normal(rng);
  Result<Fp8BlockWeights> q = QuantizeFp8Blocks(rows, cols, w.data());
  ASSERT_TRUE(q.ok());
  std::vector<float> back(rows * cols);
  DequantizeFp8Blocks(rows, cols, q->weight, q->scale, back);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const int64_t r = i / cols, c = i % cols;
    const double s = RefScale(q->scale[(r / 32) * NumTiles(cols) + c / 32]);
    // Relative error of a normal e4m3 value is at most 2^-4; absolute at most 2^-10 · s.
    EXPECT_LE(std::fabs(static_cast<double>(back[i]) - w[i]),
              std::max(std::fabs(static_cast<double>(w[i])) / 16, std::ldexp(s, -10)));
  }
}

TEST(BlockQuantTest, Mxfp4PacksElementTwoKInTheLowNibble) {
  std::vector<float> w(32, 0.0f);
  w[0] = 0.5f;   // code 1
  w[1] = -1.0f;  // code 0xA
  w[2] = 6.0f;   // code 7
  w[3] = 1.5f;   // code 3
  Result<Mxfp4Weights> q = QuantizeMxfp4(1, 32, w.data());
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->weight.size(), 16u);
  ASSERT_EQ(q->scale.size(), 1u);
  EXPECT_EQ(q->scale[0], 127);  // amax 6 = 6·2^0
  EXPECT_EQ(q->weight[0], 0xA1);
  EXPECT_EQ(q->weight[1], 0x37);
  // And back: handcrafted bytes decode with element 2k from bits 0-3.
  const std::vector<uint8_t> packed = {0xA1, 0x37, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xF0};
  const std::vector<uint8_t> scale = {128};  // 2
  std::vector<float> out(32);
  DequantizeMxfp4(1, 32, packed, scale, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 12.0f);
  EXPECT_EQ(out[3], 3.0f);
  EXPECT_EQ(Bits(out[30]), Bits(0.0f));
  EXPECT_EQ(out[31], -12.0f);
}

TEST(BlockQuantTest, Mxfp4RoundTripsRepresentableValues) {
  std::mt19937 rng(4);
  const int64_t rows = 5, cols = 96;
  Mxfp4Weights q;
  q.rows = rows;
  q.cols = cols;
  q.weight.resize(rows * cols / 2);
  q.scale.resize(rows * cols / 32);
  std::uniform_int_distribution<int> byte(0, 255), scale(100, 150);
  for (auto& b : q.weight) b = static_cast<uint8_t>(byte(rng));
  for (auto& s : q.scale) s = static_cast<uint8_t>(scale(rng));
  // Each block's first element gets magnitude 4 or 6 (so the scale is recoverable).
  for (int64_t blk = 0; blk < rows * cols / 32; ++blk) {
    uint8_t& b = q.weight[blk * 16];
    b = static_cast<uint8_t>((b & 0xF8) | (6 + (b & 1)));
  }
  std::vector<float> w(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte_val = q.weight[(r * cols + c) / 2];
      const uint8_t nib = (c % 2 == 0) ? (byte_val & 15) : (byte_val >> 4);
      w[r * cols + c] = static_cast<float>(RefE2m1(nib) * RefScale(q.scale[(r * cols + c) / 32]));
    }
  }
  std::vector<float> out(rows * cols);
  DequantizeMxfp4(rows, cols, q.weight, q.scale, out);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(Bits(out[i]), Bits(w[i])) << i;
  std::vector<float> row(cols);
  DequantizeMxfp4Row(rows, cols, q.weight, q.scale, 3, row);
  for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(Bits(row[c]), Bits(w[3 * cols + c]));
  Result<Mxfp4Weights> back = QuantizeMxfp4(rows, cols, w.data());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->scale, q.scale);
  EXPECT_EQ(back->weight, q.weight);
}

TEST(BlockQuantTest, Mxfp4ScaleNeverClips) {
  // amax 7 -> 7 / 6 > 1, so the scale is 2 (the OCP rule 2^(floor(log2 7) - 2) = 1 would clip).
  std::vector<float> w(32, 0.0f);
  w[9] = 7.0f;
  w[10] = 2.5f;  // / 2 = 1.25 -> ties down to 1 -> 2
  Result<Mxfp4Weights> q = QuantizeMxfp4(1, 32, w.data());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->scale[0], 128);
  std::vector<float> out(32);
  DequantizeMxfp4(1, 32, q->weight, q->scale, out);
  EXPECT_EQ(out[9], 8.0f);
  EXPECT_EQ(out[10], 2.0f);
}

TEST(BlockQuantTest, BadInputsReturnStatusNamingTheFault) {
  std::vector<float> w(64, 1.0f);
  w[37] = std::numeric_limits<float>::quiet_NaN();
  Result<Fp8BlockWeights> a = QuantizeFp8Blocks(2, 32, w.data());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("[1, 5]"), std::string::npos) << a.status().message();
  Result<Mxfp4Weights> b = QuantizeMxfp4(2, 32, w.data());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("[1, 5]"), std::string::npos) << b.status().message();
  w[37] = 1.0f;
  Result<Mxfp4Weights> c = QuantizeMxfp4(4, 16, w.data());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("16 columns"), std::string::npos) << c.status().message();
  Result<Fp8BlockWeights> d = QuantizeFp8Blocks(-1, 4, w.data());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("negative"), std::string::npos);
  Result<Fp8BlockWeights> e = QuantizeFp8Blocks(0, 5, nullptr);  // empty is fine
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->weight.empty());
  EXPECT_TRUE(e->scale.empty());
}

TEST(BlockQuantDeathTest, DequantiseChecksSizes) {
  std::vector<uint8_t> codes(10), scales(1);
  std::vector<float> out(10);
  EXPECT_DEATH(DequantizeFp8Blocks(2, 6, codes, scales, out), "fp8 \\[2, 6\\]");
  EXPECT_DEATH(DequantizeMxfp4(1, 20, codes, scales, out), "shape");
}

TEST(BlockQuantTest, NanScaleByteDequantisesToNan) {
  const std::vector<uint8_t> codes = {0x38};
  const std::vector<uint8_t> scales = {0xFF};
  std::vector<float> out(1);
  DequantizeFp8Blocks(1, 1, codes, scales, out);
  EXPECT_TRUE(std::isnan(out[0]));
}

}  // namespace
}  // namespace dsv41

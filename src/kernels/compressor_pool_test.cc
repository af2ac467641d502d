#include "kernels/compressor_pool.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// Group sizes 1..5 and 8, every channel count 1..40 (past 2×lanes+1), member rows misaligned by
// one float, values and gate logits over a wide range (gates far apart underflow some weights to
// 0, equal gates tie the max): the SIMD form returns the reference's bits on every target.
TEST(CompressorPoolTest, SimdEqualsReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-30, 30);
  std::uniform_int_distribution<int> gate_exp(-10, 7);
  for (size_t r : {1u, 2u, 3u, 4u, 5u, 8u}) {
    for (size_t dim = 1; dim <= 40; ++dim) {
      for (size_t offset : {0u, 1u}) {
        // Member m's [a ‖ g] row at offset + m·(2·dim + 1): every row starts at a different
        // alignment.
        std::vector<float> buf(offset + r * (2 * dim + 1));
        for (float& v : buf) v = Bf16Round(std::ldexp(mant(rng), exp(rng)));
        std::vector<const float*> values(r), gates(r);
        for (size_t m = 0; m < r; ++m) {
          float* row = buf.data() + offset + m * (2 * dim + 1);
          for (size_t c = 0; c < dim; ++c) {
            row[dim + c] = (c % 5 == 0 && m > 0) ? row[dim + c - (2 * dim + 1)]  // tied gates
                                                 : std::ldexp(mant(rng), gate_exp(rng));
          }
          values[m] = row;
          gates[m] = row + dim;
        }
        std::vector<float> want(dim);
        CompressorPoolRef(values, gates, want);
        SCOPED_TRACE("r " + std::to_string(r) + " dim " + std::to_string(dim) + " offset " +
                     std::to_string(offset));
        for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
          hwy::SetSupportedTargetsForTest(target);
          std::vector<float> got(dim + 1), scratch(r * std::max<size_t>(dim, 2));
          CompressorPoolSimd(values, gates, std::span<float>(got).subspan(1, dim), scratch);
          for (size_t c = 0; c < dim; ++c) {
            ASSERT_EQ(std::bit_cast<uint32_t>(got[1 + c]), std::bit_cast<uint32_t>(want[c]))
                << hwy::TargetName(target) << " channel " << c;
          }
        }
        hwy::SetSupportedTargetsForTest(0);
      }
    }
  }
}

// The reference is the written rule: a two-member group with gates (0, ln 3) weighs its values
// 1/4 and 3/4 (up to the fp32 roundings of the exp and the division), then rounds to bf16.
TEST(CompressorPoolTest, ReferenceIsTheGatedMean) {
  const float a0[] = {4.0f, -1.0f};
  const float a1[] = {8.0f, 2.0f};
  const float g0[] = {0.0f, 5.0f};
  const float g1[] = {1.0986123f, 5.0f};
  const float* values[] = {a0, a1};
  const float* gates[] = {g0, g1};
  std::vector<float> out(2);
  CompressorPoolRef(values, gates, out);
  const float e1 = CrExp(1.0986123f - 1.0986123f);
  const float e0 = CrExp(0.0f - 1.0986123f);
  const float den = e0 + e1;
  EXPECT_EQ(out[0], Bf16Round((e0 / den) * 4.0f + (e1 / den) * 8.0f));
  EXPECT_EQ(out[1], Bf16Round(0.5f * -1.0f + 0.5f * 2.0f));
}

}  // namespace
}  // namespace dsv41

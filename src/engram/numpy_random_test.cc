#include "engram/numpy_random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace dsv41 {
namespace {

__extension__ typedef unsigned __int128 Uint128;

constexpr uint64_t kTen19 = 10000000000000000000ull;

// A 38-digit decimal given as two 19-digit halves.
Uint128 Decimal(uint64_t upper19, uint64_t lower19) {
  return Uint128{upper19} * kTen19 + lower19;
}

Uint128 Join(uint64_t high, uint64_t low) { return (Uint128{high} << 64) | low; }

// numpy 1.24: np.random.PCG64(0).state["state"] ==
//   {"state": 35399562948360463058890781895381311971,
//    "inc": 87136372517582989555478159403783844777}.
TEST(NumpyPcg64Test, SeedZeroStateAndIncrementMatchNumpy) {
  const NumpyPcg64 generator(0);
  EXPECT_TRUE(Join(generator.state_high(), generator.state_low()) ==
              Decimal(3539956294836046305ull, 8890781895381311971ull));
  EXPECT_TRUE(Join(generator.inc_high(), generator.inc_low()) ==
              Decimal(8713637251758298955ull, 5478159403783844777ull));
}

// np.random.default_rng(0).random() == 0.6369616873214543 (a widely quoted value), and numpy's
// quick-start example: default_rng(12345).random(3) == [0.22733602, 0.31675834, 0.79736546].
TEST(NumpyPcg64Test, RandomDoublesMatchNumpy) {
  NumpyPcg64 zero(0);
  EXPECT_EQ(zero.NextDouble(), 0.6369616873214543);
  NumpyPcg64 generator(12345);
  EXPECT_NEAR(generator.NextDouble(), 0.22733602, 5e-9);
  EXPECT_NEAR(generator.NextDouble(), 0.31675834, 5e-9);
  EXPECT_NEAR(generator.NextDouble(), 0.79736546, 5e-9);
}

// numpy's quick-start example: default_rng(12345).integers(low=0, high=10, size=3) == [6, 2, 7]
// (a range below 2^32: the 32-bit Lemire path).
TEST(NumpyIntegersTest, SmallRangeMatchesNumpyQuickStart) {
  NumpyPcg64 generator(12345);
  std::vector<int64_t> values(3);
  NumpyIntegers(generator, 0, 10, values);
  EXPECT_EQ(values, (std::vector<int64_t>{6, 2, 7}));
}

TEST(NumpyPcg64Test, Uint32DrawsAreTheHalvesOfOneUint64LowFirst) {
  NumpyPcg64 wide(77);
  NumpyPcg64 narrow(77);
  for (int i = 0; i < 5; ++i) {
    const uint64_t word = wide.NextUint64();
    EXPECT_EQ(narrow.NextUint32(), static_cast<uint32_t>(word));
    EXPECT_EQ(narrow.NextUint32(), static_cast<uint32_t>(word >> 32));
  }
}

// The seed is hashed as 32-bit words: entropy 2^32 + 5 is the word list [5, 1].
TEST(NumpySeedSequenceTest, Uint64EntropyIsItsWordsLowFirst) {
  const std::vector<uint32_t> words = {5, 1};
  EXPECT_EQ(NumpySeedSequence((uint64_t{1} << 32) + 5).pool(), NumpySeedSequence(words).pool());
  // numpy turns 0 into the word list [0]; with a pool of 4 that equals no words at all.
  EXPECT_EQ(NumpySeedSequence(0).pool(), NumpySeedSequence(std::span<const uint32_t>()).pool());
  EXPECT_NE(NumpySeedSequence(1).pool(), NumpySeedSequence(0).pool());
}

TEST(NumpySeedSequenceTest, Uint64StateJoinsPairsOfWordsLowFirst) {
  const NumpySeedSequence seq(10007);
  const std::vector<uint32_t> words = seq.GenerateState32(8);
  const std::vector<uint64_t> wide = seq.GenerateState64(4);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wide[i], uint64_t{words[2 * i]} | (uint64_t{words[2 * i + 1]} << 32));
  }
  // A longer state starts with the shorter one.
  const std::vector<uint32_t> longer = seq.GenerateState32(12);
  EXPECT_TRUE(std::equal(words.begin(), words.end(), longer.begin()));
}

TEST(NumpyIntegersTest, OneValueRangeDrawsNothing) {
  NumpyPcg64 generator(3);
  std::vector<int64_t> values(4);
  NumpyIntegers(generator, 41, 42, values);
  EXPECT_EQ(values, (std::vector<int64_t>(4, 41)));
  NumpyPcg64 fresh(3);
  EXPECT_EQ(generator.NextUint64(), fresh.NextUint64());
}

// Lemire's method from its definition, over the raw 64-bit stream of a twin generator: a draw x
// maps to floor(x · n / 2^64) unless (x · n) mod 2^64 < 2^64 mod n, in which case it is skipped.
// With n = 2^63 + 1 about half of the draws are rejected.
TEST(NumpyIntegersTest, WideRangeFollowsLemireRejectionDefinition) {
  const uint64_t n = (uint64_t{1} << 63) + 1;
  const int64_t low = std::numeric_limits<int64_t>::min() / 2;
  const int64_t high = static_cast<int64_t>(static_cast<uint64_t>(low) + n);
  NumpyPcg64 generator(2024);
  NumpyPcg64 raw(2024);
  std::vector<int64_t> values(200);
  NumpyIntegers(generator, low, high, values);
  const uint64_t limit = static_cast<uint64_t>((Uint128{1} << 64) % n);
  int rejected = 0;
  for (const int64_t value : values) {
    Uint128 product;
    while (true) {
      product = Uint128{raw.NextUint64()} * n;
      if (static_cast<uint64_t>(product) >= limit) break;
      ++rejected;
    }
    const int64_t want = low + static_cast<int64_t>(product >> 64);
    ASSERT_EQ(value, want);
    EXPECT_GE(value, low);
    EXPECT_LT(value, high);
  }
  EXPECT_GT(rejected, 50);  // the rejection path ran
  EXPECT_EQ(generator.NextUint64(), raw.NextUint64());
}

// A range of exactly 2^32 values takes numpy's raw 32-bit draws, no rejection.
TEST(NumpyIntegersTest, FullUint32RangeUsesRaw32BitDraws) {
  NumpyPcg64 generator(9);
  NumpyPcg64 raw(9);
  std::vector<int64_t> values(3);
  NumpyIntegers(generator, 0, int64_t{1} << 32, values);
  for (const int64_t value : values) EXPECT_EQ(value, int64_t{raw.NextUint32()});
}

}  // namespace
}  // namespace dsv41

#include "kernels/exact_sum.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
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

// Runs fn once per Highway target compiled in and supported here, then restores dispatch.
template <class Fn>
void ForEachTarget(const Fn& fn) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    fn();
  }
  hwy::SetSupportedTargetsForTest(0);
}

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }

// Values of one magnitude family: uniform mantissas over `octaves` binades from 2^lo_exp, random
// signs; bf16-rounded when asked (the model's activations).
std::vector<float> Draw(size_t n, std::mt19937& rng, int lo_exp, int octaves, bool bf16) {
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(lo_exp, lo_exp + octaves - 1), sign(0, 1);
  std::vector<float> v(n);
  for (float& x : v) {
    x = std::ldexp(mant(rng), exp(rng)) * (sign(rng) ? -1.0f : 1.0f);
    if (bf16) x = Bf16Round(x);
  }
  return v;
}

// Every length 0..70 (beyond two 16-lane double vector pairs) at misalignments 0..3, several
// magnitude families: the SIMD forms return the scalar twins' bits.
TEST(ExactSumSimdTest, EqualsScalarTwinsOverLengthsAndMisalignments) {
  std::mt19937 rng(1);
  for (int family = 0; family < 4; ++family) {
    const int lo = family == 0 ? -2 : family == 1 ? -20 : family == 2 ? -60 : 10;
    const int octaves = family == 1 ? 30 : 6;
    for (size_t n = 0; n <= 70; ++n) {
      for (size_t mis = 0; mis < 4; ++mis) {
        std::vector<float> a = Draw(n + mis, rng, lo, octaves, family == 0);
        std::vector<float> b = Draw(n + mis, rng, -3, 8, false);
        const std::span<const float> sa = std::span<const float>(a).subspan(mis, n);
        const std::span<const float> sb = std::span<const float>(b).subspan(mis, n);
        SCOPED_TRACE("family " + std::to_string(family) + " n " + std::to_string(n) + " mis " +
                     std::to_string(mis));
        const float dot = ExactDot(sa, sb), sum = ExactSum(sa);
        ForEachTarget([&] {
          ASSERT_EQ(Bits(ExactDotSimd(sa, sb)), Bits(dot));
          ASSERT_EQ(Bits(ExactSumSimd(sa)), Bits(sum));
          if (n > 0) {
            ASSERT_EQ(Bits(ExactMeanSquareSimd(sa)), Bits(ExactMeanSquare(sa)));
          }
        });
      }
    }
  }
}

// Long vectors (the attention and mHC lengths) and vectors built to cancel almost exactly, whose
// double sums cannot decide the rounding: the slow path must give the exact result.
TEST(ExactSumSimdTest, EqualsScalarTwinsOnLongAndCancellingSums) {
  std::mt19937 rng(2);
  for (size_t n : {512u, 4096u, 20480u}) {
    std::vector<float> a = Draw(n, rng, -8, 12, true);
    std::vector<float> b = Draw(n, rng, -12, 24, false);
    ForEachTarget([&] {
      ASSERT_EQ(Bits(ExactDotSimd(a, b)), Bits(ExactDot(a, b))) << n;
      ASSERT_EQ(Bits(ExactMeanSquareSimd(b)), Bits(ExactMeanSquare(b))) << n;
    });
    // Cancelling: the second half negates the first, plus one tiny term: E = the tiny term.
    std::vector<float> c(a.begin(), a.end());
    for (size_t i = n / 2; i < n; ++i) c[i] = -c[i - n / 2];
    std::vector<float> d(b.begin(), b.end());
    for (size_t i = n / 2; i < n; ++i) d[i] = d[i - n / 2];
    c[0] = 0x1p-40f;
    d[0] = 0x1p-40f;
    c[n / 2] = 0.0f;
    ForEachTarget([&] {
      ASSERT_EQ(Bits(ExactDotSimd(c, d)), Bits(ExactDot(c, d))) << n;
      ASSERT_EQ(Bits(ExactSumSimd(c)), Bits(ExactSum(c))) << n;
    });
  }
}

// The fp32 operand as bytes at every byte offset (a mapped tensor), over lengths, cancelling and
// special cases: ExactDot's bits, on every target.
TEST(ExactSumSimdTest, UnalignedBytesGiveExactDot) {
  std::mt19937 rng(3);
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {0u, 1u, 7u, 33u, 100u, 4096u}) {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<float> a = Draw(n, rng, -30, 50, false);
      std::vector<float> b = Draw(n, rng, -8, 12, true);
      if (kind == 1 && n > 1) {  // exact cancellation but for one tiny product
        for (size_t i = n / 2; i < n; ++i) a[i] = -a[i - n / 2], b[i] = b[i - n / 2];
        a[0] = 0x1p-60f;
      }
      if (kind == 2 && n > 0) a[n / 2] = inf;
      const float want = ExactDot(a, b);
      for (size_t offset = 0; offset < 4; ++offset) {
        std::vector<std::byte> bytes(offset + n * sizeof(float) + 1);
        if (n > 0) std::memcpy(bytes.data() + offset, a.data(), n * sizeof(float));
        const std::span<const std::byte> view(bytes.data() + offset, n * sizeof(float));
        SCOPED_TRACE("n " + std::to_string(n) + " kind " + std::to_string(kind) + " offset " +
                     std::to_string(offset));
        ForEachTarget([&] {
          const float got = ExactDotUnalignedSimd(view, b);
          ASSERT_TRUE(Bits(got) == Bits(want) || (std::isnan(got) && std::isnan(want)));
        });
      }
    }
  }
}

// Several rows against one vector (the mHC mix weights against a token's streams), the rows as
// bytes at every byte offset: each result is its row's ExactDot, whatever the number of rows;
// rows that cancel or hold an infinity take the later tiers beside rows the first one decides.
TEST(ExactSumSimdTest, DotsOfUnalignedRowsGiveEachRowsExactDot) {
  std::mt19937 rng(8);
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {0u, 1u, 7u, 33u, 100u, 1024u}) {
    for (size_t num_rows : {0u, 1u, 2u, 3u, 4u, 5u, 7u, 9u, 24u, 37u}) {
      std::vector<float> b = Draw(n, rng, -8, 12, true);
      for (size_t i = n / 2; i < 2 * (n / 2); ++i) b[i] = b[i - n / 2];  // halves equal
      std::vector<float> a(num_rows * n);
      for (size_t r = 0; r < num_rows; ++r) {
        const std::vector<float> row = Draw(n, rng, -30, 50, false);
        std::copy(row.begin(), row.end(), a.begin() + r * n);
        if (r % 3 == 1 && n > 1) {  // exact cancellation but for one tiny product
          for (size_t i = n / 2; i < 2 * (n / 2); ++i) a[r * n + i] = -a[r * n + i - n / 2];
          a[r * n] = 0x1p-60f;
        }
        if (r % 5 == 4 && n > 0) a[r * n + n / 2] = inf;
      }
      std::vector<float> want(num_rows);
      for (size_t r = 0; r < num_rows; ++r) {
        want[r] = ExactDot(std::span<const float>(a).subspan(r * n, n), b);
      }
      for (size_t offset = 0; offset < 4; ++offset) {
        std::vector<std::byte> bytes(offset + a.size() * sizeof(float) + 1);
        if (!a.empty()) std::memcpy(bytes.data() + offset, a.data(), a.size() * sizeof(float));
        const std::span<const std::byte> view(bytes.data() + offset, a.size() * sizeof(float));
        SCOPED_TRACE("n " + std::to_string(n) + " rows " + std::to_string(num_rows) + " offset " +
                     std::to_string(offset));
        ForEachTarget([&] {
          std::vector<float> got(num_rows, -7.0f);
          ExactDotsUnalignedSimd(view, b, got);
          for (size_t r = 0; r < num_rows; ++r) {
            ASSERT_TRUE(Bits(got[r]) == Bits(want[r]) ||
                        (std::isnan(got[r]) && std::isnan(want[r])))
                << "row " << r;
          }
        });
      }
    }
  }
}

// Several rows against several tokens (the mHC mix weights against a prefill's streams), the rows
// as bytes at every byte offset, results in rows of a longer stride: each is its pair's ExactDot,
// whatever the numbers of rows and tokens; the stride's gaps stay as they were.
TEST(ExactSumSimdTest, DotsOfTokensWithUnalignedRowsGiveEachPairsExactDot) {
  std::mt19937 rng(9);
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {0u, 1u, 9u, 100u, 1024u}) {
    for (size_t num_tokens : {1u, 2u, 3u, 5u}) {
      for (size_t num_rows : {1u, 3u, 4u, 7u, 24u, 37u}) {
        std::vector<float> tokens(num_tokens * n);
        for (size_t t = 0; t < num_tokens; ++t) {
          // Token 0 far smaller than the others: a dot's error bound must use its own token.
          const std::vector<float> token =
              t == 0 && num_tokens > 1 ? Draw(n, rng, -70, 10, true) : Draw(n, rng, -30, 50, true);
          std::copy(token.begin(), token.end(), tokens.begin() + t * n);
        }
        std::vector<float> a(num_rows * n);
        for (size_t r = 0; r < num_rows; ++r) {
          const std::vector<float> row = Draw(n, rng, -30, 50, false);
          std::copy(row.begin(), row.end(), a.begin() + r * n);
          if (r % 3 == 1 && n > 1 && num_tokens > 1) {  // cancels against token 1 but for one term
            for (size_t i = 0; i + 1 < n; i += 2) {
              a[r * n + i] = tokens[n + i + 1];
              a[r * n + i + 1] = -tokens[n + i];
            }
            a[r * n + n - 1] = 0x1p-60f;
          }
          if (r % 5 == 4 && n > 0) a[r * n + n / 2] = inf;
        }
        const size_t stride = num_rows + 3;
        const float untouched = -7.0f;
        std::vector<float> want(num_tokens * stride, untouched);
        for (size_t t = 0; t < num_tokens; ++t) {
          for (size_t r = 0; r < num_rows; ++r) {
            want[t * stride + r] = ExactDot(std::span<const float>(a).subspan(r * n, n),
                                            std::span<const float>(tokens).subspan(t * n, n));
          }
        }
        for (size_t offset : {0u, 3u}) {
          std::vector<std::byte> bytes(offset + a.size() * sizeof(float) + 1);
          if (!a.empty()) std::memcpy(bytes.data() + offset, a.data(), a.size() * sizeof(float));
          const std::span<const std::byte> view(bytes.data() + offset, a.size() * sizeof(float));
          SCOPED_TRACE("n " + std::to_string(n) + " tokens " + std::to_string(num_tokens) +
                       " rows " + std::to_string(num_rows) + " offset " + std::to_string(offset));
          ForEachTarget([&] {
            std::vector<float> got(num_tokens * stride, untouched);
            ExactDotsOfTokensUnalignedSimd(view, num_rows, tokens, num_tokens, got, stride);
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_TRUE(Bits(got[i]) == Bits(want[i]) ||
                          (std::isnan(got[i]) && std::isnan(want[i])))
                  << "token " << i / stride << " row " << i % stride;
            }
          });
        }
      }
    }
  }
}

// Signed zeros, infinities, NaN and subnormal products follow the scalar twins.
TEST(ExactSumSimdTest, SpecialValuesFollowTheScalarTwins) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> cases = {
      {-0.0f, -0.0f, -0.0f}, {0.0f, -0.0f}, {1.0f, -1.0f},          {inf, 1.0f},
      {inf, -inf},           {nan, 1.0f},   {0x1p-149f, 0x1p-149f}, {3.0f, 0x1p-140f, -3.0f},
      {1e30f, 1e30f, -1e30f}};
  for (const std::vector<float>& x : cases) {
    const std::vector<float> ones(x.size(), 1.0f);
    ForEachTarget([&] {
      const float dot = ExactDot(x, ones), simd = ExactDotSimd(x, ones);
      ASSERT_TRUE(Bits(dot) == Bits(simd) || (std::isnan(dot) && std::isnan(simd)));
      const float sum = ExactSum(x), ssum = ExactSumSimd(x);
      ASSERT_TRUE(Bits(sum) == Bits(ssum) || (std::isnan(sum) && std::isnan(ssum)));
    });
  }
}

// The value product over key rows, every column, against ExactDotColumn; includes columns that
// cancel exactly (the slow path per lane).
TEST(ExactSumSimdTest, ColumnsEqualExactDotColumn) {
  std::mt19937 rng(3);
  for (size_t n : {1u, 7u, 64u, 130u}) {
    for (size_t dim : {1u, 9u, 16u, 64u, 131u, 200u}) {
      std::vector<float> w = Draw(n, rng, -9, 9, true);
      std::vector<std::vector<float>> storage(n);
      std::vector<const float*> rows(n);
      for (size_t i = 0; i < n; ++i) {
        storage[i] = Draw(dim, rng, -6, 10, true);
        // Column 3 cancels: rows 3k and 3k + 2 hold ±2^40-scale values around an ordinary row
        // 3k + 1, whose low bits a double sum loses.
        if (dim > 3 && i % 3 == 0) storage[i][3] *= 0x1p40f;
        if (dim > 3 && i % 3 == 2) storage[i][3] = -storage[i - 2][3];
        rows[i] = storage[i].data();
      }
      if (n % 3 == 1 && dim > 3) storage[n - 1][3] = 0x1p-30f;
      for (size_t i = 2; i < n; i += 3) w[i] = w[i - 2];
      SCOPED_TRACE("n " + std::to_string(n) + " dim " + std::to_string(dim));
      ForEachTarget([&] {
        std::vector<float> out(dim, -7.0f);
        ExactDotColumnsSimd(w, rows, out);
        for (size_t d = 0; d < dim; ++d) {
          ASSERT_EQ(Bits(out[d]), Bits(ExactDotColumn(w, rows, d))) << "column " << d;
        }
      });
    }
  }
}

// The fast numerics' fp32 sums: every length 0..70 at misalignments 0..3 (the 16 chains, their
// tails and the tree), and columns over odd widths: the SIMD forms return the scalar twins' bits
// on every target.
TEST(Fp32SumSimdTest, EqualsScalarTwinsOverLengthsAndMisalignments) {
  std::mt19937 rng(5);
  for (size_t n = 0; n <= 70; ++n) {
    for (size_t mis = 0; mis < 4; ++mis) {
      std::vector<float> a = Draw(n + mis, rng, -20, 30, true);
      std::vector<float> b = Draw(n + mis, rng, -3, 8, false);
      const std::span<const float> sa = std::span<const float>(a).subspan(mis, n);
      const std::span<const float> sb = std::span<const float>(b).subspan(mis, n);
      SCOPED_TRACE("n " + std::to_string(n) + " mis " + std::to_string(mis));
      const float dot = Fp32Dot(sa, sb);
      ForEachTarget([&] { ASSERT_EQ(Bits(Fp32DotSimd(sa, sb)), Bits(dot)); });
    }
  }
  std::mt19937 rows_rng(6);
  for (size_t n : {1u, 7u, 64u, 130u}) {
    for (size_t dim : {1u, 9u, 16u, 64u, 131u, 200u}) {
      std::vector<float> w = Draw(n, rows_rng, -9, 9, true);
      std::vector<std::vector<float>> storage(n);
      std::vector<const float*> rows(n);
      for (size_t i = 0; i < n; ++i) {
        storage[i] = Draw(dim + 1, rows_rng, -6, 10, true);
        rows[i] = storage[i].data() + (i % 2);  // misaligned rows too
      }
      SCOPED_TRACE("n " + std::to_string(n) + " dim " + std::to_string(dim));
      ForEachTarget([&] {
        std::vector<float> out(dim, -7.0f);
        Fp32DotColumnsSimd(w, rows, out);
        for (size_t d = 0; d < dim; ++d) {
          ASSERT_EQ(Bits(out[d]), Bits(Fp32DotColumn(w, rows, d))) << "column " << d;
        }
      });
    }
  }
}

// Many rows against one vector (attention's q against a block of keys): each result is the one
// row's Fp32Dot, whatever the number of rows (whole groups of four and the rest), the length
// and the rows' misalignment.
TEST(Fp32SumSimdTest, DotsOfManyRowsEqualTheScalarTwinRowByRow) {
  std::mt19937 rng(7);
  for (size_t n : {0u, 5u, 16u, 37u, 70u, 515u}) {
    for (size_t num_rows = 0; num_rows <= 9; ++num_rows) {
      std::vector<float> a = Draw(n, rng, -9, 12, true);
      std::vector<std::vector<float>> storage(num_rows);
      std::vector<const float*> rows(num_rows);
      for (size_t k = 0; k < num_rows; ++k) {
        storage[k] = Draw(n + 3, rng, -6, 10, true);
        rows[k] = storage[k].data() + (k % 4);
      }
      SCOPED_TRACE("n " + std::to_string(n) + " rows " + std::to_string(num_rows));
      ForEachTarget([&] {
        std::vector<float> out(num_rows, -7.0f);
        Fp32DotsSimd(a, rows, out);
        for (size_t k = 0; k < num_rows; ++k) {
          ASSERT_EQ(Bits(out[k]), Bits(Fp32Dot(a, std::span<const float>(rows[k], n)))) << k;
        }
      });
    }
  }
}

// The twins follow their stated order: 16 chains of fused multiply-adds and the fixed tree.
// Values that cancel across chains show the order (an index-order sum gives another result).
TEST(Fp32SumSimdTest, ScalarTwinsFollowTheirOrder) {
  std::vector<float> a(20, 0.0f), b(20, 1.0f);
  a[0] = 0x1p30f;   // chain 0
  a[16] = 1.0f;     // chain 0, lost against 2^30 in fp32
  a[8] = -0x1p30f;  // chain 8, cancels chain 0 in the tree's first step
  a[1] = 3.0f;      // chain 1
  // Chain 0 = fp32(2^30 + 1) = 2^30; + chain 8 = 0; the tree then adds chain 1: 3.
  EXPECT_EQ(Fp32Dot(a, b), 3.0f);
  float index_order = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) index_order = std::fma(a[i], b[i], index_order);
  EXPECT_NE(index_order, 3.0f);
  const std::vector<const float*> rows = {b.data(), b.data(), b.data()};
  const std::vector<float> w = {0x1p30f, 1.0f, -0x1p30f};
  EXPECT_EQ(Fp32DotColumn(w, rows, 0), 0.0f);  // in row order: (2^30 + 1) rounds to 2^30
}

}  // namespace
}  // namespace dsv41

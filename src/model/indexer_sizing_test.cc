// The indexer's score-matrix sizing at the released 1M context (real-weight-traps.md K3): pure
// arithmetic, nothing allocated.
#include "model/indexer_sizing.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <type_traits>

namespace dsv41 {
namespace {

// The release: max_position_embeddings 1,048,576; the index sources have compress ratios 1 and 2.
constexpr int64_t kReleasedContext = 1'048'576;

static_assert(std::is_same_v<decltype(IndexerScoreElements(0, 0, 1)), size_t>);
static_assert(sizeof(size_t) >= 8, "the 1M-context score matrix needs 64-bit sizes");

TEST(IndexerSizingTest, LastChunkAt1MContextIsSizedWithoutOverflow) {
  // The last 4096-token prefill chunk of a 1M-token prompt.
  const int64_t chunk = 4096;
  const int64_t start = kReleasedContext - chunk;
  EXPECT_EQ(IndexerVisibleEntries(start, chunk, 1), kReleasedContext);
  // Ratio 1: 2^12 × 2^20 = 2^32 elements (uint32 wraps to 0), 2^34 bytes = 16 GiB.
  EXPECT_EQ(IndexerScoreElements(start, chunk, 1), size_t{1} << 32);
  EXPECT_EQ(IndexerScoreBytes(start, chunk, 1), size_t{17'179'869'184});
  // Ratio 2: 2^31 elements (int32 overflows), 8 GiB.
  EXPECT_EQ(IndexerScoreElements(start, chunk, 2), size_t{2'147'483'648});
  EXPECT_EQ(IndexerScoreBytes(start, chunk, 2), size_t{8'589'934'592});
}

TEST(IndexerSizingTest, DefaultChunkAndDecodeAt1MContext) {
  // The engine's default chunk (max_num_batched_tokens 2048): 2^31 elements at ratio 1.
  EXPECT_EQ(IndexerScoreElements(kReleasedContext - 2048, 2048, 1), size_t{2'147'483'648});
  EXPECT_EQ(IndexerScoreBytes(kReleasedContext - 2048, 2048, 1), size_t{8'589'934'592});
  // Decode of the last position: one row of 1M entries.
  EXPECT_EQ(IndexerScoreElements(kReleasedContext - 1, 1, 1), size_t{1'048'576});
  // A chunk that is not a multiple of the ratio: floor((start + tokens) / ratio) columns.
  EXPECT_EQ(IndexerVisibleEntries(1'000'001, 4095, 2), 502'048);
  EXPECT_EQ(IndexerScoreElements(1'000'001, 4095, 2), size_t{4095} * 502'048);
}

// Within the default 64 MiB budget the indexer scores the last 2048-token chunk of a 1M-token
// prompt in passes of 16 tokens (16 × 2^20 × 4 B = 64 MiB), a 2048-token chunk at 32K context in
// passes of 512, and whatever fits in one pass whole.
TEST(IndexerSizingTest, PassesKeepTheScoreMatrixWithinTheBudget) {
  const size_t budget = size_t{64} << 20;
  EXPECT_EQ(IndexerTokensPerPass(kReleasedContext - 2048, 2048, 1, budget), 16);
  EXPECT_EQ(IndexerTokensPerPass(kReleasedContext - 2048, 2048, 2, budget), 32);
  EXPECT_EQ(IndexerTokensPerPass(32768 - 2048, 2048, 1, budget), 512);
  EXPECT_EQ(IndexerTokensPerPass(4096 - 2048, 2048, 1, budget), 2048);  // 32 MiB: one pass
  EXPECT_EQ(IndexerTokensPerPass(kReleasedContext - 1, 1, 1, budget), 1);
  for (const int32_t ratio : {1, 2}) {
    const int64_t per_pass = IndexerTokensPerPass(kReleasedContext - 2048, 2048, ratio, budget);
    EXPECT_LE(IndexerScoreBytes(kReleasedContext - 2048, per_pass, ratio), budget);
  }
  // Never fewer than 16 tokens (one decoded key tile's worth), even past the budget.
  EXPECT_EQ(IndexerTokensPerPass(kReleasedContext - 2048, 2048, 1, 1), 16);
  EXPECT_EQ(IndexerTokensPerPass(0, 7, 1, 1), 7);
}

}  // namespace
}  // namespace dsv41

#include "kv/token_history.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/npy.h"

namespace dsv41 {
namespace {

std::vector<int32_t> ToVector(std::span<const int32_t> s) { return {s.begin(), s.end()}; }
std::vector<uint8_t> ToVector(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

TEST(TokenHistoryTest, ChunkedAppendsEqualOneAppend) {
  const std::vector<int32_t> tokens = {5, 9, 2, 7, 7, 11, 3};
  const std::vector<int32_t> classes = {50, 90, 20, 70, 70, 110, 30};
  TokenHistory whole;
  ASSERT_TRUE(whole.Append(tokens, classes).ok());
  TokenHistory chunked;
  const std::span<const int32_t> t(tokens);
  const std::span<const int32_t> c(classes);
  ASSERT_TRUE(chunked.Append(t.subspan(0, 3), c.subspan(0, 3)).ok());
  ASSERT_TRUE(chunked.Append(t.subspan(3, 1), c.subspan(3, 1)).ok());  // a decode step
  ASSERT_TRUE(chunked.Append(t.subspan(4), c.subspan(4)).ok());
  EXPECT_EQ(chunked.size(), 7);
  EXPECT_EQ(ToVector(chunked.token_ids()), tokens);
  EXPECT_EQ(ToVector(chunked.class_ids()), classes);
  EXPECT_EQ(ToVector(whole.class_ids()), classes);
  EXPECT_TRUE(chunked.dead().empty());
}

TEST(TokenHistoryTest, RollbackThenNewTokensEqualsAFreshHistory) {
  TokenHistory history;
  ASSERT_TRUE(
      history.Append(std::vector<int32_t>{1, 2, 3, 4}, std::vector<int32_t>{10, 20, 30, 40}).ok());
  // Speculative tokens 5, 6 are rejected; 8 is accepted instead.
  ASSERT_TRUE(history.Append(std::vector<int32_t>{5, 6}, std::vector<int32_t>{50, 60}).ok());
  ASSERT_TRUE(history.Truncate(4).ok());
  ASSERT_TRUE(history.Append(std::vector<int32_t>{8}, std::vector<int32_t>{80}).ok());
  EXPECT_EQ(ToVector(history.token_ids()), (std::vector<int32_t>{1, 2, 3, 4, 8}));
  EXPECT_EQ(ToVector(history.class_ids()), (std::vector<int32_t>{10, 20, 30, 40, 80}));
  ASSERT_TRUE(history.Truncate(0).ok());
  EXPECT_TRUE(history.empty());
}

TEST(TokenHistoryTest, DeadFlagsByPositionAndEmptyWhenNoneIsDead) {
  TokenHistory history;
  ASSERT_TRUE(history.Append(std::vector<int32_t>{1, 2}, std::vector<int32_t>{10, 20}).ok());
  EXPECT_TRUE(history.dead().empty());
  ASSERT_TRUE(history
                  .Append(std::vector<int32_t>{3, 4, 5}, std::vector<int32_t>{30, 30, 50},
                          std::vector<uint8_t>{1, 7, 0})
                  .ok());
  EXPECT_EQ(ToVector(history.dead()), (std::vector<uint8_t>{0, 0, 1, 1, 0}));
  ASSERT_TRUE(history.Truncate(3).ok());
  EXPECT_EQ(ToVector(history.dead()), (std::vector<uint8_t>{0, 0, 1}));
  ASSERT_TRUE(history.Truncate(2).ok());  // the dead token is rolled back
  EXPECT_TRUE(history.dead().empty());
  history.Clear();
  EXPECT_EQ(history.size(), 0);
}

TEST(TokenHistoryTest, BadInputIsRejectedAndLeavesTheHistoryUnchanged) {
  TokenHistory history;
  ASSERT_TRUE(history.Append(std::vector<int32_t>{1}, std::vector<int32_t>{10}).ok());
  EXPECT_EQ(history.Append(std::vector<int32_t>{1, 2}, std::vector<int32_t>{10}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      history.Append(std::vector<int32_t>{1}, std::vector<int32_t>{10}, std::vector<uint8_t>{0, 1})
          .code(),
      StatusCode::kInvalidArgument);
  const Status negative = history.Append(std::vector<int32_t>{4, 5}, std::vector<int32_t>{3, -1});
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.ToString().find("position 2"), std::string::npos) << negative.ToString();
  EXPECT_EQ(history.Truncate(2).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(history.Truncate(-1).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(ToVector(history.class_ids()), (std::vector<int32_t>{10}));
}

// The goldens' processed sequence (prompt, then 15 fed-back greedy tokens) as a serving loop
// builds it: prefill in two chunks, then decode steps with a rejected draft rolled back each
// step. The history ends as the golden's compressed ids by position.
TEST(TokenHistoryTest, GoldenSequenceSurvivesChunkingAndRollback) {
  const std::string dir = std::string(DSV41_SHARED_DIR) + "/goldens/model/cases/tiny-a/mix40/";
  Result<NpyArray> ids_npy = ReadNpy(dir + "input_ids.npy");
  Result<NpyArray> greedy_npy = ReadNpy(dir + "greedy_ids.npy");
  Result<NpyArray> classes_npy = ReadNpy(dir + "engram_compressed_ids.npy");
  ASSERT_TRUE(ids_npy.ok() && greedy_npy.ok() && classes_npy.ok());
  std::vector<int32_t> tokens;
  for (int64_t v : ids_npy->ToInt64()) tokens.push_back(static_cast<int32_t>(v));
  const int64_t prompt = static_cast<int64_t>(tokens.size());
  for (int64_t v : greedy_npy->ToInt64()) tokens.push_back(static_cast<int32_t>(v));
  std::vector<int32_t> classes;
  for (int64_t v : classes_npy->ToInt64()) classes.push_back(static_cast<int32_t>(v));
  ASSERT_EQ(classes.size() + 1, tokens.size());  // the last greedy token is never fed back
  tokens.pop_back();

  const std::span<const int32_t> t(tokens);
  const std::span<const int32_t> c(classes);
  TokenHistory history;
  const size_t half = static_cast<size_t>(prompt / 2);
  ASSERT_TRUE(history.Append(t.subspan(0, half), c.subspan(0, half)).ok());
  ASSERT_TRUE(history.Append(t.subspan(half, prompt - half), c.subspan(half, prompt - half)).ok());
  for (size_t p = static_cast<size_t>(prompt); p < tokens.size(); ++p) {
    // A wrong two-token draft, verified and rolled back, then the accepted token.
    ASSERT_TRUE(history.Append(std::vector<int32_t>{0, 1}, std::vector<int32_t>{0, 1}).ok());
    ASSERT_TRUE(history.Truncate(static_cast<int64_t>(p)).ok());
    ASSERT_TRUE(history.Append(t.subspan(p, 1), c.subspan(p, 1)).ok());
  }
  EXPECT_EQ(ToVector(history.token_ids()), tokens);
  EXPECT_EQ(ToVector(history.class_ids()), classes);
  EXPECT_TRUE(history.dead().empty());
}

}  // namespace
}  // namespace dsv41

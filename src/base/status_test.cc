#include "base/status.h"

#include <gtest/gtest.h>

#include "base/check.h"

namespace dsv41 {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return InvalidArgumentError("value %d is not positive", v);
  return v;
}

Status UseAssign(int v, int* out) {
  DSV41_ASSIGN_OR_RETURN(int got, ParsePositive(v));
  *out = got;
  return OkStatus();
}

TEST(StatusTest, ErrorCarriesCodeAndFormattedMessage) {
  const Status s = NotFoundError("tensor '%s' in %s", "embed.weight", "a.safetensors");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "tensor 'embed.weight' in a.safetensors");
  EXPECT_EQ(s.ToString(), "NotFound: tensor 'embed.weight' in a.safetensors");
  EXPECT_EQ(s.WithPrefix("loader").message(), "loader: tensor 'embed.weight' in a.safetensors");
}

TEST(StatusTest, AssignOrReturnPropagatesError) {
  int out = -1;
  EXPECT_TRUE(UseAssign(3, &out).ok());
  EXPECT_EQ(out, 3);
  const Status s = UseAssign(-2, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "value -2 is not positive");
  EXPECT_EQ(out, 3);
}

TEST(StatusTest, ResultFromOkStatusBecomesInternalError) {
  Result<int> r{OkStatus()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, StrFormatHandlesLongStrings) {
  const std::string long_text(5000, 'x');
  EXPECT_EQ(StrFormat("%s!", long_text.c_str()).size(), 5001u);
}

TEST(CheckDeathTest, CheckWithAndWithoutMessageAborts) {
  EXPECT_DEATH(DSV41_CHECK(1 + 1 == 3), "check failed: 1 \\+ 1 == 3");
  EXPECT_DEATH(DSV41_CHECK(false, "block %u of %u", 7u, 4u), "block 7 of 4");
}

TEST(StatusTest, CancelledHasItsOwnCode) {
  EXPECT_EQ(CancelledError("writing shards").ToString(), "Cancelled: writing shards");
}

}  // namespace
}  // namespace dsv41

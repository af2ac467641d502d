#include "base/json.h"

#include <gtest/gtest.h>

namespace dsv41 {
namespace {

TEST(JsonTest, ParsesValidText) {
  Result<Json> j = ParseJson(R"({"a": [1, 2]})", "inline");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["a"][1].get<int>(), 2);
}

TEST(JsonTest, SyntaxErrorNamesSourceWithoutThrowing) {
  Result<Json> j = ParseJson(R"({"a": [1, 2)", "config.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(j.status().message().rfind("config.json: invalid JSON", 0), 0u) << j.status().message();
}

TEST(JsonTest, OrderedJsonKeepsKeyOrder) {
  Result<OrderedJson> j = ParseOrderedJson(R"({"z": 1, "a": 2})", "inline");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->begin().key(), "z");
}

TEST(JsonTest, RejectingDuplicateKeysNamesTheRepeatedKey) {
  Result<Json> j = ParseJsonRejectingDuplicateKeys(R"({"a": {"b": 1, "c": 2, "b": 3}})", "h");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "h: duplicate key 'b'");
}

TEST(JsonTest, RejectingDuplicateKeysAcceptsSameKeyInSiblingObjects) {
  Result<Json> j = ParseJsonRejectingDuplicateKeys(R"({"a": {"x": 1}, "b": {"x": 2}})", "h");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["b"]["x"].get<int>(), 2);
}

}  // namespace
}  // namespace dsv41

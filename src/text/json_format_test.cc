#include "text/json_format.h"

#include <gtest/gtest.h>

#include <string>

namespace dsv41 {
namespace {

// Parses `text` and re-serialises it the Python way (§6.5).
std::string Roundtrip(const std::string& text) {
  Result<JsonValue> value = ParseJsonValue(text, "test");
  EXPECT_TRUE(value.ok()) << text << ": " << value.status().ToString();
  return value.ok() ? FormatJson(*value) : "";
}

TEST(JsonFormatTest, FloatsUseShortestReprLikePython) {
  // The spec's own list (§6.5).
  EXPECT_EQ(Roundtrip("1e3"), "1000.0");
  EXPECT_EQ(Roundtrip("2.50"), "2.5");
  EXPECT_EQ(Roundtrip("1E-7"), "1e-07");
  EXPECT_EQ(Roundtrip("1.5e-5"), "1.5e-05");
  EXPECT_EQ(Roundtrip("1e16"), "1e+16");
  EXPECT_EQ(Roundtrip("0E0"), "0.0");
  EXPECT_EQ(Roundtrip("-0.0"), "-0.0");
  EXPECT_EQ(Roundtrip("3.14159265358979323846"), "3.141592653589793");
}

TEST(JsonFormatTest, FloatNotationSwitchesAtExponentsMinus4And16) {
  EXPECT_EQ(Roundtrip("1e15"), "1000000000000000.0");
  EXPECT_EQ(Roundtrip("1.25e15"), "1250000000000000.0");
  EXPECT_EQ(Roundtrip("1.5e16"), "1.5e+16");
  EXPECT_EQ(Roundtrip("0.0001"), "0.0001");
  EXPECT_EQ(Roundtrip("0.00012"), "0.00012");
  EXPECT_EQ(Roundtrip("0.00001"), "1e-05");
  EXPECT_EQ(Roundtrip("123.456"), "123.456");
  EXPECT_EQ(Roundtrip("1e100"), "1e+100");
  EXPECT_EQ(Roundtrip("-2.5e-300"), "-2.5e-300");
  EXPECT_EQ(Roundtrip("0.1"), "0.1");
  // 0.1 + 0.2 in binary64 is 0.30000000000000004 (17 significant digits needed).
  EXPECT_EQ(FormatPythonFloat(0.1 + 0.2), "0.30000000000000004");
}

TEST(JsonFormatTest, FloatOverflowBecomesPythonInfinity) {
  EXPECT_EQ(Roundtrip("1e400"), "Infinity");
  EXPECT_EQ(Roundtrip("-1e400"), "-Infinity");
  EXPECT_EQ(Roundtrip("1e-400"), "0.0");
}

TEST(JsonFormatTest, IntegersAreWrittenBackExactlyWhateverTheirSize) {
  EXPECT_EQ(Roundtrip("12345678901234567890"), "12345678901234567890");
  EXPECT_EQ(Roundtrip("-9007199254740993"), "-9007199254740993");
  EXPECT_EQ(Roundtrip("123456789012345678901234567890123"), "123456789012345678901234567890123");
  EXPECT_EQ(Roundtrip("-0"), "0");
  EXPECT_EQ(Roundtrip("0"), "0");
}

TEST(JsonFormatTest, SeparatorsAndKeyOrderFollowTheClient) {
  EXPECT_EQ(Roundtrip(R"({"b":1,"a":[true,false,null],"c":{}})"),
            R"({"b": 1, "a": [true, false, null], "c": {}})");
  EXPECT_EQ(Roundtrip("[ ]"), "[]");
  EXPECT_EQ(Roundtrip(" \n\t{ \"x\" :\r\n [1 , 2] } "), R"({"x": [1, 2]})");
}

TEST(JsonFormatTest, DuplicateKeyKeepsFirstPositionAndLastValue) {
  EXPECT_EQ(Roundtrip(R"({"b":1,"a":2,"b":3})"), R"({"b": 3, "a": 2})");
  // Beyond the linear-search limit (hash-indexed path).
  std::string text = "{";
  std::string want = "{";
  for (int i = 0; i < 40; ++i) {
    text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
    want += (i > 0 ? ", " : "") + std::string("\"k") + std::to_string(i) +
            "\": " + (i == 3 ? "99" : std::to_string(i));
  }
  text += "\"k3\":99}";
  want += "}";
  EXPECT_EQ(Roundtrip(text), want);
}

TEST(JsonFormatTest, StringsEscapeLikeEnsureAsciiFalse) {
  // \u00e9 comes out raw, '/' and U+007F raw, control characters lowercase \u00xx.
  EXPECT_EQ(Roundtrip(R"("caf\u00e9 \/ a\"b\\c")"), R"("café / a\"b\\c")");
  EXPECT_EQ(Roundtrip(R"("\n\r\t\b\f\u0001\u001F\u007f")"),
            "\"\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\"");
  EXPECT_EQ(Roundtrip(R"("\u2028\u2029")"), "\"\u2028\u2029\"");
  EXPECT_EQ(Roundtrip(R"("\ud83d\ude00")"), "\"😀\"");
  EXPECT_EQ(Roundtrip("\"中文 😀\""), "\"中文 😀\"");
}

TEST(JsonFormatTest, RejectsInvalidJson) {
  for (const char* bad : {"",
                          " ",
                          "NaN",
                          "Infinity",
                          "-Infinity",
                          "[1,]",
                          "{\"a\":1,}",
                          "01",
                          "1.",
                          ".5",
                          "1e",
                          "+1",
                          "\"abc",
                          "\"a\tb\"",
                          "\"\\x\"",
                          "\"\\ud800\"",
                          "\"\\udc00\"",
                          "\"\\ud800\\u0041\"",
                          "\"\xff\"",
                          "\"\xc0\xaf\"",
                          "\"\xed\xa0\x80\"",
                          "[1] [2]",
                          "{1:2}",
                          "tru",
                          "nul",
                          "// c\n1"}) {
    EXPECT_FALSE(ParseJsonValue(bad, "test").ok()) << bad;
    EXPECT_FALSE(IsValidJson(bad)) << bad;
  }
}

TEST(JsonFormatTest, ErrorNamesTheSourceAndOffset) {
  Result<JsonValue> value = ParseJsonValue("[1, x]", "messages[0].arguments");
  ASSERT_FALSE(value.ok());
  EXPECT_NE(value.status().message().find("messages[0].arguments"), std::string::npos);
  EXPECT_NE(value.status().message().find("byte 4"), std::string::npos);
}

TEST(JsonFormatTest, DeepNestingIsAnErrorNotACrash) {
  EXPECT_TRUE(IsValidJson(std::string(500, '[') + std::string(500, ']')));
  EXPECT_FALSE(IsValidJson(std::string(100000, '[') + std::string(100000, ']')));
}

TEST(JsonFormatTest, AcceptsSurroundingWhitespace) {
  EXPECT_TRUE(IsValidJson(" 1 "));
  EXPECT_TRUE(IsValidJson("\n{\"a\":1}\n"));
  EXPECT_TRUE(IsValidJson("1e400"));  // RFC 8259 grammar has no range limit
}

TEST(JsonFormatTest, BuiltValuesFormatLikeParsedOnes) {
  JsonValue v = JsonObject({{"id", JsonString("a\"b")}, {"n", JsonInt(-12)}});
  v.Set("ok", JsonBool(true)).Set("x", JsonFloat(0.5)).Set("n", JsonInt(7));
  JsonValue list;
  list.Push(JsonValue());
  list.Push(JsonArray());
  v.Set("list", std::move(list));
  EXPECT_EQ(FormatJson(v), R"({"id": "a\"b", "n": 7, "ok": true, "x": 0.5, "list": [null, []]})");
  EXPECT_EQ(FormatJson(JsonObject()), "{}");
}

}  // namespace
}  // namespace dsv41

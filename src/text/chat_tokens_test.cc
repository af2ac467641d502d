#include "text/chat_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "text/chat_encoding.h"
#include "text/json_format.h"
#include "text/tokenizer.h"

namespace dsv41 {
namespace {

constexpr int32_t kUserId = 1002;
constexpr int32_t kDsmlId = 1006;

// UTF-8 of one code point below U+0800 (enough for the byte table).
std::string Utf8(uint32_t cp) {
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

// A byte-level tokenizer.json: every byte one token (ids 0..255, GPT-2 byte table, §3.4), no
// merges, and the V4.1 special tokens the template writes as added tokens (ids 1000..).
std::string TinyV41TokenizerJson(bool with_think_close) {
  std::vector<uint32_t> image(256, 0);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    image[b] = printable ? b : next++;
  }
  std::string vocab;
  for (uint32_t b = 0; b < 256; ++b) {
    vocab += (b > 0 ? ", " : "") + FormatJsonString(Utf8(image[b])) + ": " + std::to_string(b);
  }
  const std::vector<std::string> specials = {"<｜begin▁of▁sentence｜>",
                                             "<｜end▁of▁sentence｜>",
                                             "<｜User｜>",
                                             "<｜Assistant｜>",
                                             "<think>",
                                             with_think_close ? "</think>" : "<unused>",
                                             "｜DSML｜",
                                             "<｜System｜>"};
  std::string added;
  for (size_t i = 0; i < specials.size(); ++i) {
    added += (i > 0 ? ", " : "") + std::string(R"({"id": )") + std::to_string(1000 + i) +
             R"(, "content": )" + FormatJsonString(specials[i]) +
             R"(, "special": true, "normalized": false})";
  }
  return R"({"added_tokens": [)" + added + R"(], "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {)" +
         vocab + R"(}, "merges": []}})";
}

const Tokenizer& TinyV41() {
  static const Tokenizer* const tokenizer = [] {
    Result<Tokenizer> loaded = Tokenizer::FromJson(TinyV41TokenizerJson(true), "tiny");
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded.ok() ? new Tokenizer(std::move(loaded).value()) : nullptr;
  }();
  return *tokenizer;
}

ChatPrompt RenderOrDie(const std::string& body) {
  Result<ChatPrompt> prompt = RenderChatCompletionsRequestText(body);
  EXPECT_TRUE(prompt.ok()) << prompt.status().ToString();
  return prompt.ok() ? *prompt : ChatPrompt();
}

// Thinking mode, tools block, a past DSML call and its result: every kind of special piece.
const char* const kToolRequest =
    R"({"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],)"
    R"("messages":[{"role":"user","content":"Hello,  world!\n\n你好"},)"
    R"({"role":"assistant","reasoning_content":"r","content":"","tool_calls":[{"id":"1",)"
    R"("type":"function","function":{"name":"f","arguments":{"k":"v","n":2}}}]},)"
    R"({"role":"tool","tool_call_id":"1","content":"ok"}]})";

TEST(ChatTokensTest, PiecewiseEqualsWholeStringWithoutLiteralsInUserText) {
  const ChatPrompt prompt = RenderOrDie(kToolRequest);
  Result<std::vector<int32_t>> piecewise = EncodeChatPrompt(TinyV41(), prompt);
  Result<std::vector<int32_t>> whole = EncodeChatPrompt(TinyV41(), prompt, {true});
  ASSERT_TRUE(piecewise.ok()) << piecewise.status().ToString();
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(*piecewise, *whole);
  EXPECT_EQ(TinyV41().Decode(*piecewise), prompt.text);
  // BOS, <｜System｜> first; the prompt ends <｜Assistant｜><think> (ids from the table above).
  ASSERT_GE(piecewise->size(), 4u);
  EXPECT_EQ((*piecewise)[0], 1000);
  EXPECT_EQ((*piecewise)[1], 1007);
  EXPECT_EQ((*piecewise)[piecewise->size() - 2], 1003);
  EXPECT_EQ(piecewise->back(), 1004);
  // ｜DSML｜ by hand: the §6.6 tools block has 9 (1 in its sentence, 8 in its example), the call
  // with two parameters 8 (calls, invoke, 2 x 2 parameter tags, /invoke, /calls).
  size_t num_dsml_in_text = 0;
  for (size_t pos = prompt.text.find("｜DSML｜"); pos != std::string::npos;
       pos = prompt.text.find("｜DSML｜", pos + 1)) {
    ++num_dsml_in_text;
  }
  EXPECT_EQ(num_dsml_in_text, 17u);
  EXPECT_EQ(static_cast<size_t>(std::count(piecewise->begin(), piecewise->end(), kDsmlId)), 17u);
}

TEST(ChatTokensTest, UserTypedLiteralStaysTextPiecewiseButNotWholeString) {
  const ChatPrompt prompt = RenderOrDie(
      R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"a <｜User｜> b"}]})");
  Result<std::vector<int32_t>> piecewise = EncodeChatPrompt(TinyV41(), prompt);
  Result<std::vector<int32_t>> whole = EncodeChatPrompt(TinyV41(), prompt, {true});
  ASSERT_TRUE(piecewise.ok() && whole.ok());
  EXPECT_EQ(std::count(piecewise->begin(), piecewise->end(), kUserId), 1);  // the template's
  EXPECT_EQ(std::count(whole->begin(), whole->end(), kUserId), 2);          // plus the injected
  EXPECT_EQ(TinyV41().Decode(*piecewise), prompt.text);
}

TEST(ChatTokensTest, MissingSpecialTokenIsAnErrorNamingIt) {
  Result<Tokenizer> tokenizer = Tokenizer::FromJson(TinyV41TokenizerJson(false), "no-think-close");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const ChatPrompt prompt =
      RenderOrDie(R"({"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]})");
  Result<std::vector<int32_t>> ids = EncodeChatPrompt(*tokenizer, prompt);
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("</think>"), std::string::npos) << ids.status().message();
}

}  // namespace
}  // namespace dsv41

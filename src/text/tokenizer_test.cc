#include "text/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/json.h"
#include "base/status.h"

namespace dsv41 {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kSharedDir = DSV41_SHARED_DIR;
const std::string kV3Tokenizer = kSharedDir + "/data/deepseek-v3-tokenizer/tokenizer.json";

// The real DeepSeek-V3 tokenizer, parsed once per test binary (it is 8 MB of JSON).
const Tokenizer& V3() {
  static const Tokenizer* tokenizer = [] {
    auto loaded = Tokenizer::Load(kV3Tokenizer);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
      std::abort();
    }
    return new Tokenizer(std::move(loaded).value());
  }();
  return *tokenizer;
}

// The tiny-a checkpoint's tokenizer (512 ids, all 256 byte tokens, DeepSeek added tokens): loads
// in milliseconds, so tests whose claim does not need the real vocabulary use it.
const std::string kTinyTokenizer = kSharedDir + "/goldens/model/checkpoints/tiny-a/tokenizer.json";
const Tokenizer& Tiny() {
  static const Tokenizer* tokenizer = [] {
    auto loaded = Tokenizer::Load(kTinyTokenizer);
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
      std::abort();
    }
    return new Tokenizer(std::move(loaded).value());
  }();
  return *tokenizer;
}

// An independent well-formedness check (RFC 3629 ranges) for streamed chunks.
bool IsWellFormedUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

TEST(TokenizerGoldenTest, EncodesAndDecodesEveryDeepSeekV3GoldenLine) {
  std::ifstream in(kSharedDir + "/goldens/tokenizer/deepseek_v3_encode.jsonl");
  ASSERT_TRUE(in) << "missing golden file";
  std::string line;
  int num_lines = 0;
  int num_ids_equal = 0;
  int num_decoded_equal = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++num_lines;
    auto parsed = ParseJson(line, "golden line");
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    const std::string text = (*parsed)["text"].get<std::string>();
    const auto want_ids = (*parsed)["ids"].get<std::vector<int32_t>>();
    const std::string want_decoded = (*parsed)["decoded"].get<std::string>();
    auto ids = V3().Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    if (*ids == want_ids) {
      ++num_ids_equal;
    } else {
      ADD_FAILURE() << "line " << num_lines << " ids differ: " << line.substr(0, 200);
    }
    if (V3().Decode(want_ids) == want_decoded) {
      ++num_decoded_equal;
    } else {
      ADD_FAILURE() << "line " << num_lines << " decoded text differs";
    }
  }
  std::printf("deepseek_v3_encode.jsonl: ids %d/%d, decoded %d/%d\n", num_ids_equal, num_lines,
              num_decoded_equal, num_lines);
  EXPECT_EQ(num_lines, 349);
  EXPECT_EQ(num_ids_equal, num_lines);
  EXPECT_EQ(num_decoded_equal, num_lines);
}

TEST(TokenizerTest, SpecialTokenIdsMatchTheSpecTable) {
  // tokenizer-and-chat.md §5 (DeepSeek-V3 shares ids 0-2 and the chat tokens of the V3 table).
  EXPECT_EQ(V3().IdOf("<｜begin▁of▁sentence｜>"), 0);
  EXPECT_EQ(V3().IdOf("<｜end▁of▁sentence｜>"), 1);
  EXPECT_EQ(V3().IdOf("<｜▁pad▁｜>"), 2);
  EXPECT_EQ(V3().IdOf("<｜User｜>"), 128803);
  EXPECT_EQ(V3().IdOf("<｜Assistant｜>"), 128804);
  EXPECT_EQ(V3().IdOf("<|EOT|>"), 128805);
  EXPECT_EQ(V3().IdOf("no such token"), std::nullopt);
  EXPECT_EQ(V3().bos_id(), 0);
  EXPECT_TRUE(V3().IsSpecial(1));
  EXPECT_FALSE(V3().IsSpecial(128803));  // special: false, normalized: true
  EXPECT_TRUE(V3().IsAdded(128803));
  // 128,000 vocab entries (ids 0..127999) + added tokens up to id 128814.
  EXPECT_EQ(V3().vocab_size(), 128815);
}

TEST(TokenizerTest, ByteTableMapsSpaceAndNewlineAsSpecified) {
  // §3.4: space -> U+0120 'Ġ', newline -> U+010A 'Ċ'.
  const auto space = Tiny().IdOf("Ġ");
  const auto newline = Tiny().IdOf("Ċ");
  ASSERT_TRUE(space && newline);
  EXPECT_EQ(Tiny().TokenBytes(*space), " ");
  EXPECT_EQ(Tiny().TokenBytes(*newline), "\n");
  EXPECT_EQ(Tiny().TokenString(*space), "Ġ");
  // An added token's bytes are its own UTF-8.
  EXPECT_EQ(Tiny().TokenBytes(1), "<｜end▁of▁sentence｜>");
}

TEST(TokenizerTest, AddedTokensAreMatchedUnlessTreatedAsText) {
  auto matched = Tiny().Encode("a<｜User｜>b<｜end▁of▁sentence｜>");
  ASSERT_TRUE(matched.ok());
  auto a = Tiny().Encode("a");
  auto b = Tiny().Encode("b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), 1u);
  ASSERT_EQ(b->size(), 1u);
  EXPECT_THAT(*matched, ElementsAre((*a)[0], 505, (*b)[0], 1));  // ids from tokenizer.json

  EncodeOptions as_text;
  as_text.special_tokens_as_text = true;
  auto plain = Tiny().Encode("a<｜User｜>b", as_text);
  ASSERT_TRUE(plain.ok());
  EXPECT_GT(plain->size(), 3u);
  for (const int32_t id : *plain) EXPECT_FALSE(Tiny().IsAdded(id)) << id;
  EXPECT_EQ(Tiny().Decode(*plain), "a<｜User｜>b");
}

TEST(TokenizerTest, TextWithoutLiteralsEncodesTheSameEitherWay) {
  const std::string text = "Hello, world! 123456 中文テキスト\n\n  indented\ttab <tag> </think";
  EncodeOptions as_text;
  as_text.special_tokens_as_text = true;
  auto matched = Tiny().Encode(text);
  auto plain = Tiny().Encode(text, as_text);
  ASSERT_TRUE(matched.ok() && plain.ok());
  EXPECT_EQ(*matched, *plain);
}

TEST(TokenizerTest, AddBosPrependsIdZero) {
  EncodeOptions options;
  options.add_bos = true;
  auto ids = Tiny().Encode("x", options);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_EQ((*ids)[0], 0);
}

TEST(TokenizerTest, DecodeCanSkipSpecialTokens) {
  auto ids = Tiny().Encode("<｜begin▁of▁sentence｜>hi<think><｜end▁of▁sentence｜>");
  ASSERT_TRUE(ids.ok());
  DecodeOptions skip;
  skip.skip_special_tokens = true;
  EXPECT_EQ(Tiny().Decode(*ids, skip), "hi<think>");  // <think> is "special": false
  EXPECT_EQ(Tiny().Decode(*ids), "<｜begin▁of▁sentence｜>hi<think><｜end▁of▁sentence｜>");
}

TEST(TokenizerTest, KeepingChatMarkersDropsOtherSpecialTokensOnly) {
  // A random model can sample the image placeholder; a reply carrying it could not be sent back.
  auto ids = Tiny().Encode(
      "<｜begin▁of▁sentence｜>hi</think><｜deepseek_image｜><｜User｜>ok<｜end▁of▁sentence｜>");
  ASSERT_TRUE(ids.ok());
  const DecodeOptions chat{.skip_special_tokens = true, .keep_chat_markers = true};
  const std::string want = "hi</think>ok<｜end▁of▁sentence｜>";
  EXPECT_EQ(Tiny().Decode(*ids, chat), want);
  StreamingDetokenizer stream(Tiny(), chat);
  std::string streamed;
  for (const int32_t id : *ids) streamed += stream.Push(id);
  EXPECT_EQ(streamed + stream.Finish(), want);
  EXPECT_EQ(
      Tiny().Decode(*ids, DecodeOptions{.keep_chat_markers = true}),
      "<｜begin▁of▁sentence｜>hi</think><｜deepseek_image｜><｜User｜>ok<｜end▁of▁sentence｜>")
      << "keep_chat_markers alone skips nothing";
}

TEST(TokenizerTest, InvalidUtf8InputIsAnError) {
  auto ids = Tiny().Encode("ab\xC3(");
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("UTF-8"));
}

TEST(TokenizerTest, RandomUnicodeTextRoundTrips) {
  std::mt19937 rng(1234);
  // Code points from ASCII, Latin-1, combining marks, CJK, kana, emoji and whitespace oddities.
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E},     {0x09, 0x0D},       {0xA0, 0x17F},    {0x300, 0x36F},   {0x4E00, 0x4E80},
      {0x3040, 0x30FF}, {0x1F600, 0x1F64F}, {0x2000, 0x2029}, {0x0660, 0x0669}, {0x85, 0x85}};
  for (int round = 0; round < 200; ++round) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(0, 40)(rng);
    for (int i = 0; i < length; ++i) {
      const auto& r = ranges[std::uniform_int_distribution<size_t>(0, ranges.size() - 1)(rng)];
      const char32_t cp = std::uniform_int_distribution<char32_t>(r.first, r.second)(rng);
      // Hand-rolled UTF-8 so the test does not depend on the code under test.
      if (cp < 0x80) {
        text += static_cast<char>(cp);
      } else if (cp < 0x800) {
        text += static_cast<char>(0xC0 | (cp >> 6));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        text += static_cast<char>(0xE0 | (cp >> 12));
        text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        text += static_cast<char>(0xF0 | (cp >> 18));
        text += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        text += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    auto ids = Tiny().Encode(text);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(Tiny().Decode(*ids), text) << "round " << round;
  }
}

// §3.3 by the book (tiny-a merges): one symbol per byte-level character, then repeatedly merge the
// adjacent pair of lowest rank (leftmost on ties), over strings, with the merges read from the JSON
// here.
std::vector<int32_t> ReferenceBpe(const std::string& byte_level_word) {
  static const auto* tables = [] {
    auto json = ReadJsonFile(kTinyTokenizer);
    EXPECT_TRUE(json.ok());
    auto* t = new std::pair<std::map<std::pair<std::string, std::string>, int>,
                            std::map<std::string, int32_t>>();
    int rank = 0;
    for (const Json& merge : (*json)["model"]["merges"]) {
      const std::string m = merge.get<std::string>();
      const size_t space = m.find(' ');
      t->first.emplace(std::make_pair(m.substr(0, space), m.substr(space + 1)), rank++);
    }
    for (const auto& [token, id] : (*json)["model"]["vocab"].items()) t->second[token] = id;
    return t;
  }();
  std::vector<std::string> symbols;
  for (size_t i = 0; i < byte_level_word.size();) {
    const size_t n = (static_cast<unsigned char>(byte_level_word[i]) < 0x80) ? 1 : 2;
    symbols.push_back(byte_level_word.substr(i, n));  // byte-level chars are 1 or 2 bytes
    i += n;
  }
  while (true) {
    int best_rank = INT32_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = tables->first.find({symbols[i], symbols[i + 1]});
      if (it != tables->first.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == INT32_MAX) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + best + 1);
  }
  std::vector<int32_t> ids;
  for (const std::string& symbol : symbols) ids.push_back(tables->second.at(symbol));
  return ids;
}

TEST(TokenizerTest, LongWordsMatchAReferenceBpeLoop) {
  // Letter runs are one pre-token each (§3.2 word regex), so Encode is BPE of the whole run; long
  // runs take the heap path, short ones are cached.
  std::vector<std::string> words = {"hello", "Supercalifragilisticexpialidocious", "thethe"};
  std::string the;
  for (int i = 0; i < 100; ++i) the += "the";
  words.push_back(the);
  words.push_back(std::string(300, 'a'));
  std::string mixed;
  for (int i = 0; i < 40; ++i) mixed += "antidisestablishmentarianism";
  words.push_back(mixed);
  std::string ab;
  for (int i = 0; i < 150; ++i) ab += "ab";
  words.push_back(ab);
  for (const std::string& word : words) {
    auto ids = Tiny().Encode(word);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, ReferenceBpe(word)) << word.substr(0, 40);
    // Twice: the second encode may come from the word cache.
    EXPECT_EQ(*Tiny().Encode(word), *ids);
  }
}

TEST(TokenizerTest, ConcurrentEncodesEqualSequentialOnes) {
  std::vector<std::string> texts;
  for (int i = 0; i < 8; ++i) {
    texts.push_back("thread text " + std::to_string(i * 7919) + " with words like tokenization, " +
                    std::string(static_cast<size_t>(i + 1), 'z') + " and 中文 " +
                    std::to_string(i));
  }
  std::vector<std::vector<int32_t>> sequential;
  for (const std::string& text : texts) sequential.push_back(*Tiny().Encode(text));
  std::vector<std::vector<std::vector<int32_t>>> concurrent(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (const std::string& text : texts) concurrent[t].push_back(*Tiny().Encode(text));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) {
    ASSERT_EQ(concurrent[t].size(), 20 * texts.size());
    for (size_t i = 0; i < concurrent[t].size(); ++i) {
      EXPECT_EQ(concurrent[t][i], sequential[i % texts.size()]) << "thread " << t;
    }
  }
}

TEST(Utf8LossyTest, ReplacesMaximalSubpartsAsTheUnicodeStandardExample) {
  // The Unicode Standard §3.9, "U+FFFD Substitution of Maximal Subparts" example:
  // 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
  std::string out;
  const size_t consumed =
      AppendUtf8Lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", true, &out);
  EXPECT_EQ(consumed, 13u);
  EXPECT_EQ(out, "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
}

TEST(Utf8LossyTest, HoldsBackAnIncompleteTailUnlessFinal) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("x\xE4\xB8", false, &out), 1u);
  EXPECT_EQ(out, "x");
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("x\xE4\xB8", true, &out), 3u);
  EXPECT_EQ(out, "x\uFFFD");
}

// Ids of the single-byte tokens for `bytes` (byte table §3.4: bytes 0x80-0xA0 map to U+0100+...).
std::vector<int32_t> ByteTokenIds(const std::string& bytes) {
  std::vector<int32_t> ids;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    // Independent byte table: printable ranges map to themselves, the rest to U+0100 + k.
    char32_t cp = b;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
      int k = 0;
      for (int x = 0; x < b; ++x) {
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++k;
      }
      cp = 0x100 + k;
    }
    std::string token;
    if (cp < 0x80) {
      token += static_cast<char>(cp);
    } else {
      token += static_cast<char>(0xC0 | (cp >> 6));
      token += static_cast<char>(0x80 | (cp & 0x3F));
    }
    const auto id = Tiny().IdOf(token);
    EXPECT_TRUE(id.has_value()) << "byte " << static_cast<int>(b);
    ids.push_back(id.value_or(0));
  }
  return ids;
}

std::vector<int32_t> EncodeTiny(const std::string& text) {
  auto ids = Tiny().Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(StreamingDetokenizerTest, NeverEmitsHalfACharacterAndMatchesDecode) {
  // "世" = E4 B8 96 and "🙂" = F0 9F 99 82, fed one byte token at a time, between ASCII words.
  std::vector<int32_t> ids = EncodeTiny("say ");
  for (const int32_t id : ByteTokenIds("\xE4\xB8\x96")) ids.push_back(id);
  for (const int32_t id : EncodeTiny(" and ")) ids.push_back(id);
  for (const int32_t id : ByteTokenIds("\xF0\x9F\x99\x82")) ids.push_back(id);
  for (const int32_t id : EncodeTiny(" naïve 中文 🙂 done")) ids.push_back(id);

  StreamingDetokenizer stream(Tiny());
  std::string joined;
  int num_empty = 0;
  for (const int32_t id : ids) {
    const std::string chunk = stream.Push(id);
    EXPECT_TRUE(IsWellFormedUtf8(chunk)) << "chunk after id " << id;
    if (chunk.empty()) ++num_empty;
    joined += chunk;
  }
  joined += stream.Finish();
  EXPECT_GE(num_empty, 5);  // at least the 2 held bytes of 世 + 3 of 🙂
  EXPECT_EQ(joined, Tiny().Decode(ids));
  EXPECT_EQ(joined, "say 世 and 🙂 naïve 中文 🙂 done");
}

TEST(StreamingDetokenizerTest, FinishFlushesAnIncompleteCharacterAsReplacement) {
  const std::vector<int32_t> ids = ByteTokenIds("a\xE4\xB8");
  StreamingDetokenizer stream(Tiny());
  std::string joined;
  for (const int32_t id : ids) joined += stream.Push(id);
  EXPECT_EQ(joined, "a");
  joined += stream.Finish();
  EXPECT_EQ(joined, "a\uFFFD");
  EXPECT_EQ(joined, Tiny().Decode(ids));
}

// A handcrafted tokenizer: printable ASCII maps to itself in the byte table, so plain letters are
// valid byte-level token strings.
std::string TinyTokenizerJson(const std::string& model_type, const std::string& merges,
                              const std::string& normalizer = "null") {
  return R"({"added_tokens": [
      {"id": 7, "content": "<a>", "special": true, "normalized": false},
      {"id": 8, "content": "<a>b", "special": true, "normalized": false},
      {"id": 9, "content": "bc", "special": false, "normalized": true}],
    "normalizer": )" +
         normalizer + R"(,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": ")" +
         model_type + R"(", "vocab": {"a": 0, "b": 1, "c": 2, "<": 3, ">": 4, "x": 5, "ab": 6,
                   "Ġ": 10, "abc": 11},
              "merges": )" +
         merges + "}}";
}

TEST(TokenizerTest, AddedTokensMatchLeftmostLongestRawBeforeNormalized) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizerJson("BPE", R"(["a b", ["ab", "c"]])"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  // "<a>b" beats "<a>"; the normalized "bc" is only matched in the gaps of the raw tokens, so the
  // "b" of "<a>bc" belongs to "<a>b" and "c" stays text, while "abc" splits into "a" + "bc" before
  // any pre-tokenization (§3.1).
  auto ids = tokenizer->Encode("x<a>bc<a>ab abc bc");
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(5, 8, 2, 7, 6, 10, 0, 9, 10, 9));
  EXPECT_EQ(tokenizer->vocab_size(), 12);
  EXPECT_EQ(tokenizer->Decode(*ids), "x<a>bc<a>ab abc bc");
}

TEST(TokenizerTest, BpeMergesLowestRankFirst) {
  // With "b c" ranked before "a b", "abc" becomes a + bc, not ab + c.
  std::string json = TinyTokenizerJson("BPE", R"(["b c", "a b"])");
  // "bc" must be a vocab entry for the merge; the added token "bc" (id 9) shares its string.
  json.replace(json.find("\"abc\": 11"), 9, "\"abc\": 11, \"bc\": 12");
  auto tokenizer = Tokenizer::FromJson(json);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  EncodeOptions as_text;
  as_text.special_tokens_as_text = true;
  auto ids = tokenizer->Encode("abc", as_text);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(0, 12));
}

TEST(TokenizerErrorTest, NonBpeModelTypeNamesTheField) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizerJson("WordPiece", "[]"), "bad.json");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("bad.json"));
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("model.type"));
}

TEST(TokenizerErrorTest, MergeOfUnknownTokenNamesTheEntry) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizerJson("BPE", R"(["a b", "a zz"])"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("model.merges[1]"));
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("zz"));
}

TEST(TokenizerErrorTest, MalformedMergeEntryNamesTheEntry) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizerJson("BPE", R"(["a b", "abc"])"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("model.merges[1]"));
}

TEST(TokenizerErrorTest, MergedStringMissingFromVocabIsAnError) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizerJson("BPE", R"(["x a"])"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("'xa' is not in model.vocab"));
}

TEST(TokenizerErrorTest, NonEmptyNormalizerIsRefused) {
  auto tokenizer = Tokenizer::FromJson(TinyTokenizerJson("BPE", "[]", R"({"type": "NFKC"})"));
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("normalizer"));
}

TEST(TokenizerErrorTest, BadRegexNamesThePreTokenizerStage) {
  std::string json = TinyTokenizerJson("BPE", "[]");
  const std::string pattern = R"("\\s+")";
  json.replace(json.find(pattern), pattern.size(), R"("(\\s+")");
  auto tokenizer = Tokenizer::FromJson(json);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("pre_tokenizer.pretokenizers[0].pattern"));
}

TEST(TokenizerErrorTest, NotJsonIsAnError) {
  EXPECT_FALSE(Tokenizer::FromJson("{\"model\": ").ok());
  EXPECT_FALSE(Tokenizer::FromJson("[]").ok());
  EXPECT_FALSE(Tokenizer::Load("/nonexistent/tokenizer.json").ok());
}

TEST(TokenizerTest, TinyCheckpointTokenizersLoadAndRoundTrip) {
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    const std::string dir = kSharedDir + "/goldens/model/checkpoints/" + name;
    auto tokenizer = Tokenizer::Load(dir + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    auto config = ReadJsonFile(dir + "/config.json");
    auto raw = ReadJsonFile(dir + "/tokenizer.json");
    ASSERT_TRUE(config.ok() && raw.ok());
    const Json& text_config = config->contains("text_config") ? (*config)["text_config"] : *config;
    EXPECT_EQ(tokenizer->vocab_size(), text_config["vocab_size"].get<int>()) << name;
    for (const Json& added : (*raw)["added_tokens"]) {
      EXPECT_EQ(tokenizer->IdOf(added["content"].get<std::string>()), added["id"].get<int>())
          << name;
    }
    const std::string text = "Hello world, it's 2026!\n<｜User｜>hi there";
    auto ids = tokenizer->Encode(text);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(tokenizer->Decode(*ids), text) << name;
    EXPECT_THAT(*ids, ::testing::Contains(*tokenizer->IdOf("<｜User｜>"))) << name;
  }
}

}  // namespace
}  // namespace dsv41

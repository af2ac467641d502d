#include "engram/token_map.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/mapped_file.h"
#include "text/tokenizer.h"

namespace dsv41 {
namespace {

using ::testing::HasSubstr;

const std::string kSharedDir = DSV41_SHARED_DIR;

// A minimal reader for a 1-D little-endian int32/int64 .npy array (format 1.0/2.0), enough for
// the golden token maps.
std::vector<int64_t> ReadNpyIntVector(const std::string& path) {
  auto bytes = ReadFileToString(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
  if (!bytes.ok()) return {};
  const std::string& s = *bytes;
  EXPECT_EQ(s.substr(0, 6), "\x93NUMPY");
  const int major = static_cast<unsigned char>(s[6]);
  size_t header_length = static_cast<unsigned char>(s[8]) | (static_cast<unsigned char>(s[9]) << 8);
  size_t data_offset = 10 + header_length;
  if (major >= 2) {
    header_length = 0;
    for (int k = 0; k < 4; ++k)
      header_length |= size_t{static_cast<unsigned char>(s[8 + k])} << (8 * k);
    data_offset = 12 + header_length;
  }
  const std::string header = s.substr(0, data_offset);
  const bool is_i4 = header.find("'<i4'") != std::string::npos;
  const bool is_i8 = header.find("'<i8'") != std::string::npos;
  EXPECT_TRUE(is_i4 || is_i8) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos);
  const size_t item = is_i4 ? 4 : 8;
  const size_t count = (s.size() - data_offset) / item;
  std::vector<int64_t> values(count);
  for (size_t i = 0; i < count; ++i) {
    if (is_i4) {
      int32_t v;
      std::memcpy(&v, s.data() + data_offset + i * 4, 4);
      values[i] = v;
    } else {
      std::memcpy(&values[i], s.data() + data_offset + i * 8, 8);
    }
  }
  return values;
}

TEST(EngramKeyTest, FollowsTheSpecNormalisationSteps) {
  // model.md §9.2 step 3, by hand.
  EXPECT_EQ(*NormalizeEngramKey("Hello"), "hello");
  EXPECT_EQ(*NormalizeEngramKey(" Hello"), "hello");    // White_Space stripped
  EXPECT_EQ(*NormalizeEngramKey("Caf\u00E9"), "cafe");  // NFD then Mn removed
  EXPECT_EQ(*NormalizeEngramKey("\uFB01"), "fi");       // NFKC compatibility ligature
  EXPECT_EQ(*NormalizeEngramKey("\u03A3"), "\u03C3");   // lone Σ: no final-sigma context
  EXPECT_EQ(*NormalizeEngramKey(" "), " ");             // a lone space survives
  EXPECT_EQ(*NormalizeEngramKey("\t\n"), " ");          // a run collapses to one space
  EXPECT_EQ(*NormalizeEngramKey("a \t b"), "a b");
  EXPECT_EQ(*NormalizeEngramKey("\u3000"), " ");       // NFKC: ideographic space -> space
  EXPECT_EQ(*NormalizeEngramKey("\u2028"), "\u2028");  // stripped to empty: original kept
  EXPECT_EQ(*NormalizeEngramKey("\u00A0x"), "x");      // NFKC: NBSP -> space, stripped
  EXPECT_EQ(*NormalizeEngramKey("\u20DD"), "\u20DD");  // Me only: empty -> original
}

TEST(EngramKeyTest, CapitalIWithDotLowersToIThenTheDotIsAMark) {
  // U+0130 has the full lowercase mapping "i" + U+0307; but NFD already splits it into I + U+0307
  // and the mark is removed before lowercasing, leaving "i".
  EXPECT_EQ(*NormalizeEngramKey("\u0130"), "i");
}

TEST(EngramTokenMapTest, EqualsTheDeepSeekV3Golden) {
  auto tokenizer = Tokenizer::Load(kSharedDir + "/data/deepseek-v3-tokenizer/tokenizer.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  auto map = BuildEngramTokenMap(*tokenizer);
  ASSERT_TRUE(map.ok()) << map.status().ToString();
  auto golden =
      ReadEngramTokenMap(kSharedDir + "/goldens/tokenizer/deepseek_v3_engram_token_map.i32");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  ASSERT_EQ(map->class_of_token.size(), golden->class_of_token.size());
  int num_mismatches = 0;
  for (size_t id = 0; id < golden->class_of_token.size(); ++id) {
    if (map->class_of_token[id] != golden->class_of_token[id]) {
      if (++num_mismatches <= 10) {
        ADD_FAILURE() << "token " << id << " '" << tokenizer->TokenString(id) << "': class "
                      << map->class_of_token[id] << ", golden " << golden->class_of_token[id];
      }
    }
  }
  std::printf("deepseek_v3_engram_token_map.i32: %d mismatches of %zu, %d classes\n",
              num_mismatches, golden->class_of_token.size(), map->num_classes);
  EXPECT_EQ(num_mismatches, 0);
  EXPECT_EQ(map->num_classes, 98627);
  EXPECT_EQ(golden->num_classes, 98627);
  EXPECT_EQ(map->class_of_token[2], 2);  // pad
  EXPECT_EQ(SerializeEngramTokenMap(*map),
            *ReadFileToString(kSharedDir + "/goldens/tokenizer/deepseek_v3_engram_token_map.i32"));
}

TEST(EngramTokenMapTest, EqualsTheTinyCheckpointGoldens) {
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    const std::string checkpoint = kSharedDir + "/goldens/model/checkpoints/" + name;
    auto tokenizer = Tokenizer::Load(checkpoint + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    auto map = BuildEngramTokenMap(*tokenizer);
    ASSERT_TRUE(map.ok());
    const std::vector<int64_t> golden =
        ReadNpyIntVector(kSharedDir + "/goldens/model/cases/" + name + "/engram_token_map.npy");
    ASSERT_EQ(golden.size(), map->class_of_token.size()) << name;
    for (size_t id = 0; id < golden.size(); ++id) {
      EXPECT_EQ(map->class_of_token[id], golden[id]) << name << " token " << id;
    }
    auto config = ReadJsonFile(checkpoint + "/config.json");
    ASSERT_TRUE(config.ok());
    const Json& text_config = config->contains("text_config") ? (*config)["text_config"] : *config;
    const int64_t want = text_config["engram_compressed_vocab_size"].get<int64_t>();
    EXPECT_TRUE(CheckClassCount(*map, want).ok()) << name;
  }
}

TEST(EngramTokenMapTest, ClassCountMismatchNamesBothNumbers) {
  EngramTokenMap map;
  map.class_of_token = {0, 1, 1, 2};
  map.num_classes = 3;
  EXPECT_TRUE(CheckClassCount(map, 3).ok());
  const Status status = CheckClassCount(map, 99092);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("engram_compressed_vocab_size"));
  EXPECT_THAT(status.message(), HasSubstr("99092"));
  EXPECT_THAT(status.message(), HasSubstr("3 classes"));
}

TEST(EngramTokenMapTest, SerializesAsLittleEndianInt32AndParsesBack) {
  EngramTokenMap map;
  map.class_of_token = {0, 1, 258, 1};
  map.num_classes = 259;
  const std::string bytes = SerializeEngramTokenMap(map);
  EXPECT_EQ(bytes, std::string("\0\0\0\0\1\0\0\0\2\1\0\0\1\0\0\0", 16));
  auto parsed = ParseEngramTokenMap(bytes, "map.i32");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->class_of_token, map.class_of_token);
  EXPECT_EQ(parsed->num_classes, 259);
}

TEST(EngramTokenMapTest, ParseRefusesTruncationAndNegativeClasses) {
  auto truncated = ParseEngramTokenMap(std::string("\0\0\0\0\1\0", 6), "map.i32");
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(), HasSubstr("map.i32"));
  auto negative = ParseEngramTokenMap(std::string("\0\0\0\0\xFF\xFF\xFF\xFF", 8), "map.i32");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(negative.status().message(), HasSubstr("token 1"));
}

}  // namespace
}  // namespace dsv41

#include "engram/row_ids.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/npy.h"
#include "config/config.h"
#include "engram/hash_constants.h"
#include "engram/token_map.h"
#include "text/tokenizer.h"

namespace dsv41 {
namespace {

using ::testing::HasSubstr;

const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model/";

// model.md §9.4's sequence: class ids at positions 0..5.
const std::vector<int32_t> kSpecClasses = {0, 1234, 56789, 99091, 2, 31337};

const EngramHashConstants& ReleasedConstants() {
  static const EngramHashConstants constants = [] {
    Result<EngramHashConstants> c = ComputeEngramHashConstants(ReleasedConfig(), 99092, 2);
    DSV41_CHECK(c.ok(), "%s", c.status().ToString().c_str());
    return *std::move(c);
  }();
  return constants;
}

// Rows [position][layer][col] of every position in `classes`.
std::vector<int64_t> AllRows(const EngramHashConstants& constants,
                             const std::vector<int32_t>& classes,
                             const std::vector<uint8_t>& dead) {
  std::vector<int64_t> rows(classes.size() * constants.layers.size() *
                            static_cast<size_t>(constants.num_cols()));
  ComputeEngramRows(constants, classes, dead, 0, static_cast<int64_t>(classes.size()), rows);
  return rows;
}

std::vector<int64_t> RowsOf(const std::vector<int64_t>& all, int pos, int layer) {
  const auto begin = all.begin() + (pos * 2 + layer) * 24;
  return std::vector<int64_t>(begin, begin + 24);
}

std::vector<int64_t> Lookback(const std::vector<int32_t>& classes, const std::vector<uint8_t>& dead,
                              int64_t pos) {
  std::vector<int64_t> x(4);
  EngramLookback(classes, dead, pos, 2, x);
  return x;
}

TEST(EngramRowsTest, SpecLookbackIdsWithoutDeadTokens) {
  EXPECT_EQ(Lookback(kSpecClasses, {}, 0), (std::vector<int64_t>{0, 2, 2, 2}));
  EXPECT_EQ(Lookback(kSpecClasses, {}, 1), (std::vector<int64_t>{1234, 0, 2, 2}));
  EXPECT_EQ(Lookback(kSpecClasses, {}, 3), (std::vector<int64_t>{99091, 56789, 1234, 0}));
  EXPECT_EQ(Lookback(kSpecClasses, {}, 5), (std::vector<int64_t>{31337, 2, 99091, 56789}));
}

TEST(EngramRowsTest, SpecGoldenVectorsWithoutDeadTokens) {
  const std::vector<int64_t> rows = AllRows(ReleasedConstants(), kSpecClasses, {});
  EXPECT_EQ(
      RowsOf(rows, 0, 0),
      (std::vector<int64_t>{5702652,   24393184,  39183301,  61503783,  78984481,  90144770,
                            103724983, 121476532, 131476717, 152385926, 164143652, 191599181,
                            198145581, 217419202, 238329687, 247482304, 257520185, 283540304,
                            288689443, 315264704, 322314652, 348890037, 367865216, 380066193}));
  EXPECT_EQ(
      RowsOf(rows, 0, 1),
      (std::vector<int64_t>{14361964,  29977809,  32716444,  61209771,  67456205,  84275051,
                            108494439, 120604547, 132225184, 150270452, 174805952, 178895254,
                            193207923, 211610196, 226280582, 252505246, 261362261, 279862797,
                            301364059, 312864848, 328367036, 349372619, 363873742, 372375971}));
  EXPECT_EQ(
      RowsOf(rows, 1, 0),
      (std::vector<int64_t>{5993266,   29589612,  33207019,  62252675,  74175613,  88911241,
                            96296787,  125612980, 137350223, 156296126, 165872213, 179133084,
                            205581416, 218965050, 239239833, 249841041, 270517318, 277731507,
                            302889215, 315507879, 329268532, 341931426, 353410857, 377089567}));
  EXPECT_EQ(
      RowsOf(rows, 3, 0),
      (std::vector<int64_t>{11404318,  27126760,  41634012,  54340549,  78230449,  93881805,
                            103148991, 124071803, 133257355, 152050246, 174856487, 176054632,
                            201218470, 210710084, 225084630, 240763833, 257564151, 276070245,
                            296150887, 309418656, 330126120, 346979941, 365015998, 371481398}));
  EXPECT_EQ(
      RowsOf(rows, 5, 1),
      (std::vector<int64_t>{7384521,   21087615,  33319465,  53467295,  79939601,  92165445,
                            107346010, 114992896, 138582463, 150886302, 164355045, 176364306,
                            198364954, 210580139, 226952339, 254710898, 271647801, 281472360,
                            298773804, 312490711, 324732655, 350642567, 358181315, 383890316}));
}

// §9.4, "same sequence with position 2 DEAD".
TEST(EngramRowsTest, SpecGoldenVectorsWithDeadToken) {
  const std::vector<uint8_t> dead = {0, 0, 1, 0, 0, 0};
  EXPECT_EQ(Lookback(kSpecClasses, dead, 2), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(Lookback(kSpecClasses, dead, 3), (std::vector<int64_t>{99091, 2, 2, 2}));
  EXPECT_EQ(Lookback(kSpecClasses, dead, 4), (std::vector<int64_t>{2, 99091, 2, 2}));
  EXPECT_EQ(Lookback(kSpecClasses, dead, 5), (std::vector<int64_t>{31337, 2, 99091, 2}));
  const std::vector<int64_t> rows = AllRows(ReleasedConstants(), kSpecClasses, dead);
  const std::vector<int64_t> pos3 = RowsOf(rows, 3, 0);
  EXPECT_EQ(pos3[0], 2008568);
  EXPECT_EQ(pos3[1], 17698461);
  EXPECT_EQ(pos3[2], 32185018);
  const std::vector<int64_t> pos4 = RowsOf(rows, 4, 0);
  EXPECT_EQ(pos4[0], 13556909);
  EXPECT_EQ(pos4[8], 132510988);
  EXPECT_EQ(pos4[16], 271223201);
  const std::vector<int64_t> pos5 = RowsOf(rows, 5, 0);
  EXPECT_EQ(pos5[0], 8512803);
  EXPECT_EQ(pos5[1], 17241923);
  EXPECT_EQ(pos5[2], 35940373);
  EXPECT_EQ(pos5[16], 258424363);
  // Positions before the dead token are unaffected.
  const std::vector<int64_t> clean = AllRows(ReleasedConstants(), kSpecClasses, {});
  EXPECT_EQ(RowsOf(rows, 1, 0), RowsOf(clean, 1, 0));
  EXPECT_EQ(RowsOf(rows, 1, 1), RowsOf(clean, 1, 1));
}

// A token whose class equals the pad class is an ordinary token (§9.4): not blocked.
TEST(EngramRowsTest, PadClassTokenDoesNotBlockTheLookback) {
  const std::vector<int32_t> classes = {7, 2, 9};
  EXPECT_EQ(Lookback(classes, {}, 2), (std::vector<int64_t>{9, 2, 7, 2}));
}

// §9.5: prefill, chunked prefill and decode hash identically.
TEST(EngramRowsTest, ChunkedPositionsEqualOneShot) {
  const std::vector<int32_t> classes = {5, 99091, 0, 2, 2, 4321, 17, 17, 17, 60000, 1};
  const std::vector<uint8_t> dead = {0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
  const EngramHashConstants& constants = ReleasedConstants();
  const std::vector<int64_t> whole = AllRows(constants, classes, dead);
  const size_t per_pos = 2 * 24;
  std::vector<int64_t> pieces;
  for (const auto& [first, count] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 1}, {4, 5}, {9, 0}, {9, 1}, {10, 1}}) {
    std::vector<int64_t> part(static_cast<size_t>(count) * per_pos);
    ComputeEngramRows(constants, classes, dead, first, count, part);
    pieces.insert(pieces.end(), part.begin(), part.end());
  }
  EXPECT_EQ(pieces, whole);
}

TEST(EngramRowsTest, RowsLieInsideTheirColumnsBucket) {
  const EngramHashConstants& constants = ReleasedConstants();
  std::vector<int32_t> classes;
  for (int32_t i = 0; i < 50; ++i) classes.push_back((i * 7919) % 99092);
  const std::vector<int64_t> rows = AllRows(constants, classes, {});
  for (size_t p = 0; p < classes.size(); ++p) {
    for (size_t l = 0; l < 2; ++l) {
      const EngramLayerHashConstants& layer = constants.layers[l];
      for (size_t c = 0; c < 24; ++c) {
        const int64_t row = rows[(p * 2 + l) * 24 + c];
        ASSERT_GE(row, layer.offsets[c]);
        ASSERT_LT(row, layer.offsets[c] + layer.primes[c]);
      }
    }
  }
}

TEST(EngramRowsTest, MapTokensRejectsTokenOutsideTheMap) {
  EngramTokenMap map;
  map.class_of_token = {0, 1, 1};
  map.num_classes = 2;
  const std::vector<int32_t> tokens = {2, 0, 3};
  std::vector<int32_t> classes(3);
  const Status status = MapTokensToEngramClasses(map, tokens, classes);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("position 2: token id 3"));
  // A negative id never indexes from the end (vllm-ascend #16423, trap E3).
  const std::vector<int32_t> negative = {0, -1};
  std::vector<int32_t> two(2);
  const Status refused = MapTokensToEngramClasses(map, negative, two);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("position 1: token id -1"));
  const std::vector<int32_t> good = {2, 0, 1};
  ASSERT_TRUE(MapTokensToEngramClasses(map, good, classes).ok());
  EXPECT_EQ(classes, (std::vector<int32_t>{1, 0, 1}));
}

// Every golden case: the processed tokens (prompt, then the first 15 fed-back greedy tokens) give
// engram_compressed_ids [T+15] and engram_hash [T+15, slots, cols] exactly.
TEST(EngramRowsTest, GoldenCompressedIdsAndRowsMatch) {
  int64_t matched_ids = 0;
  int64_t matched_rows = 0;
  int64_t total_rows = 0;
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    SCOPED_TRACE(name);
    const std::string checkpoint = kGoldens + "checkpoints/" + name;
    Result<ModelConfig> config = LoadModelConfig(checkpoint);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    Result<Tokenizer> tokenizer = Tokenizer::Load(checkpoint + "/tokenizer.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
    Result<EngramTokenMap> map = BuildEngramTokenMap(*tokenizer);
    ASSERT_TRUE(map.ok()) << map.status().ToString();
    Result<EngramHashConstants> constants = ComputeEngramHashConstants(*config, *map);
    ASSERT_TRUE(constants.ok()) << constants.status().ToString();
    for (const char* case_name : {"chat5", "mix40", "long120"}) {
      SCOPED_TRACE(case_name);
      const std::string dir = kGoldens + "cases/" + name + "/" + case_name + "/";
      Result<NpyArray> input = ReadNpy(dir + "input_ids.npy");
      Result<NpyArray> greedy = ReadNpy(dir + "greedy_ids.npy");
      Result<NpyArray> want_ids = ReadNpy(dir + "engram_compressed_ids.npy");
      Result<NpyArray> want_rows = ReadNpy(dir + "engram_hash.npy");
      ASSERT_TRUE(input.ok() && greedy.ok() && want_ids.ok() && want_rows.ok());
      std::vector<int32_t> tokens;
      for (const int64_t t : input->ToInt64()) tokens.push_back(static_cast<int32_t>(t));
      const std::vector<int64_t> greedy_ids = greedy->ToInt64();
      ASSERT_EQ(greedy_ids.size(), 16u);
      // The 16th greedy token is produced but never fed back.
      for (size_t i = 0; i + 1 < greedy_ids.size(); ++i) {
        tokens.push_back(static_cast<int32_t>(greedy_ids[i]));
      }
      std::vector<int32_t> classes(tokens.size());
      ASSERT_TRUE(MapTokensToEngramClasses(*map, tokens, classes).ok());
      const std::vector<int64_t> golden_ids = want_ids->ToInt64();
      ASSERT_EQ(golden_ids.size(), classes.size());
      for (size_t i = 0; i < classes.size(); ++i) {
        EXPECT_EQ(classes[i], golden_ids[i]) << "position " << i;
        matched_ids += classes[i] == golden_ids[i];
      }
      ASSERT_EQ(want_rows->shape,
                (std::vector<int64_t>{static_cast<int64_t>(tokens.size()), constants->num_layers(),
                                      constants->num_cols()}));
      const std::vector<int64_t> golden_rows = want_rows->ToInt64();
      const std::vector<int64_t> rows = AllRows(*constants, classes, {});
      ASSERT_EQ(rows.size(), golden_rows.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(rows[i], golden_rows[i]) << "entry " << i;
        matched_rows += rows[i] == golden_rows[i];
      }
      total_rows += static_cast<int64_t>(rows.size());
    }
  }
  // 3 checkpoints x (20 + 55 + 135) processed tokens x 2 slots x 6 columns.
  EXPECT_EQ(matched_ids, 3 * (20 + 55 + 135));
  EXPECT_EQ(total_rows, 3 * (20 + 55 + 135) * 2 * 6);
  EXPECT_EQ(matched_rows, total_rows);
  std::printf("golden engram: %lld compressed ids, %lld of %lld rows match\n",
              static_cast<long long>(matched_ids), static_cast<long long>(matched_rows),
              static_cast<long long>(total_rows));
}

}  // namespace
}  // namespace dsv41

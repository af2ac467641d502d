#include "engram/hash_constants.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/json.h"
#include "config/config.h"
#include "engram/token_map.h"
#include "text/tokenizer.h"

namespace dsv41 {
namespace {

using ::testing::HasSubstr;

const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model/";

// model.md §9.3, typed from the spec.
TEST(EngramHashConstantsTest, ReleasedConstantsMatchSpec) {
  Result<EngramHashConstants> constants = ComputeEngramHashConstants(ReleasedConfig(), 99092, 2);
  ASSERT_TRUE(constants.ok()) << constants.status().ToString();
  EXPECT_EQ(constants->max_ngram_size, 4);
  EXPECT_EQ(constants->n_heads, 8);
  EXPECT_EQ(constants->num_cols(), 24);
  EXPECT_EQ(constants->pad_class_id, 2);
  ASSERT_EQ(constants->num_layers(), 2);
  const EngramLayerHashConstants& l1 = constants->layers[0];
  const EngramLayerHashConstants& l14 = constants->layers[1];
  EXPECT_EQ(l1.layer_id, 1);
  EXPECT_EQ(l14.layer_id, 14);
  EXPECT_EQ(l1.multipliers,
            (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
  EXPECT_EQ(l14.multipliers,
            (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
  EXPECT_EQ(l1.primes,
            (std::vector<int64_t>{16000057, 16000079, 16000081, 16000097, 16000121, 16000129,
                                  16000133, 16000183, 16000189, 16000207, 16000211, 16000253,
                                  16000277, 16000289, 16000307, 16000321, 16000339, 16000381,
                                  16000393, 16000399, 16000403, 16000409, 16000447, 16000463}));
  EXPECT_EQ(l14.primes,
            (std::vector<int64_t>{16000477, 16000487, 16000499, 16000507, 16000511, 16000573,
                                  16000609, 16000627, 16000667, 16000669, 16000693, 16000697,
                                  16000711, 16000729, 16000759, 16000769, 16000781, 16000799,
                                  16000813, 16000819, 16000841, 16000877, 16000879, 16000889}));
  EXPECT_EQ(l1.offsets, (std::vector<int64_t>{0,         16000057,  32000136,  48000217,  64000314,
                                              80000435,  96000564,  112000697, 128000880, 144001069,
                                              160001276, 176001487, 192001740, 208002017, 224002306,
                                              240002613, 256002934, 272003273, 288003654, 304004047,
                                              320004446, 336004849, 352005258, 368005705}));
  EXPECT_EQ(l14.offsets, (std::vector<int64_t>{
                             0,         16000477,  32000964,  48001463,  64001970,  80002481,
                             96003054,  112003663, 128004290, 144004957, 160005626, 176006319,
                             192007016, 208007727, 224008456, 240009215, 256009984, 272010765,
                             288011564, 304012377, 320013196, 336014037, 352014914, 368015793}));
  EXPECT_EQ(l1.num_rows, 384006168);
  EXPECT_EQ(l14.num_rows, 384016682);
}

// §9.3: bound = (INT64_MAX // 99092) // 2 = 46,539,438,283,891; every multiplier is 2·R + 1 with
// R < bound, so it is odd, below 2·bound, and class · multiplier fits int64 for every class.
TEST(EngramHashConstantsTest, ReleasedMultipliersAreOddAndBelowTwiceTheBound) {
  constexpr int64_t kBound = 46539438283891;
  for (const int32_t layer_id : {0, 1, 14, 39}) {
    for (const int64_t m : ComputeEngramMultipliers(layer_id, 4, 99092)) {
      EXPECT_EQ(m % 2, 1);
      EXPECT_LT(m, 2 * kBound);
      EXPECT_LE(m, std::numeric_limits<int64_t>::max() / 99092);
    }
  }
}

// `size` is max_ngram_size; a shorter draw is a prefix of a longer one (§9.3).
TEST(EngramHashConstantsTest, ShorterDrawIsPrefixOfLongerDraw) {
  const std::vector<int64_t> four = ComputeEngramMultipliers(14, 4, 99092);
  const std::vector<int64_t> three = ComputeEngramMultipliers(14, 3, 99092);
  EXPECT_EQ(three, std::vector<int64_t>(four.begin(), four.begin() + 3));
}

// bound = max(1, ...): a vocabulary above INT64_MAX / 2 leaves R = 0, multiplier 1.
TEST(EngramHashConstantsTest, HugeVocabularyGivesBoundOneAndMultiplierOne) {
  EXPECT_EQ(ComputeEngramMultipliers(5, 3, std::numeric_limits<int64_t>::max()),
            (std::vector<int64_t>{1, 1, 1}));
}

TEST(EngramHashConstantsTest, NoEngramLayersGiveNoLayers) {
  ModelConfig config = ReleasedConfig();
  config.engram_layer_ids.clear();
  Result<EngramHashConstants> constants = ComputeEngramHashConstants(config, 99092, 2);
  ASSERT_TRUE(constants.ok()) << constants.status().ToString();
  EXPECT_EQ(constants->num_layers(), 0);
}

TEST(EngramHashConstantsTest, RejectsPadClassOutsideTheClasses) {
  Result<EngramHashConstants> constants =
      ComputeEngramHashConstants(ReleasedConfig(), 99092, 99092);
  ASSERT_FALSE(constants.ok());
  EXPECT_THAT(constants.status().message(), HasSubstr("pad class 99092"));
}

TEST(EngramHashConstantsTest, RejectsTokenMapWithWrongClassCount) {
  EngramTokenMap map;
  map.class_of_token = {0, 1, 2, 2};
  map.num_classes = 3;
  Result<EngramHashConstants> constants = ComputeEngramHashConstants(ReleasedConfig(), map);
  ASSERT_FALSE(constants.ok());
  EXPECT_THAT(constants.status().message(), HasSubstr("99092"));
}

// Every tiny golden checkpoint: config + the token map built from its tokenizer.json reproduce
// its engram_constants.json.
TEST(EngramHashConstantsTest, GoldenEngramConstantsMatch) {
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

    Result<Json> golden = ReadJsonFile(kGoldens + "cases/" + name + "/engram_constants.json");
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    const Json& g = *golden;
    EXPECT_EQ(map->num_classes, g["compressed_vocab_size"].get<int64_t>());
    EXPECT_EQ(constants->max_ngram_size, g["max_ngram_size"].get<int32_t>());
    EXPECT_EQ(constants->n_heads, g["n_heads"].get<int32_t>());
    EXPECT_EQ(constants->pad_class_id, g["pad_compressed_id"].get<int32_t>());
    ASSERT_EQ(constants->layers.size(), g["layer_ids"].size());
    for (size_t i = 0; i < constants->layers.size(); ++i) {
      const EngramLayerHashConstants& layer = constants->layers[i];
      EXPECT_EQ(layer.layer_id, g["layer_ids"][i].get<int32_t>());
      EXPECT_EQ(layer.multipliers, g["multipliers"][i].get<std::vector<int64_t>>());
      std::vector<int64_t> primes;  // golden: [layer][order][head]
      for (const Json& order : g["primes"][i]) {
        for (const Json& prime : order) primes.push_back(prime.get<int64_t>());
      }
      EXPECT_EQ(layer.primes, primes);
      EXPECT_EQ(layer.offsets, g["offsets"][i].get<std::vector<int64_t>>());
      EXPECT_EQ(layer.num_rows, g["row_counts"][i].get<int64_t>());
    }
  }
}

}  // namespace
}  // namespace dsv41

#include "config/engram_primes.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "base/json.h"
#include "config/config.h"

namespace dsv41 {
namespace {

const std::string kGoldens = std::string(DSV41_SHARED_DIR) + "/goldens/model/";

// model.md §9.3, typed from the spec.
TEST(EngramPrimesTest, ReleasedPrimesOffsetsAndSumsMatchSpec) {
  const std::vector<int64_t> primes1 = {16000057, 16000079, 16000081, 16000097, 16000121, 16000129,
                                        16000133, 16000183, 16000189, 16000207, 16000211, 16000253,
                                        16000277, 16000289, 16000307, 16000321, 16000339, 16000381,
                                        16000393, 16000399, 16000403, 16000409, 16000447, 16000463};
  const std::vector<int64_t> primes14 = {
      16000477, 16000487, 16000499, 16000507, 16000511, 16000573, 16000609, 16000627,
      16000667, 16000669, 16000693, 16000697, 16000711, 16000729, 16000759, 16000769,
      16000781, 16000799, 16000813, 16000819, 16000841, 16000877, 16000879, 16000889};
  const std::vector<int64_t> offsets1 = {
      0,         16000057,  32000136,  48000217,  64000314,  80000435,  96000564,  112000697,
      128000880, 144001069, 160001276, 176001487, 192001740, 208002017, 224002306, 240002613,
      256002934, 272003273, 288003654, 304004047, 320004446, 336004849, 352005258, 368005705};
  const std::vector<int64_t> offsets14 = {
      0,         16000477,  32000964,  48001463,  64001970,  80002481,  96003054,  112003663,
      128004290, 144004957, 160005626, 176006319, 192007016, 208007727, 224008456, 240009215,
      256009984, 272010765, 288011564, 304012377, 320013196, 336014037, 352014914, 368015793};
  Result<std::vector<EngramLayerPrimes>> layers = ComputeEngramPrimes({1, 14}, 4, 8, 16000000);
  ASSERT_TRUE(layers.ok()) << layers.status().ToString();
  ASSERT_EQ(layers->size(), 2u);
  EXPECT_EQ((*layers)[0].layer_id, 1);
  EXPECT_EQ((*layers)[0].primes, primes1);
  EXPECT_EQ((*layers)[0].offsets, offsets1);
  EXPECT_EQ((*layers)[0].num_rows, 384006168);
  EXPECT_EQ((*layers)[1].layer_id, 14);
  EXPECT_EQ((*layers)[1].primes, primes14);
  EXPECT_EQ((*layers)[1].offsets, offsets14);
  EXPECT_EQ((*layers)[1].num_rows, 384016682);
}

// checkpoint.md §8.2's suggested fixture: start 31, layers [1, 4], orders 2..4, 2 heads.
TEST(EngramPrimesTest, SuggestedFixturePrimesMatchCheckpointSpec) {
  Result<std::vector<EngramLayerPrimes>> layers = ComputeEngramPrimes({1, 4}, 4, 2, 31);
  ASSERT_TRUE(layers.ok());
  EXPECT_EQ((*layers)[0].primes, (std::vector<int64_t>{31, 37, 41, 43, 47, 53}));
  EXPECT_EQ((*layers)[0].num_rows, 252);
  EXPECT_EQ((*layers)[1].primes, (std::vector<int64_t>{59, 61, 67, 71, 73, 79}));
  EXPECT_EQ((*layers)[1].num_rows, 410);
}

TEST(EngramPrimesTest, GoldenEngramConstantsMatch) {
  for (const char* name : {"tiny-a", "tiny-b", "tiny-c"}) {
    SCOPED_TRACE(name);
    Result<ModelConfig> config = LoadModelConfig(kGoldens + "checkpoints/" + name);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    Result<Json> golden = ReadJsonFile(kGoldens + "cases/" + name + "/engram_constants.json");
    ASSERT_TRUE(golden.ok()) << golden.status().ToString();
    const Json& g = *golden;
    Result<std::vector<EngramLayerPrimes>> layers =
        ComputeEngramPrimes(config->engram_layer_ids, config->engram_max_ngram_size,
                            config->engram_n_heads, config->engram_vocab_size);
    ASSERT_TRUE(layers.ok()) << layers.status().ToString();
    ASSERT_EQ(layers->size(), g["layer_ids"].size());
    for (size_t i = 0; i < layers->size(); ++i) {
      const EngramLayerPrimes& layer = (*layers)[i];
      EXPECT_EQ(layer.layer_id, g["layer_ids"][i].get<int32_t>());
      std::vector<int64_t> primes;  // golden: [layer][order][head]
      for (const Json& order : g["primes"][i]) {
        for (const Json& prime : order) primes.push_back(prime.get<int64_t>());
      }
      EXPECT_EQ(layer.primes, primes);
      EXPECT_EQ(layer.offsets, g["offsets"][i].get<std::vector<int64_t>>());
      EXPECT_EQ(layer.num_rows, g["row_counts"][i].get<int64_t>());
      EXPECT_EQ(layer.num_rows, config->engram_num_embeddings[i]);
    }
  }
}

TEST(EngramPrimesTest, IsPrimeAgreesWithASieveBelowTwentyThousand) {
  constexpr int kLimit = 20000;
  std::vector<bool> composite(kLimit, false);
  for (int i = 2; i * i < kLimit; ++i) {
    if (composite[i]) continue;
    for (int j = i * i; j < kLimit; j += i) composite[j] = true;
  }
  for (int n = -3; n < kLimit; ++n) {
    const bool want = n >= 2 && !composite[n];
    ASSERT_EQ(IsPrime(n), want) << n;
  }
}

TEST(EngramPrimesTest, IsPrimeHandlesLargeValues) {
  EXPECT_TRUE(IsPrime(2305843009213693951LL));                 // 2^61 - 1, a Mersenne prime
  EXPECT_TRUE(IsPrime(9223372036854775783LL));                 // 2^63 - 25, the largest int64 prime
  EXPECT_FALSE(IsPrime(std::numeric_limits<int64_t>::max()));  // 7^2 * 73 * 127 * ...
  EXPECT_FALSE(IsPrime(3215031751LL));  // strong pseudoprime to bases 2, 3, 5, 7
  EXPECT_FALSE(IsPrime(1000000007LL * 998244353LL));
}

TEST(EngramPrimesTest, BadParametersAreRejected) {
  EXPECT_FALSE(ComputeEngramPrimes({1}, 1, 8, 100).ok());
  EXPECT_FALSE(ComputeEngramPrimes({1}, 4, 0, 100).ok());
  EXPECT_FALSE(ComputeEngramPrimes({1}, 4, 8, 0).ok());
  // No prime above 2^63 - 25 fits in int64.
  EXPECT_FALSE(ComputeEngramPrimes({1}, 2, 2, 9223372036854775783LL).ok());
  Result<std::vector<EngramLayerPrimes>> none = ComputeEngramPrimes({}, 4, 8, 100);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace dsv41

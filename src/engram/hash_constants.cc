#include "engram/hash_constants.h"

#include <algorithm>
#include <limits>

#include "base/check.h"
#include "config/engram_primes.h"
#include "engram/numpy_random.h"

namespace dsv41 {

// The reference seeds each layer's generator with this multiple of the layer index.
constexpr int64_t kEngramSeedPerLayer = 10007;

std::vector<int64_t> ComputeEngramMultipliers(int32_t layer_id, int32_t max_ngram_size,
                                              int64_t compressed_vocab_size) {
  DSV41_CHECK(layer_id >= 0 && max_ngram_size >= 1 && compressed_vocab_size >= 1,
              "layer %d, max_ngram_size %d, compressed vocab %lld", layer_id, max_ngram_size,
              static_cast<long long>(compressed_vocab_size));
  const int64_t bound =
      std::max<int64_t>(1, std::numeric_limits<int64_t>::max() / compressed_vocab_size / 2);
  NumpyPcg64 generator(static_cast<uint64_t>(kEngramSeedPerLayer * layer_id));
  std::vector<int64_t> multipliers(static_cast<size_t>(max_ngram_size));
  NumpyIntegers(generator, 0, bound, multipliers);
  // R < bound <= INT64_MAX / 2, so 2·R + 1 cannot overflow.
  for (int64_t& m : multipliers) m = 2 * m + 1;
  return multipliers;
}

Result<EngramHashConstants> ComputeEngramHashConstants(const ModelConfig& config,
                                                       int64_t compressed_vocab_size,
                                                       int32_t pad_class_id) {
  if (compressed_vocab_size < 1) {
    return InvalidArgumentError("engram compressed vocab size %lld; want >= 1",
                                static_cast<long long>(compressed_vocab_size));
  }
  if (pad_class_id < 0 || pad_class_id >= compressed_vocab_size) {
    return InvalidArgumentError("engram pad class %d is outside the %lld compressed classes",
                                pad_class_id, static_cast<long long>(compressed_vocab_size));
  }
  for (const int32_t layer_id : config.engram_layer_ids) {
    if (layer_id < 0) {
      return InvalidArgumentError("engram_layer_ids: layer %d is negative", layer_id);
    }
  }
  EngramHashConstants constants;
  constants.max_ngram_size = config.engram_max_ngram_size;
  constants.n_heads = config.engram_n_heads;
  constants.pad_class_id = pad_class_id;
  if (config.engram_layer_ids.empty()) return constants;
  DSV41_ASSIGN_OR_RETURN(std::vector<EngramLayerPrimes> primes,
                         ComputeEngramPrimes(config.engram_layer_ids, config.engram_max_ngram_size,
                                             config.engram_n_heads, config.engram_vocab_size));
  for (EngramLayerPrimes& layer : primes) {
    EngramLayerHashConstants& out = constants.layers.emplace_back();
    out.layer_id = layer.layer_id;
    out.multipliers = ComputeEngramMultipliers(layer.layer_id, config.engram_max_ngram_size,
                                               compressed_vocab_size);
    out.primes = std::move(layer.primes);
    out.offsets = std::move(layer.offsets);
    out.num_rows = layer.num_rows;
  }
  return constants;
}

Result<EngramHashConstants> ComputeEngramHashConstants(const ModelConfig& config,
                                                       const EngramTokenMap& token_map) {
  DSV41_RETURN_IF_ERROR(CheckClassCount(token_map, config.engram_compressed_vocab_size));
  const int32_t pad_token = config.engram_pad_token_id;
  if (pad_token < 0 || static_cast<size_t>(pad_token) >= token_map.class_of_token.size()) {
    return InvalidArgumentError("engram_pad_token_id %d is not in the token map of %zu tokens",
                                pad_token, token_map.class_of_token.size());
  }
  return ComputeEngramHashConstants(config, token_map.num_classes,
                                    token_map.class_of_token[static_cast<size_t>(pad_token)]);
}

}  // namespace dsv41

#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "config/config.h"
#include "engram/token_map.h"

namespace dsv41 {

// The hash constants of one Engram layer (model.md §9.3). Integers throughout: the multipliers
// exceed a double's 53 bits.
struct EngramLayerHashConstants {
  int32_t layer_id = 0;  // absolute backbone layer index
  // [max_ngram_size]: odd, and small enough that class_id · multiplier fits int64.
  std::vector<int64_t> multipliers;
  // [(max_ngram_size − 1) · n_heads] in column order (order-major, head-minor): each column's
  // prime bucket count and first table row.
  std::vector<int64_t> primes;
  std::vector<int64_t> offsets;
  int64_t num_rows = 0;  // sum of `primes`: the layer's table row count

  bool operator==(const EngramLayerHashConstants&) const = default;
};

// The constants of every Engram layer, in engram_layer_ids order (= engram_slot order).
struct EngramHashConstants {
  int32_t max_ngram_size = 0;  // G: orders 2..G, G lookback ids
  int32_t n_heads = 0;         // H
  int32_t pad_class_id = 0;    // class id standing in before the sequence start and across DEAD
  std::vector<EngramLayerHashConstants> layers;

  int32_t num_cols() const { return (max_ngram_size - 1) * n_heads; }
  int32_t num_layers() const { return static_cast<int32_t>(layers.size()); }

  bool operator==(const EngramHashConstants&) const = default;
};

// Multipliers of one layer: 2·R + 1 with R = numpy default_rng(10007 · layer_id).integers(0,
// bound, size=max_ngram_size, dtype=int64), bound = max(1, (INT64_MAX // compressed_vocab) // 2).
// Requires layer_id >= 0, max_ngram_size >= 1, compressed_vocab_size >= 1 (caller bugs otherwise).
std::vector<int64_t> ComputeEngramMultipliers(int32_t layer_id, int32_t max_ngram_size,
                                              int64_t compressed_vocab_size);

// Every Engram layer's primes, offsets (config/engram_primes.h) and multipliers, for any config.
// `compressed_vocab_size` is the token map's class count and `pad_class_id` the class of
// engram_pad_token_id. InvalidArgument when the config's Engram fields are out of range or
// pad_class_id is not in [0, compressed_vocab_size).
Result<EngramHashConstants> ComputeEngramHashConstants(const ModelConfig& config,
                                                       int64_t compressed_vocab_size,
                                                       int32_t pad_class_id);

// The same from the token map: checks its class count against engram_compressed_vocab_size
// (CheckClassCount) and takes the pad class from it.
Result<EngramHashConstants> ComputeEngramHashConstants(const ModelConfig& config,
                                                       const EngramTokenMap& token_map);

}  // namespace dsv41

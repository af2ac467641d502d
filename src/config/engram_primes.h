#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace dsv41 {

// The prime-sized bucket ranges of one Engram layer (model.md §9.3).
struct EngramLayerPrimes {
  int32_t layer_id = 0;
  // (max_ngram_size − 1) × n_heads primes in column order: order-major, head-minor
  // (column = (order − 2) × n_heads + head).
  std::vector<int64_t> primes;
  // Exclusive prefix sums of `primes`: the first table row of each column.
  std::vector<int64_t> offsets;
  // Sum of `primes`: the table's row count (must equal engram_num_embeddings[slot]).
  int64_t num_rows = 0;

  bool operator==(const EngramLayerPrimes&) const = default;
};

// Hands out the primes of every Engram layer as the reference does: layers in `layer_ids` order,
// orders 2..max_ngram_size, for each order start from `vocab_size − 1` and take `n_heads` times
// the smallest prime above the previous one that no column of the model has taken yet (one "seen"
// set for the whole model). InvalidArgument when a parameter is out of range (max_ngram_size < 2,
// n_heads < 1, vocab_size < 1) or a prime or row sum would exceed int64.
Result<std::vector<EngramLayerPrimes>> ComputeEngramPrimes(const std::vector<int32_t>& layer_ids,
                                                           int32_t max_ngram_size, int32_t n_heads,
                                                           int64_t vocab_size);

// True when `n` is prime (deterministic for every int64).
bool IsPrime(int64_t n);

}  // namespace dsv41

#include "engram/row_ids.h"

#include <vector>

#include "base/check.h"

namespace dsv41 {

Status MapTokensToEngramClasses(const EngramTokenMap& token_map, std::span<const int32_t> token_ids,
                                std::span<int32_t> class_ids) {
  DSV41_CHECK(class_ids.size() == token_ids.size(), "%zu class slots for %zu tokens",
              class_ids.size(), token_ids.size());
  const size_t vocab = token_map.class_of_token.size();
  for (size_t i = 0; i < token_ids.size(); ++i) {
    const int32_t token = token_ids[i];
    if (token < 0 || static_cast<size_t>(token) >= vocab) {
      return InvalidArgumentError("position %zu: token id %d is outside the engram token map (%zu)",
                                  i, token, vocab);
    }
    class_ids[i] = token_map.class_of_token[static_cast<size_t>(token)];
  }
  return OkStatus();
}

void EngramLookback(std::span<const int32_t> class_ids, std::span<const uint8_t> dead, int64_t pos,
                    int32_t pad_class_id, std::span<int64_t> x) {
  DSV41_DCHECK(pos >= 0 && static_cast<size_t>(pos) < class_ids.size(), "position %lld of %zu",
               static_cast<long long>(pos), class_ids.size());
  DSV41_DCHECK(dead.empty() || dead.size() == class_ids.size(), "%zu dead flags for %zu ids",
               dead.size(), class_ids.size());
  bool blocked = false;
  for (size_t s = 0; s < x.size(); ++s) {
    const int64_t q = pos - static_cast<int64_t>(s);
    blocked = blocked || q < 0 || (!dead.empty() && dead[static_cast<size_t>(q)] != 0);
    x[s] = blocked ? pad_class_id : class_ids[static_cast<size_t>(q)];
  }
}

void HashEngramLookback(const EngramLayerHashConstants& layer, int32_t n_heads,
                        std::span<const int64_t> x, std::span<int64_t> rows) {
  const size_t g = layer.multipliers.size();
  const size_t h = static_cast<size_t>(n_heads);
  DSV41_DCHECK(x.size() == g && rows.size() == (g - 1) * h && layer.primes.size() == rows.size(),
               "x %zu, rows %zu, primes %zu for G %zu, H %zu", x.size(), rows.size(),
               layer.primes.size(), g, h);
  uint64_t hash = static_cast<uint64_t>(x[0]) * static_cast<uint64_t>(layer.multipliers[0]);
  for (size_t n = 1; n < g; ++n) {
    hash ^= static_cast<uint64_t>(x[n]) * static_cast<uint64_t>(layer.multipliers[n]);
    for (size_t k = 0; k < h; ++k) {
      const size_t col = (n - 1) * h + k;
      rows[col] = static_cast<int64_t>(hash % static_cast<uint64_t>(layer.primes[col])) +
                  layer.offsets[col];
    }
  }
}

void ComputeEngramRows(const EngramHashConstants& constants, std::span<const int32_t> class_ids,
                       std::span<const uint8_t> dead, int64_t first_pos, int64_t num_pos,
                       std::span<int64_t> out) {
  const size_t num_layers = constants.layers.size();
  const size_t num_cols = static_cast<size_t>(constants.num_cols());
  DSV41_CHECK(first_pos >= 0 && num_pos >= 0 &&
                  static_cast<size_t>(first_pos + num_pos) <= class_ids.size(),
              "positions [%lld, %lld) of %zu class ids", static_cast<long long>(first_pos),
              static_cast<long long>(first_pos + num_pos), class_ids.size());
  DSV41_CHECK(dead.empty() || dead.size() == class_ids.size(), "%zu dead flags for %zu ids",
              dead.size(), class_ids.size());
  DSV41_CHECK(out.size() == static_cast<size_t>(num_pos) * num_layers * num_cols,
              "out has %zu entries; want %lld x %zu x %zu", out.size(),
              static_cast<long long>(num_pos), num_layers, num_cols);
  // The lookback ids of one position (G <= kMaxEngramNgramSize of them).
  DSV41_CHECK(constants.max_ngram_size <= kMaxEngramNgramSize, "max_ngram_size %d > %d",
              constants.max_ngram_size, kMaxEngramNgramSize);
  int64_t lookback[kMaxEngramNgramSize];
  const std::span<int64_t> x(lookback, static_cast<size_t>(constants.max_ngram_size));
  for (int64_t i = 0; i < num_pos; ++i) {
    EngramLookback(class_ids, dead, first_pos + i, constants.pad_class_id, x);
    for (size_t l = 0; l < num_layers; ++l) {
      const size_t begin = (static_cast<size_t>(i) * num_layers + l) * num_cols;
      HashEngramLookback(constants.layers[l], constants.n_heads, x, out.subspan(begin, num_cols));
    }
  }
}

}  // namespace dsv41

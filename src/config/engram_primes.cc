#include "config/engram_primes.h"

#include <limits>
#include <unordered_set>

namespace dsv41 {
namespace {

__extension__ typedef unsigned __int128 Uint128;

uint64_t MulMod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<Uint128>(a) * b % m);
}

uint64_t PowMod(uint64_t base, uint64_t exp, uint64_t m) {
  uint64_t result = 1;
  base %= m;
  while (exp > 0) {
    if (exp & 1) result = MulMod(result, base, m);
    base = MulMod(base, base, m);
    exp >>= 1;
  }
  return result;
}

}  // namespace

bool IsPrime(int64_t n) {
  if (n < 2) return false;
  const uint64_t u = static_cast<uint64_t>(n);
  // These 12 bases make Miller-Rabin deterministic below 3.3e24, so for every 64-bit value.
  static constexpr uint64_t kBases[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  for (const uint64_t p : kBases) {
    if (u % p == 0) return u == p;
  }
  uint64_t d = u - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  for (const uint64_t a : kBases) {
    uint64_t x = PowMod(a, d, u);
    if (x == 1 || x == u - 1) continue;
    bool composite = true;
    for (int i = 1; i < s; ++i) {
      x = MulMod(x, x, u);
      if (x == u - 1) {
        composite = false;
        break;
      }
    }
    if (composite) return false;
  }
  return true;
}

Result<std::vector<EngramLayerPrimes>> ComputeEngramPrimes(const std::vector<int32_t>& layer_ids,
                                                           int32_t max_ngram_size, int32_t n_heads,
                                                           int64_t vocab_size) {
  if (layer_ids.empty()) return std::vector<EngramLayerPrimes>{};
  if (max_ngram_size < 2) {
    return InvalidArgumentError("engram_max_ngram_size: %d, want >= 2 (orders 2..n)",
                                max_ngram_size);
  }
  if (n_heads < 1) return InvalidArgumentError("engram_n_heads: %d, want >= 1", n_heads);
  if (vocab_size < 1) {
    return InvalidArgumentError("engram_vocab_size: %lld, want >= 1",
                                static_cast<long long>(vocab_size));
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  std::unordered_set<int64_t> seen;
  std::vector<EngramLayerPrimes> layers;
  layers.reserve(layer_ids.size());
  for (const int32_t layer_id : layer_ids) {
    EngramLayerPrimes layer;
    layer.layer_id = layer_id;
    for (int32_t order = 2; order <= max_ngram_size; ++order) {
      int64_t cur = vocab_size - 1;
      for (int32_t head = 0; head < n_heads; ++head) {
        do {
          if (cur == kMax) {
            return InvalidArgumentError("engram_vocab_size: %lld: primes exceed int64",
                                        static_cast<long long>(vocab_size));
          }
          ++cur;
        } while (!IsPrime(cur) || seen.count(cur) != 0);
        seen.insert(cur);
        if (layer.num_rows > kMax - cur) {
          return InvalidArgumentError("engram_vocab_size: %lld: table rows exceed int64",
                                      static_cast<long long>(vocab_size));
        }
        layer.offsets.push_back(layer.num_rows);
        layer.primes.push_back(cur);
        layer.num_rows += cur;
      }
    }
    layers.push_back(std::move(layer));
  }
  return layers;
}

}  // namespace dsv41

#include "engram/numpy_random.h"

#include <limits>

#include "base/check.h"

namespace dsv41 {
namespace {

__extension__ typedef unsigned __int128 Uint128;

// SeedSequence's hashing constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;  // half the bits of a 32-bit word

// PCG64's 128-bit LCG multiplier.
constexpr uint64_t kPcgMultHigh = 2549297995355413924ull;
constexpr uint64_t kPcgMultLow = 4865540595714422341ull;

Uint128 Join(uint64_t high, uint64_t low) { return (Uint128{high} << 64) | low; }

// One word through the entropy hash; `hash_const` advances with every call.
uint32_t HashMix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

std::vector<uint32_t> IntToWords(uint64_t n) {
  std::vector<uint32_t> words;
  if (n == 0) words.push_back(0);
  while (n > 0) {
    words.push_back(static_cast<uint32_t>(n));
    n >>= 32;
  }
  return words;
}

}  // namespace

NumpySeedSequence::NumpySeedSequence(uint64_t entropy)
    : NumpySeedSequence(std::span<const uint32_t>(IntToWords(entropy))) {}

NumpySeedSequence::NumpySeedSequence(std::span<const uint32_t> entropy_words) {
  uint32_t hash_const = kInitA;
  // Fill the pool from the entropy, running the hash on zeros past its end.
  for (size_t i = 0; i < kPoolSize; ++i) {
    pool_[i] = HashMix(i < entropy_words.size() ? entropy_words[i] : 0u, hash_const);
  }
  // Every pool word into every other, so late words affect early ones.
  for (size_t src = 0; src < kPoolSize; ++src) {
    for (size_t dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool_[dst] = Mix(pool_[dst], HashMix(pool_[src], hash_const));
    }
  }
  // Entropy beyond the pool: each word into every pool word.
  for (size_t src = kPoolSize; src < entropy_words.size(); ++src) {
    for (size_t dst = 0; dst < kPoolSize; ++dst) {
      pool_[dst] = Mix(pool_[dst], HashMix(entropy_words[src], hash_const));
    }
  }
}

std::vector<uint32_t> NumpySeedSequence::GenerateState32(size_t num_words) const {
  std::vector<uint32_t> state(num_words);
  uint32_t hash_const = kInitB;
  for (size_t i = 0; i < num_words; ++i) {
    uint32_t value = pool_[i % kPoolSize];
    value ^= hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    value ^= value >> kXShift;
    state[i] = value;
  }
  return state;
}

std::vector<uint64_t> NumpySeedSequence::GenerateState64(size_t num_words) const {
  const std::vector<uint32_t> words = GenerateState32(2 * num_words);
  std::vector<uint64_t> state(num_words);
  for (size_t i = 0; i < num_words; ++i) {
    state[i] = uint64_t{words[2 * i]} | (uint64_t{words[2 * i + 1]} << 32);
  }
  return state;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) : NumpyPcg64(NumpySeedSequence(seed)) {}

NumpyPcg64::NumpyPcg64(const NumpySeedSequence& seed_sequence) {
  // numpy takes four 64-bit words: the initial state (high, low), then the stream (high, low).
  const std::vector<uint64_t> words = seed_sequence.GenerateState64(4);
  Seed(words[0], words[1], words[2], words[3]);
}

void NumpyPcg64::Seed(uint64_t init_high, uint64_t init_low, uint64_t seq_high, uint64_t seq_low) {
  const Uint128 inc = (Join(seq_high, seq_low) << 1) | 1u;
  inc_high_ = static_cast<uint64_t>(inc >> 64);
  inc_low_ = static_cast<uint64_t>(inc);
  state_high_ = 0;
  state_low_ = 0;
  Step();
  const Uint128 state = Join(state_high_, state_low_) + Join(init_high, init_low);
  state_high_ = static_cast<uint64_t>(state >> 64);
  state_low_ = static_cast<uint64_t>(state);
  Step();
  has_uint32_ = false;
  buffered_uint32_ = 0;
}

void NumpyPcg64::Step() {
  const Uint128 state =
      Join(state_high_, state_low_) * Join(kPcgMultHigh, kPcgMultLow) + Join(inc_high_, inc_low_);
  state_high_ = static_cast<uint64_t>(state >> 64);
  state_low_ = static_cast<uint64_t>(state);
}

uint64_t NumpyPcg64::NextUint64() {
  Step();
  // XSL-RR: xor the halves, rotate right by the top 6 bits of the state.
  const uint64_t folded = state_high_ ^ state_low_;
  const unsigned rotation = static_cast<unsigned>(state_high_ >> 58);
  return (folded >> rotation) | (folded << ((64u - rotation) & 63u));
}

uint32_t NumpyPcg64::NextUint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return buffered_uint32_;
  }
  const uint64_t next = NextUint64();
  has_uint32_ = true;
  buffered_uint32_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

double NumpyPcg64::NextDouble() {
  return static_cast<double>(NextUint64() >> 11) * (1.0 / 9007199254740992.0);
}

namespace {

// A value in [0, range] (inclusive, range < 2^64 − 1) from 64-bit draws: the high half of
// draw · (range + 1), rejecting low halves below 2^64 mod (range + 1).
uint64_t BoundedLemire64(NumpyPcg64& generator, uint64_t range) {
  const uint64_t range_excl = range + 1;
  Uint128 product = Uint128{generator.NextUint64()} * range_excl;
  uint64_t leftover = static_cast<uint64_t>(product);
  if (leftover < range_excl) {
    const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - range) % range_excl;
    while (leftover < threshold) {
      product = Uint128{generator.NextUint64()} * range_excl;
      leftover = static_cast<uint64_t>(product);
    }
  }
  return static_cast<uint64_t>(product >> 64);
}

// The same with 32-bit draws, for range < 2^32 − 1.
uint32_t BoundedLemire32(NumpyPcg64& generator, uint32_t range) {
  const uint32_t range_excl = range + 1;
  uint64_t product = uint64_t{generator.NextUint32()} * range_excl;
  uint32_t leftover = static_cast<uint32_t>(product);
  if (leftover < range_excl) {
    const uint32_t threshold = (std::numeric_limits<uint32_t>::max() - range) % range_excl;
    while (leftover < threshold) {
      product = uint64_t{generator.NextUint32()} * range_excl;
      leftover = static_cast<uint32_t>(product);
    }
  }
  return static_cast<uint32_t>(product >> 32);
}

}  // namespace

void NumpyIntegers(NumpyPcg64& generator, int64_t low, int64_t high, std::span<int64_t> out) {
  DSV41_CHECK(low < high, "integers(%lld, %lld): empty range", static_cast<long long>(low),
              static_cast<long long>(high));
  // numpy draws in [0, range] and adds `offset`, all modulo 2^64.
  const uint64_t offset = static_cast<uint64_t>(low);
  const uint64_t range = static_cast<uint64_t>(high) - offset - 1;
  constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
  constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
  for (int64_t& value : out) {
    uint64_t draw = 0;
    if (range == 0) {
      draw = 0;
    } else if (range == kMax32) {
      draw = generator.NextUint32();
    } else if (range < kMax32) {
      draw = BoundedLemire32(generator, static_cast<uint32_t>(range));
    } else if (range == kMax64) {
      draw = generator.NextUint64();
    } else {
      draw = BoundedLemire64(generator, range);
    }
    value = static_cast<int64_t>(offset + draw);
  }
}

}  // namespace dsv41

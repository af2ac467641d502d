#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace dsv41 {

// numpy's random number generation as far as the Engram hash multipliers need it (model.md §9.3):
// `numpy.random.default_rng(seed)` is a PCG64 generator seeded through a SeedSequence, and
// `Generator.integers(low, high, size, dtype=np.int64)` maps its outputs into a range with
// Lemire's multiply-shift rejection. The streams reproduce numpy's bit for bit.

// numpy.random.SeedSequence(entropy) with the default pool of four 32-bit words and no spawn key.
class NumpySeedSequence {
 public:
  static constexpr size_t kPoolSize = 4;

  // Entropy as numpy takes a non-negative Python int: its 32-bit words, least significant first.
  explicit NumpySeedSequence(uint64_t entropy);
  explicit NumpySeedSequence(std::span<const uint32_t> entropy_words);

  // generate_state(num_words, np.uint32).
  std::vector<uint32_t> GenerateState32(size_t num_words) const;
  // generate_state(num_words, np.uint64): pairs of 32-bit words, the first one low.
  std::vector<uint64_t> GenerateState64(size_t num_words) const;

  const std::array<uint32_t, kPoolSize>& pool() const { return pool_; }

 private:
  std::array<uint32_t, kPoolSize> pool_{};
};

// numpy.random.PCG64: a 128-bit LCG (numpy's multiplier) with the XSL-RR 64-bit output of the
// state after each step. Not thread-safe (one owner).
class NumpyPcg64 {
 public:
  // numpy.random.default_rng(seed) / PCG64(seed): seeded from SeedSequence(seed).
  explicit NumpyPcg64(uint64_t seed);
  explicit NumpyPcg64(const NumpySeedSequence& seed_sequence);

  uint64_t NextUint64();
  // numpy's 32-bit draw: the low half of a 64-bit output, then its high half on the next call.
  uint32_t NextUint32();
  // Generator.random(): (NextUint64() >> 11) · 2^-53.
  double NextDouble();

  // The 128-bit state and increment (numpy's bit_generator.state["state"]["state"/"inc"]).
  uint64_t state_high() const { return state_high_; }
  uint64_t state_low() const { return state_low_; }
  uint64_t inc_high() const { return inc_high_; }
  uint64_t inc_low() const { return inc_low_; }

 private:
  void Seed(uint64_t init_high, uint64_t init_low, uint64_t seq_high, uint64_t seq_low);
  void Step();

  uint64_t state_high_ = 0;
  uint64_t state_low_ = 0;
  uint64_t inc_high_ = 0;
  uint64_t inc_low_ = 0;
  bool has_uint32_ = false;
  uint32_t buffered_uint32_ = 0;
};

// Generator.integers(low, high, size=out.size(), dtype=np.int64) with the default
// endpoint=False: values in [low, high − 1], numpy's unmasked (Lemire) path, including its switch
// to 32-bit draws when high − 1 − low fits in 32 bits. Requires low < high (a caller bug
// otherwise).
void NumpyIntegers(NumpyPcg64& generator, int64_t low, int64_t high, std::span<int64_t> out);

}  // namespace dsv41

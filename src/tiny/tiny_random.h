#pragma once

#include <cstdint>
#include <string_view>

namespace dsv41 {

// SplitMix64: a tiny, platform-independent generator, so a synthetic checkpoint is the same bytes
// for a seed everywhere (std:: distributions are implementation-defined).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0); the modulo bias is irrelevant for synthetic data.
  uint64_t NextBelow(uint64_t n) { return Next() % n; }
  // Uniform in [-1, 1) with 24 random bits (exact in fp32).
  float NextSigned() {
    return static_cast<float>(static_cast<int64_t>(Next() >> 40) - (int64_t{1} << 23)) *
           (1.0f / static_cast<float>(int64_t{1} << 23));
  }

 private:
  uint64_t state_;
};

// FNV-1a of `text` mixed with `seed`: one independent stream per tensor name.
inline uint64_t StreamSeed(uint64_t seed, std::string_view text) {
  uint64_t h = 0xCBF29CE484222325ull ^ seed;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

}  // namespace dsv41

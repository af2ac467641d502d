#include "vision/patches.h"

#include <array>

#include "base/check.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

std::array<float, 256> MakeNormalizeTable() {
  std::array<float, 256> table;
  for (int v = 0; v < 256; ++v) {
    table[v] = Bf16Round((static_cast<float>(v) / 255.0f - 0.5f) / 0.5f);
  }
  return table;
}

}  // namespace

float NormalizePixel(uint8_t value) {
  static const std::array<float, 256> table = MakeNormalizeTable();
  return table[value];
}

void ExtractPatches(std::span<const uint8_t> canvas, int32_t bw, int32_t bh, int32_t patch_size,
                    std::span<float> out) {
  const int64_t p = patch_size;
  DSV41_CHECK(p >= 1 && bw % p == 0 && bh % p == 0 &&
                  canvas.size() == static_cast<size_t>(bw) * bh * 3 && out.size() == canvas.size(),
              "patches of %d x %d by %d: canvas %zu, out %zu", bw, bh, patch_size, canvas.size(),
              out.size());
  const int64_t cols = bw / p;
  const int64_t patch_values = 3 * p * p;
  for (int64_t y = 0; y < bh; ++y) {
    const int64_t i = y / p;
    const int64_t py = y % p;
    for (int64_t x = 0; x < bw; ++x) {
      const int64_t j = x / p;
      const int64_t px = x % p;
      float* patch = out.data() + (i * cols + j) * patch_values + py * p + px;
      const uint8_t* pixel = canvas.data() + (y * bw + x) * 3;
      for (int64_t c = 0; c < 3; ++c) patch[c * p * p] = NormalizePixel(pixel[c]);
    }
  }
}

}  // namespace dsv41

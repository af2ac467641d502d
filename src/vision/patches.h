#pragma once

// Normalisation and patches (vision.md §7): each 8-bit channel value becomes
// bf16((fp32(u8) / fp32(255) − 0.5) / 0.5) (each operation fp32, correctly rounded), laid out per
// patch, row-major over the patch grid, each patch flattened (c, py, px).

#include <cstdint>
#include <span>

namespace dsv41 {

// The normalised value of one 8-bit channel value (a bf16 value held in a float).
float NormalizePixel(uint8_t value);

// Patches of a letterboxed canvas [bh, bw, 3] (bw, bh multiples of patch_size) into
// out[(bh / p) · (bw / p), 3 · p²]: patch n = i · (bw / p) + j holds index c · p² + py · p + px =
// channel c of canvas pixel (p · i + py, p · j + px). Sizes are checked (caller bugs otherwise).
void ExtractPatches(std::span<const uint8_t> canvas, int32_t bw, int32_t bh, int32_t patch_size,
                    std::span<float> out);

}  // namespace dsv41

#pragma once

// The interleaved rotary rotation of model.md §6.1 over many rows and heads, a scalar reference
// and a SIMD twin with the same bits. The angle tables (cos / sin per position) are the caller's
// (model/rope.h). For each pair (a, b) = (x[2i], x[2i+1]) of a head's trailing 2·half dims, with
// c = cos[i] and s = sin[i] (−sin[i] for the inverse):
//   a' = bf16(fp32(a·c) − fp32(b·s)), b' = bf16(fp32(a·s) + fp32(b·c)),
// every product rounded to fp32 on its own (no fused multiply-add). The leading dims are untouched.

#include <cstdint>
#include <span>

namespace dsv41 {

// x: [rows, heads, head_dim], rotated in place; cos, sin: [rows, half], row t's angles for every
// head of row t. head_dim = x.size() / (rows·heads) >= 2·half, half >= 1 (checked); rows may be 0.
void RopeRotateRowsRef(std::span<float> x, int64_t rows, int64_t heads, std::span<const float> cos,
                       std::span<const float> sin, bool inverse);
void RopeRotateRowsSimd(std::span<float> x, int64_t rows, int64_t heads, std::span<const float> cos,
                        std::span<const float> sin, bool inverse);

}  // namespace dsv41

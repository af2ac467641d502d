#pragma once

// The Engram fusion's elementwise work per stream (model.md §9.6), scalar references and SIMD
// twins with the same bits.

#include <cstddef>
#include <span>

namespace dsv41 {

// fp32(Σ_d fp32(fp32(h[d]·w[d])·k[d])): each term rounded twice in fp32 as written, their sum
// exact and rounded once. h, w, k of one length.
float EngramGateDotRef(std::span<const float> h, std::span<const float> w,
                       std::span<const float> k);
// The same; scratch holds at least h.size() floats (the terms, summed by ExactSumSimd).
float EngramGateDotSimd(std::span<const float> h, std::span<const float> w,
                        std::span<const float> k, std::span<float> scratch);

// h[d] = bf16(h[d] + fp32(g·v[d])) for every d.
void AddGatedRef(std::span<float> h, float g, std::span<const float> v);
void AddGatedSimd(std::span<float> h, float g, std::span<const float> v);

}  // namespace dsv41

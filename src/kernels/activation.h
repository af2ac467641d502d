#pragma once

// Elementwise activations with the canonical arithmetic of model.md §12.8 item 4: each has a
// scalar reference (…Ref, the numerics/arith.h functions in the spec's order) and a SIMD form that
// returns the same bits.

#include <cstdint>
#include <span>

namespace dsv41 {

// out[i] = CrExp(x[i]): exp evaluated in double, rounded once to fp32. The SIMD form evaluates a
// vector double exp (within 1 double ulp) and rounds it where both ends of its error interval
// round alike; the few other lanes take CrExp itself. out may alias x.
void CrExpSimd(std::span<const float> x, std::span<float> out);
void CrExpRef(std::span<const float> x, std::span<float> out);

// One SwiGLU element of model.md §8, before the bf16 rounding that precedes w2: g and u are the
// (bf16-valued) w1 and w3 outputs; with limit > 0, u = clamp(u, −limit, limit) and
// g = min(g, limit); returns weight · (silu(g) · u) in fp32, silu(g) = g / (1 + CrExp(−g)).
float SwigluActivation(float g, float u, float limit, float weight);

// The MoE hidden rows in place: g[r·n + j] = bf16(SwigluActivation(bf16(g), bf16(u), limit,
// weight[r])) for r < rows, j < n; weights empty means 1 for every row (the shared expert).
void SwigluRowsSimd(std::span<float> g, std::span<const float> u, int64_t rows, int64_t n,
                    std::span<const float> weights, float limit);
void SwigluRowsRef(std::span<float> g, std::span<const float> u, int64_t rows, int64_t n,
                   std::span<const float> weights, float limit);

}  // namespace dsv41

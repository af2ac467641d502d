#pragma once

// The hyper-connection stream combinations of model.md §4.3 (sequential fp32 sums in the spec's
// order, §12.8 item 3) over `hc` residual streams of `dim` values, as scalar references and SIMD
// twins with the same bits (the SIMD forms vectorise across d, each lane keeping the order).

#include <cstddef>
#include <cstdint>
#include <span>

namespace dsv41 {

// hc_pre: out[d] = bf16(((pi[0]·x[0][d] + pi[1]·x[1][d]) + ...) + pi[hc−1]·x[hc−1][d]).
// x: [hc, dim], pi: [hc], out: [dim].
void HcPreRef(std::span<const float> x, std::span<const float> pi, std::span<float> out);
void HcPreSimd(std::span<const float> x, std::span<const float> pi, std::span<float> out);

// hc_post: out[k][d] = bf16(post[k]·y[d] + ((C[0][k]·r[0][d] + C[1][k]·r[1][d]) + ...)) for
// k < hc. y: [dim], r, out: [hc, dim] (out may alias r), comb: C[i][k] at i·hc + k, post: [hc].
void HcPostRef(std::span<const float> y, std::span<const float> r, std::span<const float> comb,
               std::span<const float> post, std::span<float> out);
void HcPostSimd(std::span<const float> y, std::span<const float> r, std::span<const float> comb,
                std::span<const float> post, std::span<float> out);

}  // namespace dsv41

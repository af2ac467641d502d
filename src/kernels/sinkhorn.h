#pragma once

// Steps 7–9 of model.md §4.2 (the hyper-connection mix's Sinkhorn normalisation) on many small
// n×n matrices at once, a scalar reference and a SIMD twin with the same bits. Per matrix: row
// softmax (CrExp of c − row max, the max taken as `c > max ? c : max` from column 0, a sequential
// fp32 denominator) + eps, one column normalisation, then iters − 1 rounds of row then column
// normalisation, each dividing by fp32(sequential sum + eps).

#include <cstdint>
#include <span>

namespace dsv41 {

// The largest n the kernels take.
inline constexpr int32_t kSinkhornMaxN = 8;

// c: [count, n, n] row-major matrices (the affine logits on input), normalised in place.
// 1 <= n <= kSinkhornMaxN, iters >= 1, c.size() a multiple of n² (checked).
void SinkhornRef(std::span<float> c, int32_t n, int32_t iters, float eps);
// The same, vectorised across matrices (one matrix per lane).
void SinkhornSimd(std::span<float> c, int32_t n, int32_t iters, float eps);

}  // namespace dsv41

#pragma once

// SIMD forms of the exact sums of model.md §12.8 item 2, bit for bit equal to their scalar twins
// in numerics/arith.h (ExactDot, ExactDotColumn, ExactSum, ExactMeanSquare), which stay the
// reference.
//
// How: every term (an fp32 value, or the product of two, which is exact in double) is added into
// double-precision lane accumulators with fused multiply-adds (the product rounds only once, with
// the sum), beside the same accumulation of |terms|. The double result S differs from the exact
// sum E by at most (steps per lane + lanes + 2) · 2^-53 · Σ|terms|; when both ends of that
// interval round to the same non-zero fp32 value, so does E, and that value is returned. Otherwise
// (cancellation, a sum within the bound of an fp32 rounding boundary, a zero, an infinity or NaN)
// the scalar twin computes it exactly. So the result never depends on the path, the target or the
// order, and the slow path is rare.

#include <cstddef>
#include <span>

namespace dsv41 {

// fp32(Σ a[i]·b[i]), exactly rounded: ExactDot. a.size() == b.size() (checked).
float ExactDotSimd(std::span<const float> a, std::span<const float> b);
// The same with `a` given as the bytes of b.size() fp32 values at any address (a mapped
// checkpoint tensor, which safetensors does not align).
float ExactDotUnalignedSimd(std::span<const std::byte> a, std::span<const float> b);
// out[r] = ExactDotUnalignedSimd(row r of `rows`, b) for every r: `rows` holds out.size()
// consecutive rows of b.size() fp32 values at any address (the mHC mix weights); several rows
// share each pass over b (checked: the sizes agree).
void ExactDotsUnalignedSimd(std::span<const std::byte> rows, std::span<const float> b,
                            std::span<float> out);
// The same for several tokens: out[t * out_stride + r] = ExactDotUnalignedSimd(row r of `rows`,
// token t) for r < num_rows and t < num_tokens, `tokens` holding num_tokens tokens of equal width
// and `rows` the bytes of num_rows rows of that many fp32 values at any address; tokens share each
// pass over the rows (two at a time on AVX-512), rows each pass over a token (checked: the sizes
// agree, out holds every result).
void ExactDotsOfTokensUnalignedSimd(std::span<const std::byte> rows, size_t num_rows,
                                    std::span<const float> tokens, size_t num_tokens,
                                    std::span<float> out, size_t out_stride);

// out[d] = fp32(Σ_i w[i]·rows[i][d]) for d < out.size(), each exactly rounded: ExactDotColumn for
// every column (the value product of attention over cached rows). rows.size() == w.size().
void ExactDotColumnsSimd(std::span<const float> w, std::span<const float* const> rows,
                         std::span<float> out);

// The fast numerics' fixed-order fp32 sums (not exact), bit for bit their scalar twins Fp32Dot and
// Fp32DotColumn of numerics/arith.h on every target: the attention q·k and PV products under
// --numerics fast (issue 19).
float Fp32DotSimd(std::span<const float> a, std::span<const float> b);
// out[k] = Fp32DotSimd(a, the a.size() values at rows[k]) for every k, several rows at a time.
void Fp32DotsSimd(std::span<const float> a, std::span<const float* const> rows,
                  std::span<float> out);
void Fp32DotColumnsSimd(std::span<const float> w, std::span<const float* const> rows,
                        std::span<float> out);

// fp32(Σ x[i]), exactly rounded: ExactSum.
float ExactSumSimd(std::span<const float> x);

// fp32((Σ fp32(x[i]²)) / n), the sum and the division exact, rounded once: ExactMeanSquare.
// x must not be empty (checked).
float ExactMeanSquareSimd(std::span<const float> x);

}  // namespace dsv41

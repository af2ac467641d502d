#pragma once

// The sparse attention of one query head over an ordered key list (K = V), model.md §7.6, as a
// scalar reference and a SIMD form with the same bits (its exact sums and exponentials are the
// kernels' SIMD twins of numerics/arith.h).

#include <cstdint>
#include <span>

namespace dsv41 {

// model.md §7.6: the key list is cut into consecutive blocks of this many keys.
inline constexpr int32_t kAttentionKeyBlock = 64;

// How q·k and the PV product are summed: exactly (model.md §12.8 item 2; --numerics reference)
// or, under the fast numerics, as fixed-order fp32 sums (Fp32Dot, Fp32DotColumn of
// numerics/arith.h), which depend on nothing but the key list. The softmax sums stay exact.
enum class AttentionSums : uint8_t { kExact, kFp32 };

// Online softmax over blocks of kAttentionKeyBlock keys, running max starting at -1e30,
// s_k = fp32(ExactDot(q, k)) · scale, p_k = CrExp(s_k − m'), den = den·α + ExactSum(p_k),
// acc = acc·α + ExactSum_k(bf16(p_k)·k) per dim, then den += CrExp(sink − m) after the last block
// (the sink never enters the running max), out = bf16(acc / den); with kFp32 the two products are
// Fp32Dot and Fp32DotColumn instead. q, out: head_dim floats; every keys[i] points at head_dim
// floats. An empty key list gives zeros. Pure; thread-safe.
void SinkAttention(std::span<const float> q, std::span<const float* const> keys, float sink,
                   float scale, std::span<float> out, AttentionSums sums = AttentionSums::kExact);
// The same with the scalar sums (exact, or the fp32 twins) and CrExp, in the spec's order.
void SinkAttentionRef(std::span<const float> q, std::span<const float* const> keys, float sink,
                      float scale, std::span<float> out,
                      AttentionSums sums = AttentionSums::kExact);

}  // namespace dsv41

#pragma once

// The gated pooling of a compressor group (model.md §7.3, ratio r > 1), a scalar reference and a
// SIMD twin with the same bits. Per channel c, over the r members m in position order:
//   mx = max_m gate_m[c] (as std::max from member 0 on), e_m = CrExp(gate_m[c] − mx),
//   den = SeqSum(e), out[c] = bf16(SeqSum_m fp32(fp32(e_m / den) · value_m[c])),
// the sums sequential fp32 additions from member 0 (§12.8 item 3).

#include <span>

namespace dsv41 {

// values[m], gates[m]: member m's out.size() values and gate logits (any alignment); r =
// values.size() == gates.size() >= 1 (checked).
void CompressorPoolRef(std::span<const float* const> values, std::span<const float* const> gates,
                       std::span<float> out);
// The same; scratch holds at least r · max(out.size(), 2) floats. Vectorised across channels.
void CompressorPoolSimd(std::span<const float* const> values, std::span<const float* const> gates,
                        std::span<float> out, std::span<float> scratch);

}  // namespace dsv41

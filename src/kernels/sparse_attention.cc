#include "kernels/sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/activation.h"
#include "kernels/exact_sum.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// Dots(q, keys, out): out[k] = Sums::Dot(q, keys[k]), one key after another.
template <class Sums>
struct DotsOneByOne {
  static void Dots(std::span<const float> q, std::span<const float* const> keys,
                   std::span<float> out) {
    for (size_t k = 0; k < keys.size(); ++k) {
      out[k] = Sums::Dot(q, std::span<const float>(keys[k], q.size()));
    }
  }
};

// The exact sums and exponentials of the scalar reference.
struct RefSums : DotsOneByOne<RefSums> {
  static float Dot(std::span<const float> a, std::span<const float> b) { return ExactDot(a, b); }
  static float Sum(std::span<const float> x) { return ExactSum(x); }
  static void Columns(std::span<const float> w, std::span<const float* const> rows,
                      std::span<float> out) {
    for (size_t d = 0; d < out.size(); ++d) out[d] = ExactDotColumn(w, rows, d);
  }
  static void Exp(std::span<float> x) {
    for (float& v : x) v = CrExp(v);
  }
};

// Their SIMD twins.
struct SimdSums : DotsOneByOne<SimdSums> {
  static float Dot(std::span<const float> a, std::span<const float> b) {
    return ExactDotSimd(a, b);
  }
  static float Sum(std::span<const float> x) { return ExactSumSimd(x); }
  static void Columns(std::span<const float> w, std::span<const float* const> rows,
                      std::span<float> out) {
    ExactDotColumnsSimd(w, rows, out);
  }
  static void Exp(std::span<float> x) { CrExpSimd(x, x); }
};

// The fast numerics: q·k and PV as fixed-order fp32 sums, the probability sums (★) still exact.
struct Fp32Sums {
  static void Dots(std::span<const float> q, std::span<const float* const> keys,
                   std::span<float> out) {
    Fp32DotsSimd(q, keys, out);  // several keys at a time, each key's sum as Fp32DotSimd's
  }
  static float Sum(std::span<const float> x) { return ExactSumSimd(x); }
  static void Columns(std::span<const float> w, std::span<const float* const> rows,
                      std::span<float> out) {
    Fp32DotColumnsSimd(w, rows, out);
  }
  static void Exp(std::span<float> x) { CrExpSimd(x, x); }
};

// Their scalar twins.
struct Fp32RefSums : DotsOneByOne<Fp32RefSums> {
  static float Dot(std::span<const float> a, std::span<const float> b) { return Fp32Dot(a, b); }
  static float Sum(std::span<const float> x) { return ExactSum(x); }
  static void Columns(std::span<const float> w, std::span<const float* const> rows,
                      std::span<float> out) {
    for (size_t d = 0; d < out.size(); ++d) out[d] = Fp32DotColumn(w, rows, d);
  }
  static void Exp(std::span<float> x) {
    for (float& v : x) v = CrExp(v);
  }
};

template <class Sums>
void SinkAttentionImpl(std::span<const float> q, std::span<const float* const> keys, float sink,
                       float scale, std::span<float> out) {
  const size_t dim = q.size();
  DSV41_CHECK(out.size() == dim, "out %zu, q %zu", out.size(), dim);
  if (keys.empty()) {
    std::fill(out.begin(), out.end(), 0.0f);
    return;
  }
  // The accumulator lives on the stack for every real head size (one call per token and head).
  constexpr size_t kStackDims = 1024;
  float stack_acc[kStackDims];
  std::vector<float> heap_acc(dim > kStackDims ? dim : 0);
  const std::span<float> acc(dim > kStackDims ? heap_acc.data() : stack_acc, dim);
  std::fill(acc.begin(), acc.end(), 0.0f);
  float stack_pv[kStackDims];
  std::vector<float> heap_pv(dim > kStackDims ? dim : 0);
  const std::span<float> pv(dim > kStackDims ? heap_pv.data() : stack_pv, dim);
  float scores[kAttentionKeyBlock];
  float probs[kAttentionKeyBlock];
  float probs_bf16[kAttentionKeyBlock];
  float m = -1e30f;
  float den = 0.0f;
  for (size_t begin = 0; begin < keys.size(); begin += kAttentionKeyBlock) {
    const size_t n = std::min<size_t>(kAttentionKeyBlock, keys.size() - begin);
    Sums::Dots(q, keys.subspan(begin, n), std::span<float>(scores, n));
    float block_max = -INFINITY;
    for (size_t k = 0; k < n; ++k) {
      scores[k] = scores[k] * scale;
      block_max = std::max(block_max, scores[k]);
    }
    const float m_new = std::max(m, block_max);
    const float alpha = CrExp(m - m_new);
    for (size_t k = 0; k < n; ++k) probs[k] = scores[k] - m_new;
    Sums::Exp(std::span<float>(probs, n));
    den = den * alpha + Sums::Sum(std::span<const float>(probs, n));
    for (size_t k = 0; k < n; ++k) probs_bf16[k] = Bf16Round(probs[k]);
    Sums::Columns(std::span<const float>(probs_bf16, n),
                  std::span<const float* const>(keys.data() + begin, n), pv);
    for (size_t d = 0; d < dim; ++d) acc[d] = acc[d] * alpha + pv[d];
    m = m_new;
  }
  den = den + CrExp(sink - m);
  for (size_t d = 0; d < dim; ++d) out[d] = Bf16Round(acc[d] / den);
}

}  // namespace

void SinkAttention(std::span<const float> q, std::span<const float* const> keys, float sink,
                   float scale, std::span<float> out, AttentionSums sums) {
  if (sums == AttentionSums::kFp32) {
    SinkAttentionImpl<Fp32Sums>(q, keys, sink, scale, out);
  } else {
    SinkAttentionImpl<SimdSums>(q, keys, sink, scale, out);
  }
}

void SinkAttentionRef(std::span<const float> q, std::span<const float* const> keys, float sink,
                      float scale, std::span<float> out, AttentionSums sums) {
  if (sums == AttentionSums::kFp32) {
    SinkAttentionImpl<Fp32RefSums>(q, keys, sink, scale, out);
  } else {
    SinkAttentionImpl<RefSums>(q, keys, sink, scale, out);
  }
}

}  // namespace dsv41

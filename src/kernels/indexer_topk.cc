// Indexer scores and top-k: the scalar references and their Highway twins (indexer_topk.h).
#ifndef DSV41_KERNELS_INDEXER_TOPK_CC_ONCE
#define DSV41_KERNELS_INDEXER_TOPK_CC_ONCE

#include "kernels/indexer_topk.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <numeric>
#include <vector>

#include "base/check.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41::indexer_topk_internal {
inline size_t CheckScores(std::span<const float> q, std::span<const float> w,
                          std::span<const float> keys, std::span<float> scores) {
  const size_t heads = w.size();
  DSV41_CHECK(heads >= 1 && q.size() % heads == 0 && q.size() >= heads &&
                  keys.size() == scores.size() * (q.size() / heads),
              "indexer scores: q %zu for %zu heads, keys %zu for %zu entries", q.size(), heads,
              keys.size(), scores.size());
  return q.size() / heads;
}

inline int32_t CheckTopK(std::span<const float> scores, int32_t k, std::span<int32_t> scratch,
                         std::span<int32_t> out) {
  const int32_t n = static_cast<int32_t>(scores.size());
  k = std::clamp(k, 0, n);
  DSV41_CHECK(scratch.size() >= static_cast<size_t>(n) && out.size() >= static_cast<size_t>(k),
              "top-%d of %d: scratch %zu, out %zu", k, n, scratch.size(), out.size());
  return k;
}

// An int32 that orders as the float does (NaN excluded), −0 mapped to the key of +0.
inline int32_t OrderKey(float v) {
  const int32_t bits = std::bit_cast<int32_t>(v + 0.0f);  // −0 + 0 = +0
  return bits ^ ((bits >> 31) & 0x7FFFFFFF);
}
}  // namespace dsv41::indexer_topk_internal

#endif  // DSV41_KERNELS_INDEXER_TOPK_CC_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/indexer_topk.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace dsv41::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// scratch[i] = OrderKey(scores[i]).
void TopKOrderKeys(const float* scores, size_t n, int32_t* keys) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const size_t nf = hn::Lanes(df);
  size_t i = 0;
  for (; i + nf <= n; i += nf) {
    const auto bits = hn::BitCast(di, hn::Add(hn::LoadU(df, scores + i), hn::Zero(df)));
    const auto flip = hn::And(hn::ShiftRight<31>(bits), hn::Set(di, 0x7FFFFFFF));
    hn::StoreU(hn::Xor(bits, flip), di, keys + i);
  }
  for (; i < n; ++i) keys[i] = indexer_topk_internal::OrderKey(scores[i]);
}

// How many of keys[0 .. n) are above `threshold`.
size_t TopKCountAbove(const int32_t* keys, size_t n, int32_t threshold) {
  const hn::ScalableTag<int32_t> di;
  const size_t nf = hn::Lanes(di);
  const auto t = hn::Set(di, threshold);
  size_t count = 0;
  size_t i = 0;
  for (; i + nf <= n; i += nf) count += hn::CountTrue(di, hn::Gt(hn::LoadU(di, keys + i), t));
  for (; i < n; ++i) count += keys[i] > threshold ? 1 : 0;
  return count;
}

// Writes, in index order, every index whose key is above `threshold` and the first `ties` whose
// key equals it; returns how many were written.
size_t TopKCollect(const float* scores, size_t n, int32_t threshold, size_t ties, int32_t* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const size_t nf = hn::Lanes(df);
  const auto t = hn::Set(di, threshold);
  HWY_ALIGN int32_t picked[hn::MaxLanes(di)];
  size_t count = 0;
  size_t i = 0;
  for (; i + nf <= n; i += nf) {
    const auto bits = hn::BitCast(di, hn::Add(hn::LoadU(df, scores + i), hn::Zero(df)));
    const auto key = hn::Xor(bits, hn::And(hn::ShiftRight<31>(bits), hn::Set(di, 0x7FFFFFFF)));
    const auto above = hn::Gt(key, t);
    if (ties > 0) {
      const auto tie = hn::Eq(key, t);
      if (!hn::AllFalse(di, tie)) {
        // A vector with ties still to take: lane by lane, in order.
        for (size_t l = 0; l < nf; ++l) {
          const int32_t k = indexer_topk_internal::OrderKey(scores[i + l]);
          if (k > threshold || (k == threshold && ties > 0)) {
            if (k == threshold) --ties;
            out[count++] = static_cast<int32_t>(i + l);
          }
        }
        continue;
      }
    }
    if (hn::AllFalse(di, above)) continue;
    const size_t got = hn::CompressStore(hn::Iota(di, static_cast<int32_t>(i)), above, di, picked);
    std::copy_n(picked, got, out + count);
    count += got;
  }
  for (; i < n; ++i) {
    const int32_t k = indexer_topk_internal::OrderKey(scores[i]);
    if (k > threshold || (k == threshold && ties > 0)) {
      if (k == threshold) --ties;
      out[count++] = static_cast<int32_t>(i);
    }
  }
  return count;
}

}  // namespace dsv41::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsv41 {
HWY_EXPORT(TopKOrderKeys);
HWY_EXPORT(TopKCountAbove);
HWY_EXPORT(TopKCollect);

void IndexerScoresRef(std::span<const float> q, std::span<const float> w,
                      std::span<const float> keys, std::span<float> scores) {
  const size_t dim = indexer_topk_internal::CheckScores(q, w, keys, scores);
  const size_t heads = w.size();
  std::vector<float> terms(heads);
  for (size_t e = 0; e < scores.size(); ++e) {
    const std::span<const float> key = keys.subspan(e * dim, dim);
    for (size_t h = 0; h < heads; ++h) {
      const float dot = Bf16Round(ExactDot(q.subspan(h * dim, dim), key));
      const float relu = dot > 0.0f ? dot : 0.0f;
      terms[h] = Bf16Round(w[h] * relu);
    }
    scores[e] = Bf16Round(ExactSum(terms));
  }
}

int32_t TopKAscendingRef(std::span<const float> scores, int32_t k, std::span<int32_t> scratch,
                         std::span<int32_t> out) {
  k = indexer_topk_internal::CheckTopK(scores, k, scratch, out);
  const int32_t n = static_cast<int32_t>(scores.size());
  std::iota(scratch.begin(), scratch.begin() + n, 0);
  std::partial_sort(scratch.begin(), scratch.begin() + k, scratch.begin() + n,
                    [&](int32_t a, int32_t b) {
                      return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
                    });
  std::sort(scratch.begin(), scratch.begin() + k);
  std::copy_n(scratch.begin(), k, out.begin());
  return k;
}

int32_t TopKAscendingSimd(std::span<const float> scores, int32_t k, std::span<int32_t> scratch,
                          std::span<int32_t> out) {
  k = indexer_topk_internal::CheckTopK(scores, k, scratch, out);
  const size_t n = scores.size();
  if (k == 0) return 0;
  if (static_cast<size_t>(k) == n) {
    std::iota(out.begin(), out.begin() + k, 0);
    return k;
  }
  // The k-th highest key T: every score above T is picked, and the lowest-index ties fill the
  // rest, which is the set the reference's (score, index) order gives.
  int32_t* keys = scratch.data();
  HWY_DYNAMIC_DISPATCH(TopKOrderKeys)(scores.data(), n, keys);
  std::nth_element(keys, keys + (k - 1), keys + n, std::greater<int32_t>());
  const int32_t threshold = keys[k - 1];  // keys[0 .. k − 1) >= T: all those above it are there
  const size_t above = HWY_DYNAMIC_DISPATCH(TopKCountAbove)(keys, k - 1, threshold);
  const size_t got = HWY_DYNAMIC_DISPATCH(TopKCollect)(scores.data(), n, threshold,
                                                       static_cast<size_t>(k) - above, out.data());
  DSV41_CHECK(got == static_cast<size_t>(k), "top-%d collected %zu", k, got);
  return k;
}

}  // namespace dsv41
#endif  // HWY_ONCE

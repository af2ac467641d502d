#include "model/norm.h"

#include <cstring>
#include <string>

#include "base/check.h"
#include "kernels/exact_sum.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {

Result<NormWeight> GetNormWeight(const ModelWeights& weights, std::string_view name, int64_t n) {
  DSV41_ASSIGN_OR_RETURN(TensorView view, weights.Get(name));
  if (view.dtype != DType::kBF16 || view.shape.size() != 1 || view.shape[0] != n) {
    return InvalidArgumentError("norm weight '%.*s': want BF16 [%lld], got %.*s with %zu dims",
                                static_cast<int>(name.size()), name.data(),
                                static_cast<long long>(n),
                                static_cast<int>(DTypeName(view.dtype).size()),
                                DTypeName(view.dtype).data(), view.shape.size());
  }
  return NormWeight{view.bytes};
}

void RmsNorm(std::span<const float> x, const NormWeight& weight, float eps, std::span<float> y) {
  DSV41_CHECK(!x.empty() && x.size() == y.size() && static_cast<int64_t>(x.size()) == weight.size(),
              "RmsNorm of %zu values into %zu with a weight of %lld", x.size(), y.size(),
              static_cast<long long>(weight.size()));
  const float mean_square = ExactMeanSquareSimd(x);
  const float r = CrRsqrt(mean_square + eps);
  for (size_t d = 0; d < x.size(); ++d) {
    uint16_t w_bits;
    std::memcpy(&w_bits, weight.bf16.data() + 2 * d, sizeof(w_bits));
    const float scaled = x[d] * r;  // model.md §5: x·r first, then the weight
    y[d] = Bf16Round(F32FromBf16(w_bits) * scaled);
  }
}

void RmsNormRows(std::span<const float> x, int64_t rows, const NormWeight& weight, float eps,
                 std::span<float> y) {
  const size_t n = static_cast<size_t>(weight.size());
  DSV41_CHECK(rows >= 0 && x.size() == static_cast<size_t>(rows) * n && y.size() == x.size(),
              "RmsNormRows: %lld rows of %zu, x %zu, y %zu", static_cast<long long>(rows), n,
              x.size(), y.size());
  for (int64_t row = 0; row < rows; ++row) {
    RmsNorm(x.subspan(row * n, n), weight, eps, y.subspan(row * n, n));
  }
}

}  // namespace dsv41

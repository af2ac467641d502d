#include "model/norm.h"

#include <cstring>
#include <string>

#include "base/check.h"
#include "kernels/rmsnorm.h"
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
  RmsNormRowsSimd(x, 1, weight.bf16, eps, y);
}

void RmsNormRows(std::span<const float> x, int64_t rows, const NormWeight& weight, float eps,
                 std::span<float> y) {
  RmsNormRowsSimd(x, rows, weight.bf16, eps, y);
}

}  // namespace dsv41

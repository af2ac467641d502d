#include "model/head.h"

#include <cstring>
#include <string>

#include "base/check.h"
#include "model/linear_weight.h"
#include "model/weights.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

Result<TensorView> GetBf16Matrix(const ModelWeights& weights, const char* name, int64_t rows,
                                 int64_t cols) {
  DSV41_ASSIGN_OR_RETURN(TensorView view, weights.Get(name));
  if (view.dtype != DType::kBF16 || view.shape != Shape{rows, cols}) {
    return InvalidArgumentError("'%s': want BF16 [%lld, %lld], got %.*s with %zu dims", name,
                                static_cast<long long>(rows), static_cast<long long>(cols),
                                static_cast<int>(DTypeName(view.dtype).size()),
                                DTypeName(view.dtype).data(), view.shape.size());
  }
  return view;
}

}  // namespace

Result<HeadWeights> GetHeadWeights(const ModelWeights& weights) {
  const ModelConfig& config = weights.config();
  HeadWeights head;
  head.vocab_size = config.vocab_size;
  head.hidden_size = config.hidden_size;
  DSV41_ASSIGN_OR_RETURN(TensorView embed,
                         GetBf16Matrix(weights, "embed.weight", head.vocab_size, head.hidden_size));
  head.embed = embed.bytes;
  DSV41_ASSIGN_OR_RETURN(head.norm, GetNormWeight(weights, "norm.weight", head.hidden_size));
  DSV41_ASSIGN_OR_RETURN(head.head, GetLinear(weights, "head"));
  if (head.head.out != head.vocab_size || head.head.in != head.hidden_size) {
    return InvalidArgumentError(
        "'head.weight': want [%lld, %lld], got [%lld, %lld]",
        static_cast<long long>(head.vocab_size), static_cast<long long>(head.hidden_size),
        static_cast<long long>(head.head.out), static_cast<long long>(head.head.in));
  }
  return head;
}

Status EmbedTokens(const HeadWeights& weights, std::span<const int32_t> token_ids, int32_t hc_mult,
                   std::span<float> streams) {
  const size_t dim = static_cast<size_t>(weights.hidden_size);
  DSV41_CHECK(hc_mult >= 1 && streams.size() == token_ids.size() * hc_mult * dim,
              "EmbedTokens: %zu stream values for %zu tokens", streams.size(), token_ids.size());
  for (size_t t = 0; t < token_ids.size(); ++t) {
    const int32_t token_id = token_ids[t];
    if (token_id < 0 || token_id >= weights.vocab_size) {
      return InvalidArgumentError("token %zu: id %d outside the vocabulary [0, %lld)", t, token_id,
                                  static_cast<long long>(weights.vocab_size));
    }
    const std::byte* row = weights.embed.data() + static_cast<size_t>(token_id) * dim * 2;
    float* first = streams.data() + t * hc_mult * dim;
    for (size_t d = 0; d < dim; ++d) {
      uint16_t bits;
      std::memcpy(&bits, row + 2 * d, sizeof(bits));
      first[d] = F32FromBf16(bits);
    }
    for (int32_t k = 1; k < hc_mult; ++k) std::memcpy(first + k * dim, first, dim * sizeof(float));
  }
  return OkStatus();
}

void FinalHidden(const HeadWeights& weights, const MhcDims& dims, std::span<const float> streams,
                 std::span<const float> pre, int64_t rows, std::span<float> hidden) {
  const size_t dim = static_cast<size_t>(weights.hidden_size);
  const size_t hc = static_cast<size_t>(dims.hc_mult);
  DSV41_CHECK(rows >= 0 && streams.size() == rows * hc * dim && pre.size() == rows * hc &&
                  hidden.size() == rows * dim,
              "FinalHidden: %lld rows, streams %zu, pre %zu, hidden %zu",
              static_cast<long long>(rows), streams.size(), pre.size(), hidden.size());
  for (int64_t t = 0; t < rows; ++t) {
    std::span<float> h = hidden.subspan(t * dim, dim);
    HcPre(streams.subspan(t * hc * dim, hc * dim), pre.subspan(t * hc, hc), h);
    RmsNorm(h, weights.norm, dims.norm_eps, h);
  }
}

void HeadLogits(const HeadWeights& weights, std::span<const float> hidden, int64_t rows,
                std::span<float> logits, ExecContext& ctx) {
  DSV41_CHECK(rows >= 0 && hidden.size() == static_cast<size_t>(rows * weights.hidden_size) &&
                  logits.size() == static_cast<size_t>(rows * weights.vocab_size),
              "HeadLogits: %lld rows, hidden %zu, logits %zu", static_cast<long long>(rows),
              hidden.size(), logits.size());
  LinearProduct(weights.head, hidden, rows, logits, ctx);
}

}  // namespace dsv41

#pragma once

// The ends of the forward (model.md §3, §5, §10): token embedding into the residual streams, the
// final collapse with the last FFN pre-mix, the final RMSNorm and the head logits.

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/exec_context.h"
#include "base/status.h"
#include "kernels/linear.h"
#include "model/mhc.h"
#include "model/norm.h"

namespace dsv41 {

class ModelWeights;

// Views of embed.weight, norm.weight and head.weight (all BF16).
struct HeadWeights {
  std::span<const std::byte> embed;  // bf16 [vocab, hidden]
  NormWeight norm;                   // bf16 [hidden]
  LinearWeight head;                 // [vocab, hidden] via GetLinear; BF16 in the release
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
};

// Reads and checks the three tensors (dtype BF16, shapes from the config); errors name the tensor.
Result<HeadWeights> GetHeadWeights(const ModelWeights& weights);

// streams [T, hc_mult, hidden] = the embedding row of each token copied into every stream (bf16
// values as fp32). A token id outside [0, vocab) is InvalidArgument naming its index and value.
Status EmbedTokens(const HeadWeights& weights, std::span<const int32_t> token_ids, int32_t hc_mult,
                   std::span<float> streams);

// hidden [rows, hidden] = RmsNorm(norm, HcPre(streams[t], pre[t])) for each row t: the final
// collapse with the last layer's FFN pre-mix (pre [rows, hc_mult]), then the final norm; bf16
// values as fp32. Streams [rows, hc_mult, hidden].
void FinalHidden(const HeadWeights& weights, const MhcDims& dims, std::span<const float> streams,
                 std::span<const float> pre, int64_t rows, std::span<float> hidden);

// logits [rows, vocab] = head · hidden[row] in fp32 (model.md §12.4: the bf16 weight upcast, fp32
// input, no activation quantisation; a quantised head of an unknown checkpoint would quantise it,
// by §12.4's rule). The GEMM accumulation order is the kernel's (§12.8 item 1).
void HeadLogits(const HeadWeights& weights, std::span<const float> hidden, int64_t rows,
                std::span<float> logits, ExecContext& ctx);

}  // namespace dsv41

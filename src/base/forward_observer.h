#pragma once

// What tests and tools watch of a forward (the goldens' intermediates): hooks the model modules
// call through ExecContext::observer, which is the do-nothing observer unless one is installed
// (ScopedForwardObserver). The hooks see views valid only during the call, in plain types, so the
// base layer needs no model type. Observing never changes a bit of the forward.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace dsv41 {

class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;

  // A backbone layer's attention sublayer (`in`: the RMSNorm'd collapsed streams, `out`: the
  // attention output) and FFN sublayer (`in`: the ffn_norm input of the MoE, `out`: its output),
  // each [T, hidden_size] in batch row order, layers in order.
  virtual void OnAttentionSublayer(int32_t /*layer*/, std::span<const float> /*in*/,
                                   std::span<const float> /*out*/) {}
  virtual void OnFfnSublayer(int32_t /*layer*/, std::span<const float> /*in*/,
                             std::span<const float> /*out*/) {}

  // Whether the indexers compute what OnIndexerScores reports (extra work: the tie flags).
  virtual bool WantsIndexerScores() const { return false; }
  // Request `request_idx` of the indexer of `layer`: scores [num_tokens, N] bf16 as the top-k saw
  // them (−inf where invisible or outside the candidate mask), tie [num_tokens] 1 where the top-k
  // boundary was an exact tie. Called only when WantsIndexerScores().
  virtual void OnIndexerScores(int32_t /*layer*/, size_t /*request_idx*/,
                               std::span<const float> /*scores*/,
                               std::span<const uint8_t> /*tie*/) {}

  // The routing of one MoE call (`module`: "layers.N" or "mtp.K"): experts and weights
  // [T, top_k], selection order.
  virtual void OnMoeRouting(std::string_view /*module*/, int32_t /*top_k*/,
                            std::span<const int32_t> /*experts*/,
                            std::span<const float> /*weights*/) {}

  // The observer that watches nothing (every hook is a no-op); ExecContext's default.
  static ForwardObserver& None();
};

}  // namespace dsv41

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

  // What one ratio > 0 layer of one request attends in a forward (model.md §7.5–7.8), for
  // selection-coverage tests: views valid only during the OnSelection call.
  struct Selection {
    int32_t start_pos = 0;   // the request's first new position
    int32_t num_tokens = 0;  // its new tokens in this forward
    int32_t ratio = 0;       // the layer's compress ratio: token t sees (start_pos + t + 1) / ratio
    // [num_tokens, per_token] compressed-entry ids, ascending, −1 padded: the top-k of the
    // layer's index source (a Reuse layer's is its source's list).
    std::span<const int32_t> entries;
    int32_t per_token = 0;
    // The candidate source only: its mask [num_tokens, num_entries] (1 = kept); else empty.
    std::span<const uint8_t> candidates;
    int32_t num_entries = 0;  // N = (start_pos + num_tokens) / ratio
  };
  // Whether the forward reports OnSelection (a check per layer; nothing is computed for it).
  virtual bool WantsSelections() const { return false; }
  // Request `request_idx`'s selection at backbone layer `layer` (ratio > 0 layers, in order).
  // Called only when WantsSelections().
  virtual void OnSelection(int32_t /*layer*/, size_t /*request_idx*/,
                           const Selection& /*selection*/) {}

  // The routing of one MoE call (`module`: "layers.N" or "mtp.K"): experts and weights
  // [T, top_k], selection order.
  virtual void OnMoeRouting(std::string_view /*module*/, int32_t /*top_k*/,
                            std::span<const int32_t> /*experts*/,
                            std::span<const float> /*weights*/) {}

  // The observer that watches nothing (every hook is a no-op); ExecContext's default.
  static ForwardObserver& None();
};

}  // namespace dsv41

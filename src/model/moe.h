#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/exec_context.h"
#include "base/forward_observer.h"
#include "base/status.h"
#include "config/config.h"
#include "config/rank_shard.h"
#include "kernels/activation.h"  // SwigluActivation
#include "kernels/linear.h"

namespace dsv41 {

class ModelWeights;

// How the router turns logits into a choice (model.md §8 Gate). Constants are fp32 once (§12.8).
struct RouterOptions {
  ScoringFunc scoring_func = ScoringFunc::kSqrtSoftplus;
  int32_t top_k = 1;
  float gate_temp = 1.0f;  // logits are divided by it unless it is 1
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// Routes one token. `logits`: the router's fp32 gate products [E]; `bias`: the selection bias [E]
// (`gate.bias`, or `gate.bias_vl` inside an image span). Scores follow `scoring_func`
// (sqrtsoftplus: CrSqrt(CrSoftplus(z)); sigmoid: Sigmoid(z); softmax: CrExp(z − max) over a seq
// sum in expert order); the top_k experts by fp32(score + bias) are chosen, descending, the lower
// expert id winning every tie (§8 step 5); `experts` receives them in that selection order and
// `weights` their unbiased scores, normalised by their seq sum in selection order + fp32(1e-20)
// when norm_topk_prob and top_k > 1, then × routed_scaling_factor. experts/weights: [top_k].
// scratch: at least 2·E floats (their contents are overwritten); without it RouteToken allocates.
void RouteToken(std::span<const float> logits, std::span<const float> bias,
                const RouterOptions& options, std::span<int32_t> experts, std::span<float> weights,
                std::span<float> scratch = {});

// The experts each token was routed to, for tests, recorded as an observer
// (ScopedForwardObserver): the last MoE call's.
struct MoeRouting final : ForwardObserver {
  int32_t top_k = 0;
  std::vector<int32_t> experts;  // [T, top_k], selection order (descending biased score)
  std::vector<float> weights;    // [T, top_k], the routing weights of `experts`

  void OnMoeRouting(std::string_view /*module*/, int32_t k, std::span<const int32_t> e,
                    std::span<const float> w) override {
    top_k = k;
    experts.assign(e.begin(), e.end());
    weights.assign(w.begin(), w.end());
  }
};

// Every (token, slot) routing assignment of a step grouped by expert in increasing id, tokens
// ascending within an expert: expert e owns assignments first_of[e] .. first_of[e + 1] − 1, and
// `active` lists the experts that have any. Spans in the step arena.
struct ExpertAssignments {
  std::span<int64_t> first_of;  // [E + 1]
  std::span<int64_t> token_of;  // [T · k] each assignment's token
  std::span<float> weight_of;   // [T · k] its routing weight
  std::span<int32_t> active;    // expert ids with assignments, increasing
  int64_t num_assigned = 0;     // T · k
};

// Groups the router's choices (chosen / chosen_weights: [T, k]) over `num_experts` experts.
ExpertAssignments GroupByExpert(std::span<const int32_t> chosen,
                                std::span<const float> chosen_weights, int64_t num_tokens,
                                int32_t k, int64_t num_experts, StepArena& arena);

// The MoE FFN of one backbone layer ("layers.N") or DSpark stage ("mtp.K"), model.md §8: router
// (`ffn.gate`), routed experts (`ffn.experts.{e}.w{1,2,3}`) and the shared expert
// (`ffn.shared_experts.w{1,2,3}`), each weight a view in its stored format. DSpark stages use
// dspark_n_routed_experts / dspark_num_experts_per_tok. Move-only views into the ModelWeights it
// was loaded from, which must outlive it. Forward keeps no state.
//
// Forward runs four parallel regions whatever the number of experts: the router, then w1 and w3
// of every active expert (and the shared expert) as one batch of jobs, the SwiGLU of every
// hidden row, then every w2 — each expert's weights are read once per step for all the tokens
// routed to it (serving.md §6).
//
// In a multi-process run (ctx.comm of more than one rank) each rank holds the routed experts
// ShardExperts gives it (LoadOptions::shard), computes them for the tokens routed to them, starts
// an all-gather of those fp32 outputs, computes the shared expert meanwhile, and then combines
// every output in the single-process order: the same bits on every rank and as one process.
class Moe {
 public:
  // Reads and checks the layer's weights (errors name the tensor).
  static Result<Moe> Load(const ModelWeights& weights, std::string_view prefix);

  // y = MoE(x) for `num_tokens` rows. x: [T, hidden] holding bf16 values (the ffn_norm output);
  // y: [T, hidden] bf16 values. `in_image` is empty (text) or [T], nonzero where the token lies
  // inside an image span (the router then selects with bias_vl). The routing goes to
  // ctx.observer (OnMoeRouting). Results do not depend on the pool's thread count nor on which
  // tokens share the call.
  void Forward(std::span<const float> x, int64_t num_tokens, std::span<float> y, ExecContext& ctx,
               std::span<const uint8_t> in_image = {}) const;

  // Routed experts of the layer (all ranks' together).
  int32_t num_experts() const { return static_cast<int32_t>(num_experts_); }
  // The routed experts this rank holds and computes.
  IndexRange owned_experts() const { return owned_; }
  int32_t top_k() const { return router_.top_k; }
  int32_t hidden_size() const { return hidden_size_; }

 private:
  struct Expert {
    LinearWeight w1;
    LinearWeight w2;
    LinearWeight w3;
  };
  Moe() = default;
  // §8 Gate and routing: chosen / chosen_weights ([T, k]) for the bf16-valued rows of x.
  void Route(std::span<const float> x, int64_t num_tokens, std::span<const uint8_t> in_image,
             std::span<int32_t> chosen, std::span<float> chosen_weights, ExecContext& ctx) const;
  // The expert FFNs of `experts` (active experts this rank holds, increasing and consecutive in
  // a.active) and, with `shared`, of the shared expert: outs ([num_assigned + T, hidden], fp32)
  // receives each of their assignments' outputs (weighted, at its assignment row), then the
  // shared expert's output per token at row num_assigned + t. Other rows are left alone.
  void RunExperts(std::span<const float> x, int64_t num_tokens, const ExpertAssignments& a,
                  std::span<const int32_t> experts, bool shared, std::span<float> outs,
                  ExecContext& ctx) const;
  // The outputs of every routed assignment of a multi-process step into outs: this rank's
  // experts computed here, the others' gathered while the shared expert runs.
  void RunShardedExperts(std::span<const float> x, int64_t num_tokens, const ExpertAssignments& a,
                         std::span<float> outs, ExecContext& ctx) const;
  const Expert& OwnedExpert(int32_t expert) const;

  std::string prefix_;
  int32_t hidden_size_ = 0;
  int32_t intermediate_size_ = 0;
  RouterOptions router_;
  float swiglu_limit_ = 0.0f;  // <= 0: no clamp
  LinearWeight gate_;
  std::vector<float> bias_;     // [E] gate.bias
  std::vector<float> bias_vl_;  // [E] gate.bias_vl
  int64_t num_experts_ = 0;
  int64_t moe_idx_ = 0;  // MoeIndex: which experts each rank holds
  RankShard shard_;
  IndexRange owned_;             // the routed experts this rank holds
  std::vector<Expert> experts_;  // those, from owned_.begin
  Expert shared_;
};

}  // namespace dsv41

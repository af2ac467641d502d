#include "model/moe.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "base/check.h"
#include "checkpoint/dtype.h"
#include "model/linear_weight.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// Reads the fp32 vector `name` of `size` elements (router biases, checkpoint.md: F32 [E]).
Result<std::vector<float>> ReadF32Vector(const ModelWeights& weights, const std::string& name,
                                         int64_t size) {
  DSV41_ASSIGN_OR_RETURN(TensorView view, weights.Get(name));
  if (view.dtype != DType::kF32 || view.shape != Shape{size}) {
    return InvalidArgumentError("'%s': %s with %zu dims, want F32 [%lld]", name.c_str(),
                                std::string(DTypeName(view.dtype)).c_str(), view.shape.size(),
                                static_cast<long long>(size));
  }
  std::vector<float> out(static_cast<size_t>(size));
  std::memcpy(out.data(), view.bytes.data(), out.size() * sizeof(float));  // may be unaligned
  return out;
}

float Score(ScoringFunc func, float z) {
  switch (func) {
    case ScoringFunc::kSqrtSoftplus:
      return CrSqrt(CrSoftplus(z));
    case ScoringFunc::kSigmoid:
      return Sigmoid(z);
    case ScoringFunc::kSoftmax:
      break;  // needs the whole row: handled by the caller
  }
  DSV41_CHECK(false, "unhandled scoring function");
  return 0.0f;
}

}  // namespace

void RouteToken(std::span<const float> logits, std::span<const float> bias,
                const RouterOptions& options, std::span<int32_t> experts,
                std::span<float> weights) {
  const size_t num_experts = logits.size();
  const size_t k = static_cast<size_t>(options.top_k);
  DSV41_CHECK(bias.size() == num_experts && experts.size() == k && weights.size() == k && k >= 1 &&
                  k <= num_experts,
              "router sizes: %zu logits, %zu bias, k %zu", num_experts, bias.size(), k);
  std::vector<float> scores(num_experts);
  for (size_t e = 0; e < num_experts; ++e) {
    scores[e] = options.gate_temp == 1.0f ? logits[e] : logits[e] / options.gate_temp;
  }
  if (options.scoring_func == ScoringFunc::kSoftmax) {
    float max_z = -std::numeric_limits<float>::infinity();
    for (float z : scores) max_z = std::max(max_z, z);
    for (float& z : scores) z = CrExp(z - max_z);
    const float denom = SeqSum(scores);
    for (float& z : scores) z = z / denom;
  } else {
    for (float& z : scores) z = Score(options.scoring_func, z);
  }
  std::vector<float> biased(num_experts);
  for (size_t e = 0; e < num_experts; ++e) biased[e] = scores[e] + bias[e];

  // §8 step 5: descending biased score, the lower expert id first on ties. Repeated scans with a
  // strict comparison keep the first (lowest-id) maximum; k is small (6 in the release).
  std::vector<bool> taken(num_experts, false);
  for (size_t slot = 0; slot < k; ++slot) {
    size_t best = num_experts;
    for (size_t e = 0; e < num_experts; ++e) {
      if (taken[e]) continue;
      if (best == num_experts || biased[e] > biased[best]) best = e;
    }
    taken[best] = true;
    experts[slot] = static_cast<int32_t>(best);
    weights[slot] = scores[best];
  }
  if (options.norm_topk_prob && k > 1) {
    const float denom = SeqSum(weights) + 1e-20f;
    for (float& w : weights) w = w / denom;
  }
  for (float& w : weights) w = w * options.routed_scaling_factor;
}

float SwigluActivation(float g, float u, float limit, float weight) {
  if (limit > 0.0f) {
    u = std::min(std::max(u, -limit), limit);
    g = std::min(g, limit);
  }
  const float a = Silu(g) * u;
  return weight * a;
}

Result<Moe> Moe::Load(const ModelWeights& weights, std::string_view prefix,
                      const MoeOptions& options) {
  const ModelConfig& config = weights.config();
  const bool is_dspark = prefix.substr(0, 4) == "mtp.";
  const int64_t num_experts = is_dspark ? config.dspark_n_routed_experts : config.n_routed_experts;
  const int32_t top_k = is_dspark ? config.dspark_num_experts_per_tok : config.num_experts_per_tok;
  const std::string p(prefix);
  if (num_experts <= 0 || top_k <= 0 || top_k > num_experts) {
    return InvalidArgumentError("%s: %lld routed experts with top-%d", p.c_str(),
                                static_cast<long long>(num_experts), top_k);
  }
  Moe moe;
  moe.prefix_ = p;
  moe.options_ = options;
  moe.hidden_size_ = config.hidden_size;
  moe.intermediate_size_ = config.moe_intermediate_size;
  moe.router_ =
      RouterOptions{.scoring_func = config.scoring_func,
                    .top_k = top_k,
                    .gate_temp = static_cast<float>(config.gate_temp),
                    .norm_topk_prob = config.norm_topk_prob,
                    .routed_scaling_factor = static_cast<float>(config.routed_scaling_factor)};
  moe.swiglu_limit_ = static_cast<float>(config.swiglu_limit);
  const int64_t hidden = moe.hidden_size_;
  const int64_t inter = moe.intermediate_size_;

  const std::string gate = p + ".ffn.gate";
  DSV41_ASSIGN_OR_RETURN(moe.gate_, GetLinear(weights, gate, num_experts, hidden));
  if (moe.gate_.format != WeightFormat::kBf16 && moe.gate_.format != WeightFormat::kF32) {
    return InvalidArgumentError("'%s.weight': the router runs in fp32; want BF16 or F32",
                                gate.c_str());
  }
  DSV41_ASSIGN_OR_RETURN(moe.bias_, ReadF32Vector(weights, gate + ".bias", num_experts));
  DSV41_ASSIGN_OR_RETURN(moe.bias_vl_, ReadF32Vector(weights, gate + ".bias_vl", num_experts));

  auto load_expert = [&](const std::string& expert_prefix) -> Result<Expert> {
    Expert expert;
    DSV41_ASSIGN_OR_RETURN(expert.w1, GetLinear(weights, expert_prefix + ".w1", inter, hidden));
    DSV41_ASSIGN_OR_RETURN(expert.w2, GetLinear(weights, expert_prefix + ".w2", hidden, inter));
    DSV41_ASSIGN_OR_RETURN(expert.w3, GetLinear(weights, expert_prefix + ".w3", inter, hidden));
    return expert;
  };
  moe.experts_.reserve(static_cast<size_t>(num_experts));
  for (int64_t e = 0; e < num_experts; ++e) {
    DSV41_ASSIGN_OR_RETURN(Expert expert, load_expert(p + ".ffn.experts." + std::to_string(e)));
    moe.experts_.push_back(expert);
  }
  DSV41_ASSIGN_OR_RETURN(moe.shared_, load_expert(p + ".ffn.shared_experts"));
  return moe;
}

void Moe::Product(const LinearWeight& w, std::span<const float> x, int64_t rows, std::span<float> y,
                  ThreadPool* pool) const {
  if (options_.reference_linear) {
    LinearRef(w, x, rows, y, LinearOptionsFor(w));
  } else {
    Linear(w, x, rows, y, LinearOptionsFor(w), pool);
  }
}

void Moe::RunExpert(const Expert& expert, std::span<const float> xs, int64_t rows,
                    std::span<const float> row_weights, std::span<float> out, std::span<float> g,
                    std::span<float> u, ThreadPool* pool) const {
  // §12.4: w1/w3 outputs are bf16; §12.5: the SwiGLU product is rounded to bf16 before w2.
  Product(expert.w1, xs, rows, g, pool);
  Product(expert.w3, xs, rows, u, pool);
  for (int64_t r = 0; r < rows; ++r) {
    const float weight = row_weights.empty() ? 1.0f : row_weights[static_cast<size_t>(r)];
    for (int64_t j = 0; j < intermediate_size_; ++j) {
      const size_t i = static_cast<size_t>(r * intermediate_size_ + j);
      // The shared expert's weight 1 multiplies exactly.
      g[i] = Bf16Round(SwigluActivation(Bf16Round(g[i]), Bf16Round(u[i]), swiglu_limit_, weight));
    }
  }
  Product(expert.w2, g, rows, out, pool);
  for (float& v : out) v = Bf16Round(v);
}

void Moe::Forward(std::span<const float> x, int64_t num_tokens, std::span<float> y,
                  MoeRouting* routing, ExecContext& ctx, std::span<const uint8_t> in_image) const {
  ArenaScope scope(ctx.arena);
  StepArena& arena = ctx.arena;
  ThreadPool* pool = &ctx.pool;
  const int64_t hidden = hidden_size_;
  const int64_t num_experts = static_cast<int64_t>(experts_.size());
  const int32_t k = router_.top_k;
  DSV41_CHECK(x.size() == static_cast<size_t>(num_tokens * hidden) && y.size() == x.size(),
              "%s: x %zu, y %zu floats for %lld tokens of %lld", prefix_.c_str(), x.size(),
              y.size(), static_cast<long long>(num_tokens), static_cast<long long>(hidden));
  DSV41_CHECK(in_image.empty() || in_image.size() == static_cast<size_t>(num_tokens),
              "in_image has %zu entries for %lld tokens", in_image.size(),
              static_cast<long long>(num_tokens));

  // §8 Gate: fp32 logits of the bf16-valued input against the fp32 (bf16-stored) gate weight.
  std::span<float> logits = arena.Alloc<float>(static_cast<size_t>(num_tokens * num_experts));
  Product(gate_, x, num_tokens, logits, pool);  // bf16/f32 gate: no quantisation
  std::span<int32_t> chosen = arena.Alloc<int32_t>(static_cast<size_t>(num_tokens * k));
  std::span<float> chosen_weights = arena.Alloc<float>(chosen.size());
  for (int64_t t = 0; t < num_tokens; ++t) {
    const bool image = !in_image.empty() && in_image[static_cast<size_t>(t)] != 0;
    RouteToken(logits.subspan(t * num_experts, num_experts), image ? bias_vl_ : bias_, router_,
               chosen.subspan(t * k, k), chosen_weights.subspan(t * k, k));
  }

  // Each expert runs once on the tokens routed to it; its bf16 outputs are added into a zero fp32
  // accumulator in increasing expert id (§12.8 item 3), then the shared expert's.
  // Every (token, slot) assignment grouped by expert in increasing id, tokens ascending: expert e
  // owns assignments first_of[e] .. first_of[e + 1] − 1.
  const int64_t num_assigned = num_tokens * k;
  std::span<int64_t> first_of = arena.AllocZeroed<int64_t>(num_experts + 1);
  for (int32_t e : chosen) ++first_of[e + 1];
  for (int64_t e = 0; e < num_experts; ++e) first_of[e + 1] += first_of[e];
  std::span<int64_t> token_of = arena.Alloc<int64_t>(num_assigned);
  std::span<float> weight_of = arena.Alloc<float>(num_assigned);
  {
    std::span<int64_t> next = arena.Alloc<int64_t>(num_experts);
    std::copy_n(first_of.begin(), num_experts, next.begin());
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int32_t s = 0; s < k; ++s) {
        const int64_t slot = next[chosen[static_cast<size_t>(t * k + s)]]++;
        token_of[slot] = t;
        weight_of[slot] = chosen_weights[static_cast<size_t>(t * k + s)];
      }
    }
  }
  std::span<int32_t> active = arena.Alloc<int32_t>(num_experts);
  int64_t num_active = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (first_of[e + 1] > first_of[e]) active[num_active++] = static_cast<int32_t>(e);
  }

  // Gathered inputs, outputs and hidden activations of every assignment, drawn before any
  // parallel region: expert e uses rows first_of[e] .. of each.
  const int64_t inter = intermediate_size_;
  std::span<float> xs = arena.Alloc<float>(static_cast<size_t>(num_assigned * hidden));
  std::span<float> outs = arena.Alloc<float>(static_cast<size_t>(num_assigned * hidden));
  std::span<float> gs = arena.Alloc<float>(static_cast<size_t>(num_assigned * inter));
  std::span<float> us = arena.Alloc<float>(static_cast<size_t>(num_assigned * inter));
  for (int64_t a = 0; a < num_assigned; ++a) {
    std::copy_n(x.begin() + token_of[a] * hidden, hidden, xs.begin() + a * hidden);
  }
  auto run_expert = [&](int64_t e, ThreadPool* expert_pool) {
    const int64_t first = first_of[e];
    const int64_t rows = first_of[e + 1] - first;
    RunExpert(experts_[static_cast<size_t>(e)], xs.subspan(first * hidden, rows * hidden), rows,
              weight_of.subspan(first, rows), outs.subspan(first * hidden, rows * hidden),
              gs.subspan(first * inter, rows * inter), us.subspan(first * inter, rows * inter),
              expert_pool);
  };
  // With many experts active (several tokens in a step), each thread runs whole experts alone:
  // one fork-join per layer instead of three per expert. With few, each expert's products are
  // split across the threads. Linear gives the same bits either way.
  const int num_threads = ctx.pool.num_threads();
  if (num_threads > 1 && num_active >= 2 * num_threads) {
    ctx.pool.ParallelFor(num_active, 1, [&](int64_t begin, int64_t end, int /*thread_idx*/) {
      for (int64_t i = begin; i < end; ++i) run_expert(active[i], nullptr);
    });
  } else {
    for (int64_t i = 0; i < num_active; ++i) run_expert(active[i], pool);
  }

  // The bf16 expert outputs are added into a zero fp32 accumulator in increasing expert id
  // (§12.8 item 3), then the shared expert's.
  std::span<float> acc = arena.AllocZeroed<float>(static_cast<size_t>(num_tokens * hidden));
  for (int64_t a = 0; a < num_assigned; ++a) {
    float* dst = acc.data() + token_of[a] * hidden;
    const float* src = outs.data() + a * hidden;
    for (int64_t d = 0; d < hidden; ++d) dst[d] = dst[d] + src[d];
  }
  std::span<float> shared_out = arena.Alloc<float>(static_cast<size_t>(num_tokens * hidden));
  RunExpert(shared_, x, num_tokens, {}, shared_out,
            arena.Alloc<float>(static_cast<size_t>(num_tokens * inter)),
            arena.Alloc<float>(static_cast<size_t>(num_tokens * inter)), pool);
  for (size_t i = 0; i < acc.size(); ++i) y[i] = Bf16Round(acc[i] + shared_out[i]);

  if (routing != nullptr) {
    routing->top_k = k;
    routing->experts.assign(chosen.begin(), chosen.end());
    routing->weights.assign(chosen_weights.begin(), chosen_weights.end());
  }
}

}  // namespace dsv41

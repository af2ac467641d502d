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
                const RouterOptions& options, std::span<int32_t> experts, std::span<float> weights,
                std::span<float> scratch) {
  const size_t num_experts = logits.size();
  const size_t k = static_cast<size_t>(options.top_k);
  DSV41_CHECK(bias.size() == num_experts && experts.size() == k && weights.size() == k && k >= 1 &&
                  k <= num_experts,
              "router sizes: %zu logits, %zu bias, k %zu", num_experts, bias.size(), k);
  std::vector<float> owned;
  if (scratch.size() < 2 * num_experts) {
    owned.resize(2 * num_experts);
    scratch = owned;
  }
  const std::span<float> scores = scratch.first(num_experts);
  const std::span<float> biased = scratch.subspan(num_experts, num_experts);
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
  for (size_t e = 0; e < num_experts; ++e) biased[e] = scores[e] + bias[e];

  // §8 step 5: descending biased score, the lower expert id first on ties. Repeated scans with a
  // strict comparison keep the first (lowest-id) maximum; k is small (6 in the release). A chosen
  // expert is skipped by id.
  for (size_t slot = 0; slot < k; ++slot) {
    size_t best = num_experts;
    for (size_t e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (size_t s = 0; s < slot; ++s) taken |= static_cast<size_t>(experts[s]) == e;
      if (taken) continue;
      if (best == num_experts || biased[e] > biased[best]) best = e;
    }
    experts[slot] = static_cast<int32_t>(best);
    weights[slot] = scores[best];
  }
  if (options.norm_topk_prob && k > 1) {
    const float denom = SeqSum(weights) + 1e-20f;
    for (float& w : weights) w = w / denom;
  }
  for (float& w : weights) w = w * options.routed_scaling_factor;
}

Result<Moe> Moe::Load(const ModelWeights& weights, std::string_view prefix) {
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
  moe.num_experts_ = num_experts;
  moe.moe_idx_ = MoeIndex(config, p);
  moe.shard_ = weights.shard();
  moe.owned_ = ShardExperts(num_experts, moe.moe_idx_, moe.shard_);
  moe.experts_.reserve(static_cast<size_t>(moe.owned_.size()));
  for (int64_t e = moe.owned_.begin; e < moe.owned_.end; ++e) {
    DSV41_ASSIGN_OR_RETURN(Expert expert, load_expert(p + ".ffn.experts." + std::to_string(e)));
    moe.experts_.push_back(expert);
  }
  DSV41_ASSIGN_OR_RETURN(moe.shared_, load_expert(p + ".ffn.shared_experts"));
  return moe;
}

ExpertAssignments GroupByExpert(std::span<const int32_t> chosen,
                                std::span<const float> chosen_weights, int64_t num_tokens,
                                int32_t k, int64_t num_experts, StepArena& arena) {
  DSV41_CHECK(chosen.size() == static_cast<size_t>(num_tokens * k) &&
                  chosen_weights.size() == chosen.size(),
              "%zu routed slots for %lld tokens of top-%d", chosen.size(),
              static_cast<long long>(num_tokens), k);
  ExpertAssignments a;
  a.num_assigned = num_tokens * k;
  a.first_of = arena.AllocZeroed<int64_t>(num_experts + 1);
  for (int32_t e : chosen) ++a.first_of[e + 1];
  for (int64_t e = 0; e < num_experts; ++e) a.first_of[e + 1] += a.first_of[e];
  a.token_of = arena.Alloc<int64_t>(a.num_assigned);
  a.weight_of = arena.Alloc<float>(a.num_assigned);
  {
    ArenaScope scope(arena);
    std::span<int64_t> next = arena.Alloc<int64_t>(num_experts);
    std::copy_n(a.first_of.begin(), num_experts, next.begin());
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int32_t s = 0; s < k; ++s) {
        const int64_t slot = next[chosen[static_cast<size_t>(t * k + s)]]++;
        a.token_of[slot] = t;
        a.weight_of[slot] = chosen_weights[static_cast<size_t>(t * k + s)];
      }
    }
  }
  std::span<int32_t> active = arena.Alloc<int32_t>(num_experts);
  int64_t num_active = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (a.first_of[e + 1] > a.first_of[e]) active[num_active++] = static_cast<int32_t>(e);
  }
  a.active = active.first(static_cast<size_t>(num_active));
  return a;
}

namespace {

// y = the bf16 expert outputs added into a zero fp32 accumulator in increasing expert id (§12.8
// item 3; `outs` holds the assignments in expert order, then the shared expert's row per token),
// then the shared expert's; y is bf16.
void CombineExpertOutputs(const ExpertAssignments& a, std::span<const float> outs,
                          int64_t num_tokens, int64_t hidden, std::span<float> y,
                          ExecContext& ctx) {
  ctx.pool.ParallelFor(num_tokens, 1, [&](int64_t begin, int64_t end, int /*thread_idx*/) {
    for (int64_t t = begin; t < end; ++t) {
      float* dst = y.data() + t * hidden;
      std::fill_n(dst, hidden, 0.0f);
    }
    for (int64_t i = 0; i < a.num_assigned; ++i) {
      const int64_t t = a.token_of[i];
      if (t < begin || t >= end) continue;
      float* dst = y.data() + t * hidden;
      const float* src = outs.data() + i * hidden;
      for (int64_t d = 0; d < hidden; ++d) dst[d] = dst[d] + Bf16Round(src[d]);
    }
    for (int64_t t = begin; t < end; ++t) {
      float* dst = y.data() + t * hidden;
      const float* src = outs.data() + (a.num_assigned + t) * hidden;
      for (int64_t d = 0; d < hidden; ++d) dst[d] = Bf16Round(dst[d] + Bf16Round(src[d]));
    }
  });
}

}  // namespace

void Moe::Route(std::span<const float> x, int64_t num_tokens, std::span<const uint8_t> in_image,
                std::span<int32_t> chosen, std::span<float> chosen_weights,
                ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  const int64_t num_experts = num_experts_;
  const int32_t k = router_.top_k;
  // §8 Gate: fp32 logits of the bf16-valued input against the fp32 (bf16-stored) gate weight.
  std::span<float> logits = ctx.arena.Alloc<float>(static_cast<size_t>(num_tokens * num_experts));
  LinearProduct(gate_, x, num_tokens, logits, ctx);  // bf16/f32 gate: no quantisation
  std::span<float> scratch = ctx.arena.Alloc<float>(static_cast<size_t>(2 * num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const bool image = !in_image.empty() && in_image[static_cast<size_t>(t)] != 0;
    RouteToken(logits.subspan(t * num_experts, num_experts), image ? bias_vl_ : bias_, router_,
               chosen.subspan(t * k, k), chosen_weights.subspan(t * k, k), scratch);
  }
}

const Moe::Expert& Moe::OwnedExpert(int32_t expert) const {
  DSV41_DCHECK(owned_.contains(expert), "%s: expert %d is not this rank's", prefix_.c_str(),
               expert);
  return experts_[static_cast<size_t>(expert - owned_.begin)];
}

void Moe::RunExperts(std::span<const float> x, int64_t num_tokens, const ExpertAssignments& a,
                     std::span<const int32_t> experts, bool shared, std::span<float> outs,
                     ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  StepArena& arena = ctx.arena;
  const int64_t hidden = hidden_size_;
  const int64_t inter = intermediate_size_;
  const int64_t num_assigned = a.num_assigned;
  const int64_t num_routed = static_cast<int64_t>(experts.size());
  // The experts' assignments are one run of rows (they are consecutive in a.active); the shared
  // expert's rows follow all assignments, one per token.
  const int64_t routed_begin = num_routed > 0 ? a.first_of[experts.front()] : 0;
  const int64_t routed_rows = num_routed > 0 ? a.first_of[experts.back() + 1] - routed_begin : 0;
  const int64_t shared_rows = shared ? num_tokens : 0;
  const int64_t num_units = num_routed + (shared ? 1 : 0);
  if (num_units == 0) return;
  // xs gathers the assignments' inputs (each unit its own rows, as it prepares them).
  std::span<float> xs = arena.Alloc<float>(static_cast<size_t>(num_assigned * hidden));
  const int64_t hidden_rows = num_assigned + num_tokens;
  std::span<float> gs = arena.Alloc<float>(static_cast<size_t>(hidden_rows * inter));
  std::span<float> us = arena.Alloc<float>(gs.size());

  // Units 0..num_routed−1 are the routed experts, num_routed the shared expert.
  const auto expert_at = [&](int64_t i) -> const Expert& {
    return i < num_routed ? OwnedExpert(experts[i]) : shared_;
  };
  const auto first_row = [&](int64_t i) {
    return i < num_routed ? a.first_of[experts[i]] : num_assigned;
  };
  const auto num_rows = [&](int64_t i) {
    return i < num_routed ? a.first_of[experts[i] + 1] - a.first_of[experts[i]] : num_tokens;
  };
  // Every unit's input to `weight_of(i)` (w1 or w2), prepared from `input_of(i)` (called in the
  // unit's task, which may first fill its rows): the storage is cut on this thread (the arena is
  // the engine thread's), the copies, quantisation and packing run in parallel over the units
  // when the rows are many (a prefill's; a decode step's few rows stay on this thread).
  // Below this many elements, row-wise work (input preparation, SwiGLU) stays on this thread.
  constexpr int64_t kParallelElements = int64_t{1} << 16;
  std::span<LinearInput> prepared = arena.Alloc<LinearInput>(static_cast<size_t>(num_units));
  const auto prepare_all = [&](const auto& weight_of, const auto& input_of) {
    std::span<std::span<std::byte>> storage =
        arena.Alloc<std::span<std::byte>>(static_cast<size_t>(num_units));
    int64_t elements = 0;
    for (int64_t i = 0; i < num_units; ++i) {
      const LinearWeight& w = weight_of(i);
      const GemmKernel kernel = SelectGemmKernel(w, LinearOptionsFor(w), ctx.numerics);
      storage[i] = arena.Alloc<std::byte>(LinearInputBytes(w, num_rows(i), kernel));
      elements += num_rows(i) * w.in;
    }
    const auto prepare_units = [&](int64_t begin, int64_t end, int /*thread_idx*/) {
      for (int64_t i = begin; i < end; ++i) {
        const LinearWeight& w = weight_of(i);
        const LinearOptions options = LinearOptionsFor(w);
        prepared[i] = PrepareLinearInput(w, input_of(i), num_rows(i), options,
                                         SelectGemmKernel(w, options, ctx.numerics), storage[i]);
      }
    };
    if (elements < kParallelElements) {
      prepare_units(0, num_units, 0);
    } else {
      ctx.pool.ParallelFor(num_units, 1, prepare_units);
    }
  };
  std::span<LinearJob> jobs = arena.Alloc<LinearJob>(static_cast<size_t>(2 * num_units));

  // w1 and w3 of every expert on its tokens, in one region (§12.4: bf16 outputs).
  prepare_all([&](int64_t i) -> const LinearWeight& { return expert_at(i).w1; },
              [&](int64_t i) -> std::span<const float> {
                if (i == num_routed) return x;
                const int64_t first = first_row(i), rows = num_rows(i);
                for (int64_t row = first; row < first + rows; ++row) {
                  std::copy_n(x.begin() + a.token_of[row] * hidden, hidden,
                              xs.begin() + row * hidden);
                }
                return std::span<const float>(xs).subspan(first * hidden, rows * hidden);
              });
  for (int64_t i = 0; i < num_units; ++i) {
    const Expert& ex = expert_at(i);
    const int64_t first = first_row(i);
    jobs[2 * i] = LinearJob{&ex.w1, prepared[i], gs.data() + first * inter, inter};
    jobs[2 * i + 1] = LinearJob{&ex.w3, prepared[i], us.data() + first * inter, inter};
  }
  RunLinearJobs(jobs, ctx);

  // §8, §12.5: g = bf16(weight · SwiGLU(bf16(g), bf16(u))), the input of w2 (the shared expert's
  // weight 1 multiplies exactly). Index j < routed_rows is assignment row routed_begin + j, the
  // rest the shared expert's rows.
  // A decode step's few rows run on this thread: their work is shorter than a fork-join.
  const int64_t swiglu_rows = routed_rows + shared_rows;
  ctx.pool.ParallelFor(
      swiglu_rows, swiglu_rows * inter < kParallelElements ? std::max<int64_t>(swiglu_rows, 1) : 1,
      [&](int64_t begin, int64_t end, int /*thread_idx*/) {
        // The routed rows carry their routing weights, the shared expert's rows weight 1.
        const int64_t routed_end = std::min(end, routed_rows);
        if (begin < routed_end) {
          const int64_t row = routed_begin + begin, n = routed_end - begin;
          SwigluRowsSimd(gs.subspan(row * inter, n * inter),
                         std::span<const float>(us).subspan(row * inter, n * inter), n, inter,
                         a.weight_of.subspan(row, n), swiglu_limit_);
        }
        const int64_t shared_begin = std::max(begin, routed_rows);
        if (shared_begin < end) {
          const int64_t row = num_assigned + shared_begin - routed_rows, n = end - shared_begin;
          SwigluRowsSimd(gs.subspan(row * inter, n * inter),
                         std::span<const float>(us).subspan(row * inter, n * inter), n, inter, {},
                         swiglu_limit_);
        }
      });

  // w2 of every expert, in one region.
  prepare_all([&](int64_t i) -> const LinearWeight& { return expert_at(i).w2; },
              [&](int64_t i) {
                return std::span<const float>(gs).subspan(first_row(i) * inter,
                                                          num_rows(i) * inter);
              });
  for (int64_t i = 0; i < num_units; ++i) {
    const Expert& ex = expert_at(i);
    jobs[i] = LinearJob{&ex.w2, prepared[i], outs.data() + first_row(i) * hidden, hidden};
  }
  RunLinearJobs(jobs.first(static_cast<size_t>(num_units)), ctx);
}

void Moe::RunShardedExperts(std::span<const float> x, int64_t num_tokens,
                            const ExpertAssignments& a, std::span<float> outs,
                            ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  Communicator& comm = ctx.comm.get();
  DSV41_CHECK(comm.rank() == shard_.rank && comm.size() == shard_.num_ranks,
              "%s: loaded for rank %d of %d, run as rank %d of %d", prefix_.c_str(), shard_.rank,
              shard_.num_ranks, comm.rank(), comm.size());
  const int64_t hidden = hidden_size_;
  constexpr uint64_t kRowBytes = sizeof(float);
  // Rank p's outputs: the assignments of its experts, one run of rows in expert order.
  std::span<CommSegment> segments =
      ctx.arena.Alloc<CommSegment>(static_cast<size_t>(shard_.num_ranks));
  int64_t busiest = 0;
  for (int32_t p = 0; p < shard_.num_ranks; ++p) {
    const IndexRange held = ShardExperts(num_experts_, moe_idx_, RankShard{p, shard_.num_ranks});
    const int64_t first = a.first_of[held.begin], rows = a.first_of[held.end] - first;
    segments[static_cast<size_t>(p)] =
        CommSegment{.offset = static_cast<uint64_t>(first * hidden) * kRowBytes,
                    .size = static_cast<uint64_t>(rows * hidden) * kRowBytes};
    busiest = std::max(busiest, rows);
  }
  ctx.stats.routed_rows += static_cast<uint64_t>(a.num_assigned);
  ctx.stats.routed_rows_busiest_rank += static_cast<uint64_t>(busiest);
  // This rank's active experts: a consecutive run of a.active.
  const auto lo = std::lower_bound(a.active.begin(), a.active.end(), owned_.begin);
  const auto hi = std::lower_bound(lo, a.active.end(), owned_.end);
  RunExperts(x, num_tokens, a, std::span<const int32_t>(lo, hi), /*shared=*/false, outs, ctx);
  const std::span<std::byte> routed =
      std::as_writable_bytes(outs.first(static_cast<size_t>(a.num_assigned * hidden)));
  const CommTicket gather = comm.StartAllGather(CommKind::kMoe, routed, segments);
  RunExperts(x, num_tokens, a, {}, /*shared=*/true, outs, ctx);  // overlaps the gather
  comm.Wait(gather);
}

void Moe::Forward(std::span<const float> x, int64_t num_tokens, std::span<float> y,
                  ExecContext& ctx, std::span<const uint8_t> in_image) const {
  ArenaScope scope(ctx.arena);
  StepArena& arena = ctx.arena;
  const int64_t hidden = hidden_size_;
  const int64_t num_experts = num_experts_;
  const int32_t k = router_.top_k;
  DSV41_CHECK(x.size() == static_cast<size_t>(num_tokens * hidden) && y.size() == x.size(),
              "%s: x %zu, y %zu floats for %lld tokens of %lld", prefix_.c_str(), x.size(),
              y.size(), static_cast<long long>(num_tokens), static_cast<long long>(hidden));
  DSV41_CHECK(in_image.empty() || in_image.size() == static_cast<size_t>(num_tokens),
              "in_image has %zu entries for %lld tokens", in_image.size(),
              static_cast<long long>(num_tokens));
  if (num_tokens == 0) return;

  std::span<int32_t> chosen = arena.Alloc<int32_t>(static_cast<size_t>(num_tokens * k));
  std::span<float> chosen_weights = arena.Alloc<float>(chosen.size());
  Route(x, num_tokens, in_image, chosen, chosen_weights, ctx);
  const ExpertAssignments assignments =
      GroupByExpert(chosen, chosen_weights, num_tokens, k, num_experts, arena);
  std::span<float> outs =
      arena.Alloc<float>(static_cast<size_t>((assignments.num_assigned + num_tokens) * hidden));
  if (shard_.num_ranks == 1) {
    RunExperts(x, num_tokens, assignments, assignments.active, /*shared=*/true, outs, ctx);
  } else {
    RunShardedExperts(x, num_tokens, assignments, outs, ctx);
  }
  CombineExpertOutputs(assignments, outs, num_tokens, hidden, y, ctx);
  ctx.observer.get().OnMoeRouting(prefix_, k, chosen, chosen_weights);
}

}  // namespace dsv41

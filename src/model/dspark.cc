#include "model/dspark.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "base/check.h"
#include "base/thread_pool.h"
#include "checkpoint/dtype.h"
#include "model/hc_block.h"
#include "model/linear_weight.h"
#include "model/weights.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// The index of the highest value, the lowest index on ties (model.md §11.4 step 4).
int32_t Argmax(std::span<const float> v) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(v.size()); ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

}  // namespace

Result<std::unique_ptr<DsparkModel>> DsparkModel::Load(const ModelWeights& weights) {
  const ModelConfig& c = weights.config();
  const int32_t num_stages = weights.plan().num_dspark_stages;
  if (num_stages < 1) {
    return InvalidArgumentError(
        "DSpark: the config has no draft stages (num_nextn_predict_layers %d)",
        c.num_nextn_predict_layers);
  }
  std::unique_ptr<DsparkModel> m(new DsparkModel());
  m->config_ = c;
  m->dims_ = MhcDimsFromConfig(c);
  m->norm_eps_ = static_cast<float>(c.rms_norm_eps);
  const int64_t hidden = c.hidden_size;
  const int64_t rank = c.dspark_markov_rank;
  DSV41_ASSIGN_OR_RETURN(m->head_, GetHeadWeights(weights));
  // checkpoint.md §6.8: main_proj and main_norm on the first stage, the heads on the last.
  const std::string first = "mtp.0";
  const std::string last = "mtp." + std::to_string(num_stages - 1);
  DSV41_ASSIGN_OR_RETURN(m->main_proj_, GetLinear(weights, first + ".main_proj", hidden,
                                                  static_cast<int64_t>(c.dspark_in())));
  DSV41_ASSIGN_OR_RETURN(m->main_norm_,
                         GetNormWeight(weights, first + ".main_norm.weight", hidden));
  DSV41_ASSIGN_OR_RETURN(m->final_norm_, GetNormWeight(weights, last + ".norm.weight", hidden));
  const std::string embed_name = last + ".markov_head.embed.weight";
  DSV41_ASSIGN_OR_RETURN(TensorView embed, weights.Get(embed_name));
  if (embed.dtype != DType::kBF16 || embed.shape != Shape{c.vocab_size, rank}) {
    return InvalidArgumentError("'%s': want BF16 [%d, %lld]", embed_name.c_str(), c.vocab_size,
                                static_cast<long long>(rank));
  }
  m->markov_embed_ = embed.bytes;
  DSV41_ASSIGN_OR_RETURN(m->markov_head_,
                         GetLinear(weights, last + ".markov_head.head", c.vocab_size, rank));
  DSV41_ASSIGN_OR_RETURN(m->confidence_,
                         GetLinear(weights, last + ".confidence_head.proj", 1, hidden + rank));
  for (int32_t j = 0; j < num_stages; ++j) {
    const std::string p = "mtp." + std::to_string(j);
    Stage stage;
    DSV41_ASSIGN_OR_RETURN(stage.attention, Attention::CreateDsparkStage(weights, j));
    DSV41_ASSIGN_OR_RETURN(Moe moe, Moe::Load(weights, p));
    stage.moe = std::make_unique<Moe>(std::move(moe));
    DSV41_ASSIGN_OR_RETURN(stage.hc, GetHcBlockWeights(weights, p, m->dims_));
    m->stages_.push_back(std::move(stage));
  }
  return m;
}

Status DsparkModel::CheckWindowBlocks(const KvCacheView& cache,
                                      std::span<const std::vector<uint32_t>> tables,
                                      int64_t first_pos, int64_t last_pos) const {
  const KvCacheLayout& layout = *cache.layout;
  if (static_cast<int32_t>(layout.draft.size()) != num_stages()) {
    return InvalidArgumentError("DSpark: the KV cache has %zu draft windows for %d stages",
                                layout.draft.size(), num_stages());
  }
  if (static_cast<int32_t>(tables.size()) != layout.num_groups) {
    return InvalidArgumentError("DSpark: %zu block tables, the cache has %d groups", tables.size(),
                                layout.num_groups);
  }
  if (first_pos > last_pos) return Status();
  for (const KvRowPlace& place : layout.draft) {
    const std::span<const uint32_t> table = tables[place.group_idx];
    for (int64_t b = first_pos / place.rows_per_page; b <= last_pos / place.rows_per_page; ++b) {
      const uint32_t id = BlockAt(table, b);
      if (id >= cache.num_blocks) {
        return InvalidArgumentError("DSpark: draft group %d has no block %lld (id %u of %u)",
                                    place.group_idx, static_cast<long long>(b), id,
                                    cache.num_blocks);
      }
    }
  }
  return Status();
}

Status DsparkModel::SeedWindows(std::span<const float> main_hidden,
                                std::span<const BatchRequest> rows, const KvCacheView& cache,
                                ExecContext& ctx) const {
  const int64_t width = main_hidden_width();
  const int64_t num_rows = static_cast<int64_t>(main_hidden.size()) / width;
  if (num_rows * width != static_cast<int64_t>(main_hidden.size())) {
    return InvalidArgumentError("DSpark: main_hidden of %zu floats is not rows of %lld",
                                main_hidden.size(), static_cast<long long>(width));
  }
  int32_t next_row = 0;
  for (const BatchRequest& r : rows) {
    if (r.first_row != next_row || r.num_tokens < 1 || r.start_pos < 0) {
      return InvalidArgumentError(
          "DSpark: seed rows [%d, +%d) at position %d do not continue row %d", r.first_row,
          r.num_tokens, r.start_pos, next_row);
    }
    DSV41_RETURN_IF_ERROR(
        CheckWindowBlocks(cache, r.block_tables, r.start_pos, r.start_pos + r.num_tokens - 1));
    next_row += r.num_tokens;
  }
  if (next_row != num_rows) {
    return InvalidArgumentError("DSpark: seed rows cover %d of %lld main_hidden rows", next_row,
                                static_cast<long long>(num_rows));
  }
  if (num_rows == 0) return Status();
  ArenaScope scope(ctx.arena);
  std::span<float> main_x = ctx.arena.Alloc<float>(num_rows * config_.hidden_size);
  LinearBf16(main_proj_, main_hidden, num_rows, main_x, ctx);
  RmsNormRows(main_x, num_rows, main_norm_, norm_eps_, main_x);
  for (const Stage& stage : stages_) stage.attention->WriteWindowRows(main_x, rows, cache, ctx);
  return Status();
}

void DsparkModel::MarkovTokens(std::span<const DraftRequest> requests, std::span<const float> z,
                               std::span<float> logits, DraftResult& out, ExecContext& ctx) const {
  const int64_t num_requests = static_cast<int64_t>(requests.size());
  const int64_t block = config_.dspark_block_size;
  const int64_t rows = num_requests * block;
  const int64_t vocab = config_.vocab_size;
  const int64_t dim = config_.hidden_size;
  const int64_t rank = config_.dspark_markov_rank;
  StepArena& arena = ctx.arena;
  // Step 4: the Markov head, sequential over the block (o[0] = t1), every request at once;
  // step 5's confidence inputs [z_i ; e_i] are gathered on the way.
  std::span<float> e = arena.Alloc<float>(num_requests * rank);
  std::span<float> bias = arena.Alloc<float>(num_requests * vocab);
  std::span<float> conf_in = arena.Alloc<float>(rows * (dim + rank));
  std::span<int32_t> prev = arena.Alloc<int32_t>(num_requests);
  for (int64_t r = 0; r < num_requests; ++r) prev[r] = requests[r].token;
  for (int64_t i = 0; i < block; ++i) {
    for (int64_t r = 0; r < num_requests; ++r) {
      const std::byte* row = markov_embed_.data() + static_cast<size_t>(prev[r]) * rank * 2;
      for (int64_t d = 0; d < rank; ++d) {
        uint16_t bits;
        std::memcpy(&bits, row + 2 * d, 2);
        e[r * rank + d] = F32FromBf16(bits);
      }
      const int64_t t = r * block + i;
      std::copy_n(z.begin() + t * dim, dim, conf_in.begin() + t * (dim + rank));
      std::copy_n(e.begin() + r * rank, rank, conf_in.begin() + t * (dim + rank) + dim);
    }
    Linear(markov_head_, e, num_requests, bias, LinearOptionsFor(markov_head_), ctx);
    for (int64_t r = 0; r < num_requests; ++r) {
      const std::span<float> u = logits.subspan((r * block + i) * vocab, vocab);
      for (int64_t v = 0; v < vocab; ++v) u[v] = u[v] + bias[r * vocab + v];
      prev[r] = Argmax(u);
      out.tokens[r * block + i] = prev[r];
    }
  }
  // Step 5: c_i = proj · [z_i ; e_i] (fp32, raw).
  Linear(confidence_, conf_in, rows, out.confidence, LinearOptionsFor(confidence_), ctx);
}

Status DsparkModel::Draft(std::span<const DraftRequest> requests, const KvCacheView& cache,
                          bool want_logits, DraftResult& out, ExecContext& ctx) const {
  const int64_t num_requests = static_cast<int64_t>(requests.size());
  const int64_t block = config_.dspark_block_size;
  const int64_t rows = num_requests * block;
  const int64_t vocab = config_.vocab_size;
  const int64_t dim = config_.hidden_size;
  const size_t hc = static_cast<size_t>(dims_.hc_mult);
  const size_t stream = hc * dim;
  const int32_t window = config_.sliding_window;
  out.tokens.assign(rows, 0);
  out.confidence.assign(rows, 0.0f);
  out.logits.assign(want_logits ? rows * vocab : 0, 0.0f);
  if (num_requests == 0) return Status();
  for (const DraftRequest& r : requests) {
    if (r.token < 0 || r.token >= vocab || r.last_pos < 0) {
      return InvalidArgumentError("DSpark: draft from token %d after position %d", r.token,
                                  r.last_pos);
    }
    DSV41_RETURN_IF_ERROR(
        CheckWindowBlocks(cache, r.block_tables, std::max(0, r.last_pos - window + 1), r.last_pos));
  }
  ArenaScope scope(ctx.arena);
  StepArena& arena = ctx.arena;

  // §11.4 step 1: [t1, N, …] at positions last_pos + 1 .., embedded into every stream.
  std::span<int32_t> ids = arena.Alloc<int32_t>(rows);
  std::fill(ids.begin(), ids.end(), config_.dspark_noise_token_id);
  std::span<BatchRequest> blocks = arena.Alloc<BatchRequest>(num_requests);
  for (int64_t i = 0; i < num_requests; ++i) {
    ids[i * block] = requests[i].token;
    blocks[i] = BatchRequest{.first_row = static_cast<int32_t>(i * block),
                             .num_tokens = static_cast<int32_t>(block),
                             .start_pos = requests[i].last_pos + 1,
                             .block_tables = requests[i].block_tables};
  }
  std::span<float> x = arena.Alloc<float>(rows * stream);
  DSV41_RETURN_IF_ERROR(EmbedTokens(head_, ids, dims_.hc_mult, x));
  std::span<float> pi = arena.Alloc<float>(rows * hc);
  const MhcMix initial = InitialPreMix(dims_.hc_mult);
  for (int64_t t = 0; t < rows; ++t) std::copy_n(initial.pre.begin(), hc, pi.begin() + t * hc);

  // Step 2: the stages as blocks (§4.4); the attention sees the stage's window of the main
  // positions and the whole block.
  std::span<MhcMix> mix_attn = arena.Alloc<MhcMix>(rows);
  std::span<MhcMix> mix_ffn = arena.Alloc<MhcMix>(rows);
  std::span<float> sub_in = arena.Alloc<float>(rows * dim);
  std::span<float> sub_out = arena.Alloc<float>(rows * dim);
  std::span<float> pre = arena.Alloc<float>(rows * hc);
  std::span<float> qr = arena.Alloc<float>(rows * config_.q_lora_rank);
  for (const Stage& stage : stages_) {
    SublayerInput(x, pi, rows, stage.hc.hc_attn, stage.hc.attn_norm, dims_, mix_attn, sub_in, ctx);
    {
      // wq_a and wkv in one region, then wq_b.
      ArenaScope stage_scope(arena);
      ProductsOfInput of_x(sub_in, rows);
      ProductsOfInput of_qr(qr, rows);
      stage.attention->QueueQueryLatent(of_x, qr);
      const Attention::Projections attended = stage.attention->QueueProjections(of_x, of_qr, arena);
      of_x.Run(ctx);
      stage.attention->NormQueryLatent(qr);
      of_qr.Run(ctx);
      stage.attention->ForwardProjected(attended, blocks, cache, {}, sub_out, ctx,
                                        AttentionMode::kDraftBlock);
    }
    SublayerOutput(sub_out, mix_attn, rows, dims_, x, pre);
    SublayerInput(x, pre, rows, stage.hc.hc_ffn, stage.hc.ffn_norm, dims_, mix_ffn, sub_in, ctx);
    stage.moe->Forward(sub_in, rows, sub_out, ctx);
    SublayerOutput(sub_out, mix_ffn, rows, dims_, x, pi);
  }

  // Step 3: z = hc_pre(X, preF of the last stage); U = head · RMSNorm(norm, z).
  std::span<float> z = arena.Alloc<float>(rows * dim);
  HcPreRows(x, pi, rows, z);
  std::span<float> hidden = arena.Alloc<float>(rows * dim);
  RmsNormRows(z, rows, final_norm_, norm_eps_, hidden);
  std::span<float> logits =
      want_logits ? std::span<float>(out.logits) : arena.Alloc<float>(rows * vocab);
  HeadLogits(head_, hidden, rows, logits, ctx);

  MarkovTokens(requests, z, logits, out, ctx);
  return Status();
}

}  // namespace dsv41

#include "model/forward.h"

#include <algorithm>
#include <string>
#include <utility>

#include "base/check.h"
#include "base/thread_pool.h"
#include "model/hc_block.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// model.md §11.2: main_hidden[k][target] = bf16(fp32(Σ_s X[s]) / hc_mult) of the streams of row
// rows[k] (the stream sum exact, one rounding; the division by a power of two is exact for the
// release's 4 streams).
void RecordMainHidden(std::span<const float> x, std::span<const int32_t> rows, int32_t target,
                      std::span<float> main_hidden, int32_t hc_mult, int64_t dim) {
  const size_t width = main_hidden.size() / rows.size();
  const float divisor = static_cast<float>(hc_mult);
  float streams[kMaxHcMult];
  for (size_t k = 0; k < rows.size(); ++k) {
    const float* xt = x.data() + static_cast<size_t>(rows[k]) * hc_mult * dim;
    float* out = main_hidden.data() + k * width + static_cast<size_t>(target) * dim;
    for (int64_t d = 0; d < dim; ++d) {
      for (int32_t s = 0; s < hc_mult; ++s) streams[s] = xt[s * dim + d];
      out[d] = Bf16Round(ExactSum(std::span<const float>(streams, hc_mult)) / divisor);
    }
  }
}

// Hands each request's selection at a ratio > 0 layer (and the candidate source's mask) to the
// observer.
void ReportSelections(const LayerRole& role, std::span<const BatchRequest> requests,
                      std::span<const IndexerForwardState> index_state,
                      std::span<const CompressedSelection> selections, ForwardObserver& observer,
                      StepArena& arena) {
  for (size_t i = 0; i < requests.size(); ++i) {
    ArenaScope scope(arena);
    const BatchRequest& r = requests[i];
    ForwardObserver::Selection s{.start_pos = r.start_pos,
                                 .num_tokens = r.num_tokens,
                                 .ratio = role.ratio,
                                 .entries = selections[i].entries,
                                 .per_token = selections[i].per_token,
                                 .candidates = {},
                                 .num_entries = (r.start_pos + r.num_tokens) / role.ratio};
    if (role.is_candidate_source) {  // the kept blocks as the observer's dense mask
      const IndexerForwardState::Candidates& cand = index_state[i].candidates[role.layer];
      const std::span<uint8_t> mask =
          arena.Alloc<uint8_t>(static_cast<size_t>(r.num_tokens) * s.num_entries);
      for (int64_t t = 0; t < r.num_tokens; ++t) {
        cand.RowMask(t, mask.subspan(t * s.num_entries, s.num_entries));
      }
      s.candidates = mask;
    }
    observer.OnSelection(role.layer, i, s);
  }
}

// vision.md §10 "Merge", before the ×4 expansion: a span row's streams all take its row of h
// (the aligner row or a learned delimiter) instead of the token's embedding. `in_span` [T]
// receives 1 for span rows (dead for Engram, bias_vl in the router), 0 for text.
void MergeSpanRows(const Batch& batch, int32_t hc_mult, int64_t dim, std::span<float> x,
                   std::span<uint8_t> in_span) {
  for (size_t t = 0; t < batch.span_roles.size(); ++t) {
    in_span[t] = batch.span_roles[t] >= 0 ? 1 : 0;
    if (in_span[t] == 0) continue;
    float* streams = x.data() + t * static_cast<size_t>(hc_mult * dim);
    for (int32_t s = 0; s < hc_mult; ++s) std::copy_n(batch.span_rows[t], dim, streams + s * dim);
  }
}

}  // namespace

Result<std::unique_ptr<TextModel>> TextModel::Load(const ModelWeights& weights) {
  std::unique_ptr<TextModel> model(new TextModel());
  model->config_ = weights.config();
  model->plan_ = weights.plan();
  model->dims_ = MhcDimsFromConfig(model->config_);
  model->norm_eps_ = static_cast<float>(model->config_.rms_norm_eps);
  DSV41_ASSIGN_OR_RETURN(model->head_, GetHeadWeights(weights));
  for (const LayerRole& role : model->plan_.layers) {
    const std::string p = "layers." + std::to_string(role.layer);
    Layer layer;
    layer.role = role;
    if (role.has_engram()) {
      DSV41_ASSIGN_OR_RETURN(EngramFusion engram, EngramFusion::Load(weights, role.layer));
      layer.engram = std::make_unique<EngramFusion>(std::move(engram));
    }
    DSV41_ASSIGN_OR_RETURN(layer.attention, dsv41::Attention::Create(weights, role.layer));
    if (role.is_kv_source) {
      DSV41_ASSIGN_OR_RETURN(layer.compressor, Compressor::Create(weights, p + ".attn", role));
    }
    if (role.is_index_source) {
      DSV41_ASSIGN_OR_RETURN(layer.indexer, Indexer::Create(weights, role.layer));
    }
    DSV41_ASSIGN_OR_RETURN(Moe moe, Moe::Load(weights, p));
    layer.moe = std::make_unique<Moe>(std::move(moe));
    DSV41_ASSIGN_OR_RETURN(layer.hc, GetHcBlockWeights(weights, p, model->dims_));
    model->layers_.push_back(std::move(layer));
  }
  return model;
}

size_t TextModel::StepScratchBytes(int32_t max_tokens) const {
  const ModelConfig& c = config_;
  const size_t hc = static_cast<size_t>(dims_.hc_mult);
  // Held across layers: streams, pre-mixes, mixes, sublayer in/out, qr.
  const size_t across = hc * c.hidden_size * 4 + 2 * sizeof(MhcMix) + 2 * c.hidden_size * 4 +
                        hc * 4 + c.q_lora_rank * 4;
  // The widest module: attention (q, o, kv, cos/sin, wo_a groups) or the MoE (logits, routing,
  // accumulator, gathered rows, expert hidden).
  const size_t attention = (2 * c.num_attention_heads * c.head_dim + 2 * c.head_dim +
                            c.qk_rope_head_dim + 2 * c.o_groups * c.o_lora_rank) *
                           4;
  const size_t moe = (c.n_routed_experts + 4 * c.hidden_size + 2 * c.moe_intermediate_size) * 4 +
                     16 * c.num_experts_per_tok;
  return static_cast<size_t>(std::max(max_tokens, 1)) * (across + std::max(attention, moe));
}

int64_t TextModel::MainHiddenWidth() const {
  return static_cast<int64_t>(config_.dspark_target_layer_ids.size()) * config_.hidden_size;
}

Status TextModel::CheckBatch(const Batch& batch, const KvCacheView& cache, size_t logits_size,
                             size_t main_hidden_size) const {
  const int32_t num_tokens = batch.num_tokens();
  const KvCacheLayout* layout = cache.layout;
  if (layout == nullptr || layout->swa.size() != layers_.size() ||
      layout->head_dim != config_.head_dim || layout->index_head_dim != config_.index_head_dim) {
    return InvalidArgumentError("batch: the KV cache is laid out for another model");
  }
  for (const Layer& layer : layers_) {
    const LayerRole& role = layer.role;
    const std::optional<KvSourcePlaces>& source = layout->sources[role.layer];
    if (role.is_kv_source != source.has_value() || (source && source->ratio != role.ratio)) {
      return InvalidArgumentError("batch: the KV cache has no source entry for layer %d",
                                  role.layer);
    }
  }
  for (int32_t t : batch.token_ids) {
    if (t < 0 || t >= config_.vocab_size) {
      return InvalidArgumentError("batch: token id %d outside [0, %d)", t, config_.vocab_size);
    }
  }
  int32_t row = 0;
  for (size_t i = 0; i < batch.requests.size(); ++i) {
    const BatchRequest& r = batch.requests[i];
    if (r.first_row != row || r.num_tokens < 1) {
      return InvalidArgumentError("batch request %zu: rows [%d, +%d) do not continue row %d", i,
                                  r.first_row, r.num_tokens, row);
    }
    if (r.start_pos < 0) {
      return InvalidArgumentError("batch request %zu: start position %d", i, r.start_pos);
    }
    const Status tables = CheckBlockTables(*layout, cache.num_blocks, r, config_.sliding_window);
    if (!tables.ok()) return tables.WithPrefix(StrFormat("batch request %zu", i));
    row += r.num_tokens;
  }
  if (row != num_tokens) {
    return InvalidArgumentError("batch: requests cover %d rows of %d tokens", row, num_tokens);
  }
  const int32_t num_engram = static_cast<int32_t>(config_.engram_layer_ids.size());
  const size_t want_rows =
      num_engram == 0 ? 0 : static_cast<size_t>(num_tokens) * num_engram * config_.n_hash_cols();
  if (batch.engram_rows.size() != want_rows) {
    return InvalidArgumentError("batch: %zu Engram row ids, want %zu", batch.engram_rows.size(),
                                want_rows);
  }
  // Row ids are checked up front so a bad one fails the step before any cache changes.
  for (const Layer& layer : layers_) {
    if (!layer.engram) continue;
    const int64_t num_rows = layer.engram->resident_rows().num_rows();
    const int32_t slot = *layer.role.engram_slot;
    for (int32_t t = 0; t < num_tokens; ++t) {
      for (int32_t c = 0; c < config_.n_hash_cols(); ++c) {
        const int64_t row =
            batch.engram_rows[(static_cast<size_t>(t) * num_engram + slot) * config_.n_hash_cols() +
                              c];
        if (row < 0 || row >= num_rows) {
          return InvalidArgumentError(
              "batch row %d: Engram row id %lld of layer %d outside [0, %lld)", t,
              static_cast<long long>(row), layer.role.layer, static_cast<long long>(num_rows));
        }
      }
    }
  }
  if (!batch.span_roles.empty() || !batch.span_rows.empty()) {
    if (batch.span_roles.size() != static_cast<size_t>(num_tokens) ||
        batch.span_rows.size() != static_cast<size_t>(num_tokens)) {
      return InvalidArgumentError("batch: %zu span roles and %zu span rows for %d tokens",
                                  batch.span_roles.size(), batch.span_rows.size(), num_tokens);
    }
    for (int32_t t = 0; t < num_tokens; ++t) {
      const int8_t role = batch.span_roles[static_cast<size_t>(t)];
      if (role < -1 || role > 3 ||
          (role >= 0 && batch.span_rows[static_cast<size_t>(t)] == nullptr)) {
        return InvalidArgumentError("batch row %d: span role %d without its row", t, role);
      }
    }
  }
  int32_t prev = -1;
  for (int32_t r : batch.logit_rows) {
    if (r <= prev || r >= num_tokens) {
      return InvalidArgumentError("batch: logit row %d not ascending within [0, %d)", r,
                                  num_tokens);
    }
    prev = r;
  }
  if (logits_size != batch.logit_rows.size() * static_cast<size_t>(config_.vocab_size)) {
    return InvalidArgumentError("batch: logits buffer of %zu floats, want %zu x %d", logits_size,
                                batch.logit_rows.size(), config_.vocab_size);
  }
  prev = -1;
  for (int32_t r : batch.main_hidden_rows) {
    if (r <= prev || r >= num_tokens) {
      return InvalidArgumentError("batch: main_hidden row %d not ascending within [0, %d)", r,
                                  num_tokens);
    }
    prev = r;
  }
  if (main_hidden_size != batch.main_hidden_rows.size() * MainHiddenWidth()) {
    return InvalidArgumentError("batch: main_hidden buffer of %zu floats, want %zu x %lld",
                                main_hidden_size, batch.main_hidden_rows.size(),
                                static_cast<long long>(MainHiddenWidth()));
  }
  return Status();
}

SyncEngramStepRows TextModel::MappedEngramRows() const {
  std::vector<const EngramRowSource*> tables(config_.engram_layer_ids.size());
  for (const Layer& layer : layers_) {
    if (layer.engram) tables[*layer.role.engram_slot] = &layer.engram->resident_rows();
  }
  return SyncEngramStepRows(std::move(tables), config_.n_hash_cols());
}

Status TextModel::Forward(const Batch& batch, const KvCacheView& cache, EngramStepRows& engram_rows,
                          ForwardOutputs out, ExecContext& ctx) const {
  DSV41_RETURN_IF_ERROR(CheckBatch(batch, cache, out.logits.size(), out.main_hidden.size()));
  ArenaScope scope(ctx.arena);
  StepArena& arena = ctx.arena;
  const int64_t num_tokens = batch.num_tokens();
  const size_t dim = static_cast<size_t>(config_.hidden_size);
  const size_t hc = static_cast<size_t>(dims_.hc_mult);
  const size_t stream = hc * dim;
  const size_t num_requests = batch.requests.size();

  // The residual streams [T, hc, dim], bf16 values.
  std::span<float> x = arena.Alloc<float>(num_tokens * stream);
  DSV41_RETURN_IF_ERROR(EmbedTokens(head_, batch.token_ids, dims_.hc_mult, x));
  // Empty for a text-only step: Engram and the router then see no span row.
  std::span<uint8_t> in_span = arena.Alloc<uint8_t>(batch.span_roles.size());
  MergeSpanRows(batch, dims_.hc_mult, config_.hidden_size, x, in_span);
  // One embedding row per token, the Engram rows of every token.
  ctx.stats.weight_bytes +=
      static_cast<uint64_t>(num_tokens) *
      (static_cast<uint64_t>(config_.hidden_size) * 2 +
       batch.engram_rows.size() / std::max<size_t>(1, num_tokens) *
           static_cast<uint64_t>(config_.engram_head_dim + config_.engram_head_dim / 32));
  std::span<float> pi = arena.Alloc<float>(num_tokens * hc);  // the incoming pre-mix [T, hc]
  {
    const MhcMix initial = InitialPreMix(dims_.hc_mult);
    for (int64_t t = 0; t < num_tokens; ++t) {
      std::copy_n(initial.pre.begin(), hc, pi.begin() + t * hc);
    }
  }
  std::span<MhcMix> mix_attn = arena.Alloc<MhcMix>(num_tokens);
  std::span<MhcMix> mix_ffn = arena.Alloc<MhcMix>(num_tokens);
  std::span<float> sub_in = arena.Alloc<float>(num_tokens * dim);
  std::span<float> sub_out = arena.Alloc<float>(num_tokens * dim);
  std::span<float> pre = arena.Alloc<float>(num_tokens * hc);
  // Per-forward shared state (§7.10), per request (maps of per-layer lists, kept across layers).
  std::span<IndexerForwardState> index_state =
      IndexerForwardState::Create(num_requests, layers_.size(), arena);
  std::span<float> qr = arena.Alloc<float>(num_tokens * config_.q_lora_rank);
  std::span<CompressedSelection> selections = arena.Alloc<CompressedSelection>(num_requests);

  for (const Layer& layer : layers_) {
    const LayerRole& role = layer.role;
    if (layer.engram) {  // §3: Engram fuses into the streams before the block (serving.md §8.4)
      DSV41_ASSIGN_OR_RETURN(EngramFetchedRows fetched,
                             engram_rows.WaitForLayer(*role.engram_slot));
      layer.engram->ForwardFetched(fetched, num_tokens, x, {}, ctx, in_span);
    }
    if (role.dspark_target_index && !batch.main_hidden_rows.empty()) {
      RecordMainHidden(x, batch.main_hidden_rows, *role.dspark_target_index, out.main_hidden,
                       dims_.hc_mult, config_.hidden_size);
    }
    // §4.4: attention sublayer, collapsed with the incoming pre-mix.
    SublayerInput(x, pi, num_tokens, layer.hc.hc_attn, layer.hc.attn_norm, dims_, mix_attn, sub_in,
                  ctx);
    if (layer.indexer) layer.indexer->AllocateState(batch.requests, index_state, arena);
    {
      ArenaScope layer_scope(arena);
      // The products of sub_in in one parallel region, then those of qr in another.
      ProductsOfInput of_x(sub_in, num_tokens);
      ProductsOfInput of_qr(qr, num_tokens);
      Compressor::Projections compressed;
      if (layer.compressor) compressed = layer.compressor->QueueProjections(of_x, arena);
      layer.attention->QueueQueryLatent(of_x, qr);
      const Attention::Projections attended = layer.attention->QueueProjections(of_x, of_qr, arena);
      Indexer::Projections indexed;
      if (layer.indexer) indexed = layer.indexer->QueueProjections(of_x, of_qr, arena);
      of_x.Run(ctx);
      layer.attention->NormQueryLatent(qr);
      of_qr.Run(ctx);

      if (layer.compressor) {
        layer.compressor->ForwardProjected(compressed, batch.requests, cache, ctx);
      }
      if (role.ratio > 0) {
        if (layer.indexer) {
          layer.indexer->ForwardProjected(indexed, batch.requests, cache, index_state, ctx);
        }
        for (size_t i = 0; i < num_requests; ++i) {
          selections[i] = index_state[i].SelectionFor(role);
        }
        if (ctx.observer.get().WantsSelections()) {
          ReportSelections(role, batch.requests, index_state, selections, ctx.observer, ctx.arena);
        }
      }
      layer.attention->ForwardProjected(
          attended, batch.requests, cache,
          role.ratio > 0 ? selections : std::span<CompressedSelection>(), sub_out, ctx);
    }
    ctx.observer.get().OnAttentionSublayer(role.layer, sub_in, sub_out);
    SublayerOutput(sub_out, mix_attn, num_tokens, dims_, x, pre);
    // FFN sublayer, collapsed with the attention's pre-mix.
    SublayerInput(x, pre, num_tokens, layer.hc.hc_ffn, layer.hc.ffn_norm, dims_, mix_ffn, sub_in,
                  ctx);
    layer.moe->Forward(sub_in, num_tokens, sub_out, ctx, in_span);
    ctx.observer.get().OnFfnSublayer(role.layer, sub_in, sub_out);
    SublayerOutput(sub_out, mix_ffn, num_tokens, dims_, x, pi);
  }

  // §3, §10: final collapse with the last FFN pre-mix, norm and head, for the rows that need it.
  const int64_t num_logit_rows = static_cast<int64_t>(batch.logit_rows.size());
  if (num_logit_rows == 0) return Status();
  std::span<float> rows_x = arena.Alloc<float>(num_logit_rows * stream);
  std::span<float> rows_pi = arena.Alloc<float>(num_logit_rows * hc);
  for (int64_t k = 0; k < num_logit_rows; ++k) {
    const int64_t t = batch.logit_rows[k];
    std::copy_n(x.begin() + t * stream, stream, rows_x.begin() + k * stream);
    std::copy_n(pi.begin() + t * hc, hc, rows_pi.begin() + k * hc);
  }
  std::span<float> hidden = arena.Alloc<float>(num_logit_rows * dim);
  FinalHidden(head_, dims_, rows_x, rows_pi, num_logit_rows, hidden);
  HeadLogits(head_, hidden, num_logit_rows, out.logits, ctx);
  return Status();
}

}  // namespace dsv41

#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "base/check.h"
#include "base/thread_pool.h"
#include "checkpoint/dtype.h"
#include "kernels/exact_sum.h"
#include "kernels/rope.h"
#include "model/linear_weight.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"
#include "numerics/fake_quant.h"

namespace dsv41 {
namespace {

// The fp32 values of a 1-D BF16 or F32 tensor `name` of `size` elements.
Result<std::vector<float>> GetVector(const ModelWeights& weights, const std::string& name,
                                     int64_t size) {
  DSV41_ASSIGN_OR_RETURN(TensorView view, weights.Get(name));
  if (view.shape.size() != 1 || view.shape[0] != size) {
    return InvalidArgumentError("'%s': want shape [%lld]", name.c_str(),
                                static_cast<long long>(size));
  }
  std::vector<float> values(size);
  if (view.dtype == DType::kBF16) {
    for (int64_t i = 0; i < size; ++i) {
      uint16_t bits;
      std::memcpy(&bits, view.bytes.data() + 2 * i, 2);
      values[i] = F32FromBf16(bits);
    }
  } else if (view.dtype == DType::kF32) {
    std::memcpy(values.data(), view.bytes.data(), 4 * size);
  } else {
    return InvalidArgumentError("'%s': dtype %s, want BF16 or F32", name.c_str(),
                                std::string(DTypeName(view.dtype)).c_str());
  }
  return values;
}

// Rows [row_begin, row_begin + num_rows) of `w` as a weight of their own (the byte layouts of
// kernels/linear.h are row-major, so a row range is a contiguous slice; FP8 blocks must not be
// split across the range's edges).
Result<LinearWeight> SliceRows(const LinearWeight& w, int64_t row_begin, int64_t num_rows,
                               const std::string& name) {
  LinearWeight slice = w;
  slice.out = num_rows;
  switch (w.format) {
    case WeightFormat::kBf16:
    case WeightFormat::kF32: {
      const size_t elem = w.format == WeightFormat::kBf16 ? 2 : 4;
      slice.weight = w.weight.subspan(row_begin * w.in * elem, num_rows * w.in * elem);
      return slice;
    }
    case WeightFormat::kFp8Block: {
      constexpr int64_t kTile = 32;
      if (row_begin % kTile != 0 || (num_rows % kTile != 0 && row_begin + num_rows != w.out)) {
        return InvalidArgumentError(
            "'%s': output groups of %lld rows split its 32x32 FP8 scale tiles", name.c_str(),
            static_cast<long long>(num_rows));
      }
      const int64_t scale_cols = (w.in + kTile - 1) / kTile;
      slice.weight = w.weight.subspan(row_begin * w.in, num_rows * w.in);
      slice.scale = w.scale.subspan((row_begin / kTile) * scale_cols,
                                    ((num_rows + kTile - 1) / kTile) * scale_cols);
      return slice;
    }
    case WeightFormat::kMxfp4: {
      slice.weight = w.weight.subspan(row_begin * (w.in / 2), num_rows * (w.in / 2));
      slice.scale = w.scale.subspan(row_begin * (w.in / 32), num_rows * (w.in / 32));
      return slice;
    }
  }
  return InternalError("'%s': unknown weight format", name.c_str());
}

}  // namespace

Attention::Attention(const ModelConfig& config, const LayerRole& role, std::string prefix)
    : config_(config),
      role_(role),
      prefix_(std::move(prefix)),
      rope_(Rope::ForTable(config, role.rope_table)),
      attn_scale_(CrRsqrt(static_cast<float>(config.head_dim))) {}

Result<std::unique_ptr<Attention>> Attention::Create(const ModelWeights& weights, int32_t layer) {
  const LayerPlan& plan = weights.plan();
  if (layer < 0 || layer >= static_cast<int32_t>(plan.layers.size())) {
    return InvalidArgumentError("attention: layer %d of %zu", layer, plan.layers.size());
  }
  return Create(weights, "layers." + std::to_string(layer) + ".attn", plan.layers[layer]);
}

Result<std::unique_ptr<Attention>> Attention::Create(const ModelWeights& weights,
                                                     const std::string& prefix,
                                                     const LayerRole& role) {
  const ModelConfig& c = weights.config();
  std::unique_ptr<Attention> a(new Attention(c, role, prefix));
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  DSV41_ASSIGN_OR_RETURN(a->wq_a_, GetLinear(weights, prefix + ".wq_a", c.q_lora_rank, hidden));
  DSV41_ASSIGN_OR_RETURN(a->wq_b_, GetLinear(weights, prefix + ".wq_b", q_dim, c.q_lora_rank));
  DSV41_ASSIGN_OR_RETURN(a->wkv_, GetLinear(weights, prefix + ".wkv", c.head_dim, hidden));
  DSV41_ASSIGN_OR_RETURN(LinearWeight wo_a,
                         GetLinear(weights, prefix + ".wo_a", c.wo_a_out(), c.group_in()));
  // §12.4: the reference dequantises wo_a to bf16 and multiplies without activation quantisation.
  // FP8 values times power-of-two scales are exact in bf16, so the stored weight serves as is.
  for (int32_t g = 0; g < c.o_groups; ++g) {
    DSV41_ASSIGN_OR_RETURN(LinearWeight slice,
                           SliceRows(wo_a, static_cast<int64_t>(g) * c.o_lora_rank, c.o_lora_rank,
                                     prefix + ".wo_a.weight"));
    a->wo_a_groups_.push_back(slice);
  }
  DSV41_ASSIGN_OR_RETURN(a->wo_b_, GetLinear(weights, prefix + ".wo_b", hidden, c.wo_a_out()));
  DSV41_ASSIGN_OR_RETURN(a->q_norm_,
                         GetNormWeight(weights, prefix + ".q_norm.weight", c.q_lora_rank));
  DSV41_ASSIGN_OR_RETURN(a->kv_norm_,
                         GetNormWeight(weights, prefix + ".kv_norm.weight", c.head_dim));
  DSV41_ASSIGN_OR_RETURN(a->attn_sink_,
                         GetVector(weights, prefix + ".attn_sink", c.num_attention_heads));
  return a;
}

Result<std::unique_ptr<Attention>> Attention::CreateDsparkStage(const ModelWeights& weights,
                                                                int32_t stage) {
  const ModelConfig& c = weights.config();
  if (stage < 0 || stage >= weights.plan().num_dspark_stages) {
    return InvalidArgumentError("attention: DSpark stage %d of %d", stage,
                                weights.plan().num_dspark_stages);
  }
  // model.md §11.1: the stages are built as layers n_layers + j, SWA only, main RoPE table.
  LayerRole role;
  role.layer = c.num_hidden_layers + stage;
  role.ratio = 0;
  role.mode = LayerMode::kSwaOnly;
  role.rope_table = RopeTable::kMain;
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Attention> a,
                         Create(weights, "mtp." + std::to_string(stage) + ".attn", role));
  a->dspark_stage_ = stage;
  return a;
}

const KvRowPlace& Attention::WindowPlace(const KvCacheLayout& layout) const {
  if (dspark_stage_ >= 0) {
    DSV41_CHECK(dspark_stage_ < static_cast<int32_t>(layout.draft.size()),
                "DSpark stage %d: the cache has %zu draft windows", dspark_stage_,
                layout.draft.size());
    return layout.draft[dspark_stage_];
  }
  return layout.swa[role_.layer];
}

void Attention::RowAngles(std::span<const BatchRequest> requests, std::span<float> cos,
                          std::span<float> sin) const {
  const int64_t half = config_.qk_rope_head_dim / 2;
  for (const BatchRequest& r : requests) {
    for (int32_t t = 0; t < r.num_tokens; ++t) {
      const int64_t row = r.first_row + t;
      rope_.Angles(r.start_pos + t, cos.subspan(row * half, half), sin.subspan(row * half, half));
    }
  }
}

void Attention::WindowKv(std::span<const BatchRequest> requests, std::span<const float> cos,
                         std::span<const float> sin, const KvCacheView& cache, bool store,
                         std::span<float> kv) const {
  const int64_t head_dim = config_.head_dim;
  const int64_t half = config_.qk_rope_head_dim / 2;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const KvCacheLayout& layout = *cache.layout;
  const KvRowPlace& place = WindowPlace(layout);
  for (const BatchRequest& r : requests) {
    const std::span<const uint32_t> table = r.block_tables[place.group_idx];
    for (int32_t t = 0; t < r.num_tokens; ++t) {
      const int64_t row = r.first_row + t;
      std::span<float> values = kv.subspan(row * head_dim, head_dim);
      RmsNorm(values, kv_norm_, eps, values);
      RopeRotateRowsSimd(values, 1, 1, cos.subspan(row * half, half), sin.subspan(row * half, half),
                         /*inverse=*/false);
      FakeQuantFq8B32(values);
      if (store) EncodeSwaRow(layout.profile, values, cache.RowAt(place, table, r.start_pos + t));
    }
  }
}

void Attention::WriteWindowRows(std::span<const float> x, std::span<const BatchRequest> requests,
                                const KvCacheView& cache, ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  const int64_t t_count = static_cast<int64_t>(x.size()) / config_.hidden_size;
  DSV41_CHECK(static_cast<int64_t>(x.size()) == t_count * config_.hidden_size, "x %zu", x.size());
  const int64_t half = config_.qk_rope_head_dim / 2;
  std::span<float> cos = ctx.arena.Alloc<float>(t_count * half);
  std::span<float> sin = ctx.arena.Alloc<float>(t_count * half);
  RowAngles(requests, cos, sin);
  std::span<float> kv = ctx.arena.Alloc<float>(t_count * config_.head_dim);
  LinearBf16(wkv_, x, t_count, kv, ctx);
  WindowKv(requests, cos, sin, cache, /*store=*/true, kv);
}

void Attention::QueryLatent(std::span<const float> x, int32_t num_tokens, std::span<float> qr,
                            ExecContext& ctx) const {
  DSV41_CHECK(static_cast<int64_t>(x.size()) == int64_t{num_tokens} * config_.hidden_size &&
                  static_cast<int64_t>(qr.size()) == int64_t{num_tokens} * config_.q_lora_rank,
              "x %zu, qr %zu for %d tokens", x.size(), qr.size(), num_tokens);
  ProductsOfInput of_x(x, num_tokens);
  QueueQueryLatent(of_x, qr);
  of_x.Run(ctx);
  NormQueryLatent(qr);
}

void Attention::QueueQueryLatent(ProductsOfInput& of_x, std::span<float> qr) const {
  of_x.Add(wq_a_, qr, /*round_bf16=*/true);
}

void Attention::NormQueryLatent(std::span<float> qr) const {
  const int64_t num_tokens = static_cast<int64_t>(qr.size()) / config_.q_lora_rank;
  RmsNormRows(qr, num_tokens, q_norm_, static_cast<float>(config_.rms_norm_eps), qr);
}

int32_t Attention::DecodeWindowKeys(const BatchRequest& r, const KvCacheView& cache, bool block,
                                    std::span<const float> kv, RequestKeys& keys,
                                    StepArena& arena) const {
  const int64_t head_dim = config_.head_dim;
  const int32_t window = config_.sliding_window;
  const KvCacheLayout& layout = *cache.layout;
  const KvRowPlace& swa = WindowPlace(layout);
  keys.window_begin = std::max(0, r.start_pos - window + (block ? 0 : 1));
  const int32_t end = r.start_pos + r.num_tokens;
  const int32_t stored_end = block ? r.start_pos : end;
  keys.window_rows = arena.Alloc<float>(static_cast<size_t>(end - keys.window_begin) * head_dim);
  const std::span<const uint32_t> table = r.block_tables[swa.group_idx];
  for (int32_t p = keys.window_begin; p < stored_end; ++p) {
    DecodeSwaRow(
        layout.profile, cache.RowAt(swa, table, p),
        keys.window_rows.subspan(static_cast<size_t>(p - keys.window_begin) * head_dim, head_dim));
  }
  if (block) {
    std::copy_n(
        kv.begin() + static_cast<size_t>(r.first_row) * head_dim,
        static_cast<size_t>(r.num_tokens) * head_dim,
        keys.window_rows.begin() + static_cast<size_t>(stored_end - keys.window_begin) * head_dim);
  }
  return block ? end - keys.window_begin : std::min(window, end);
}

int32_t Attention::DecodeSelectedEntries(const BatchRequest& r,
                                         const CompressedSelection& selection,
                                         const KvSourcePlaces& source, const KvCacheView& cache,
                                         RequestKeys& keys, StepArena& arena) const {
  const int64_t head_dim = config_.head_dim;
  const KvCacheLayout& layout = *cache.layout;
  DSV41_CHECK(selection.per_token >= 0 && static_cast<int64_t>(selection.entries.size()) ==
                                              int64_t{r.num_tokens} * selection.per_token,
              "selection of %zu ids, %d per token", selection.entries.size(), selection.per_token);
  const int32_t end = r.start_pos + r.num_tokens;
  const int32_t num_entries = end / source.ratio;
  keys.entry_index = arena.Alloc<int32_t>(num_entries);
  std::fill(keys.entry_index.begin(), keys.entry_index.end(), -1);
  keys.entries = arena.Alloc<float>(
      static_cast<size_t>(std::min<int64_t>(num_entries, selection.entries.size())) * head_dim);
  const std::span<const uint32_t> kv_table = r.block_tables[source.kv.group_idx];
  int32_t num_selected = 0;
  for (int32_t e : selection.entries) {
    if (e < 0 || keys.entry_index[e] >= 0) continue;
    DSV41_CHECK(e < num_entries, "entry %d of %d", e, num_entries);
    keys.entry_index[e] = num_selected++;
    DecodeKvRow(layout.profile, cache.RowAt(source.kv, kv_table, e),
                keys.entries.subspan(static_cast<size_t>(num_selected - 1) * head_dim, head_dim));
  }
  return std::min(config_.sliding_window, end) + selection.per_token;
}

namespace {
// Under the fast numerics (any fast kernel) q·k and PV are fixed-order fp32 sums (issue 19);
// reference and the goldens' plain-fp32 probe keep them exact.
AttentionSums SumsFor(Numerics numerics) {
  switch (numerics) {
    case Numerics::kReference:
    case Numerics::kPlainFp32:
      return AttentionSums::kExact;
    case Numerics::kFast:
    case Numerics::kFastFma:
    case Numerics::kFastBf16Dot:
    case Numerics::kFastAmx:
      break;
  }
  return AttentionSums::kFp32;
}
}  // namespace

void Attention::AttendAll(std::span<const float> q, std::span<const BatchRequest> requests,
                          std::span<const int32_t> request_of, std::span<const RequestKeys> keys_of,
                          std::span<const CompressedSelection> selections, bool block,
                          int32_t max_keys, std::span<float> o, ExecContext& ctx) const {
  const int64_t t_count = static_cast<int64_t>(request_of.size());
  const int64_t num_heads = config_.num_attention_heads;
  const int64_t head_dim = config_.head_dim;
  const int32_t window = config_.sliding_window;
  const bool has_entries = role_.ratio > 0;
  // One key-pointer list per thread, drawn before the parallel region.
  std::span<const float*> key_lists =
      ctx.arena.Alloc<const float*>(static_cast<size_t>(ctx.pool.num_threads()) * max_keys);
  const AttentionSums sums = SumsFor(ctx.numerics);
  auto attend = [&](int64_t begin, int64_t end, int thread_idx) {
    const float** keys = key_lists.data() + static_cast<size_t>(thread_idx) * max_keys;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / num_heads;
      const int64_t h = item % num_heads;
      const int32_t i = request_of[t];
      const BatchRequest& r = requests[i];
      const RequestKeys& k = keys_of[i];
      const int32_t pos = r.start_pos + static_cast<int32_t>(t - r.first_row);
      const int32_t first = block ? k.window_begin : std::max(0, pos - window + 1);
      const int32_t last = block ? r.start_pos + r.num_tokens - 1 : pos;
      int32_t num_keys = 0;
      for (int32_t p = first; p <= last; ++p) {
        keys[num_keys++] =
            k.window_rows.data() + static_cast<size_t>(p - k.window_begin) * head_dim;
      }
      if (has_entries) {
        const CompressedSelection& sel = selections[i];
        for (int32_t slot = 0; slot < sel.per_token; ++slot) {
          const int32_t entry = sel.entries[(t - r.first_row) * sel.per_token + slot];
          if (entry < 0) continue;
          keys[num_keys++] =
              k.entries.data() + static_cast<size_t>(k.entry_index[entry]) * head_dim;
        }
      }
      SinkAttention(q.subspan(item * head_dim, head_dim),
                    std::span<const float* const>(keys, num_keys), attn_sink_[h], attn_scale_,
                    o.subspan(item * head_dim, head_dim), sums);
    }
  };
  ctx.pool.ParallelFor(t_count * num_heads, 1, attend);
}

void Attention::OutputProjection(std::span<float> o, std::span<const float> cos,
                                 std::span<const float> sin, int64_t t_count, std::span<float> out,
                                 ExecContext& ctx) const {
  StepArena& arena = ctx.arena;
  RopeRotateRowsSimd(o, t_count, config_.num_attention_heads, cos, sin, /*inverse=*/true);
  const int64_t group_in = config_.group_in();
  const int64_t o_rank = config_.o_lora_rank;
  const int64_t num_groups = config_.o_groups;
  // Group g's inputs [t_count, group_in] and outputs [t_count, o_rank]; the groups' products run
  // as the jobs of one parallel region.
  std::span<float> group_x = arena.Alloc<float>(num_groups * t_count * group_in);
  std::span<float> group_z = arena.Alloc<float>(num_groups * t_count * o_rank);
  std::span<float> z = arena.Alloc<float>(t_count * num_groups * o_rank);
  std::span<LinearJob> jobs = arena.Alloc<LinearJob>(num_groups);
  for (int64_t g = 0; g < num_groups; ++g) {
    const std::span<float> x_g = group_x.subspan(g * t_count * group_in, t_count * group_in);
    for (int64_t t = 0; t < t_count; ++t) {
      std::copy_n(o.begin() + (t * num_groups + g) * group_in, group_in,
                  x_g.begin() + t * group_in);
    }
    jobs[g] = PrepareLinearJob(wo_a_groups_[g], x_g, t_count,
                               group_z.subspan(g * t_count * o_rank, t_count * o_rank),
                               LinearOptions{.bf16_inputs = true}, ctx);
  }
  RunLinearJobs(jobs, ctx);
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t t = 0; t < t_count; ++t) {
      for (int64_t r = 0; r < o_rank; ++r) {
        z[(t * num_groups + g) * o_rank + r] = Bf16Round(group_z[(g * t_count + t) * o_rank + r]);
      }
    }
  }
  LinearBf16(wo_b_, z, t_count, out, ctx);
}

void Attention::Forward(std::span<const float> x, std::span<const float> qr,
                        std::span<const BatchRequest> requests, const KvCacheView& cache,
                        std::span<const CompressedSelection> selections, std::span<float> out,
                        ExecContext& ctx, AttentionMode mode) const {
  ArenaScope scope(ctx.arena);
  const int64_t t_count = static_cast<int64_t>(x.size()) / config_.hidden_size;
  DSV41_CHECK(static_cast<int64_t>(x.size()) == t_count * config_.hidden_size &&
                  static_cast<int64_t>(qr.size()) == t_count * config_.q_lora_rank,
              "x %zu, qr %zu", x.size(), qr.size());
  ProductsOfInput of_x(x, t_count);
  ProductsOfInput of_qr(qr, t_count);
  const Projections projections = QueueProjections(of_x, of_qr, ctx.arena);
  of_qr.Run(ctx);
  of_x.Run(ctx);
  ForwardProjected(projections, requests, cache, selections, out, ctx, mode);
}

Attention::Projections Attention::QueueProjections(ProductsOfInput& of_x, ProductsOfInput& of_qr,
                                                   StepArena& arena) const {
  DSV41_CHECK(of_x.rows() == of_qr.rows(), "x %lld rows, qr %lld rows",
              static_cast<long long>(of_x.rows()), static_cast<long long>(of_qr.rows()));
  Projections p;
  p.q = arena.Alloc<float>(of_qr.rows() * config_.num_attention_heads * config_.head_dim);
  of_qr.Add(wq_b_, p.q, /*round_bf16=*/true);
  p.kv = arena.Alloc<float>(of_x.rows() * config_.head_dim);
  of_x.Add(wkv_, p.kv, /*round_bf16=*/true);
  return p;
}

void Attention::ForwardProjected(const Projections& projections,
                                 std::span<const BatchRequest> requests, const KvCacheView& cache,
                                 std::span<const CompressedSelection> selections,
                                 std::span<float> out, ExecContext& ctx, AttentionMode mode) const {
  ArenaScope scope(ctx.arena);
  StepArena& arena = ctx.arena;
  const int64_t hidden = config_.hidden_size;
  const int64_t num_heads = config_.num_attention_heads;
  const int64_t head_dim = config_.head_dim;
  const int64_t t_count = static_cast<int64_t>(projections.kv.size()) / head_dim;
  const int64_t half = config_.qk_rope_head_dim / 2;
  const KvCacheLayout& layout = *cache.layout;
  const bool block = mode == AttentionMode::kDraftBlock;
  DSV41_CHECK(static_cast<int64_t>(projections.kv.size()) == t_count * head_dim &&
                  static_cast<int64_t>(projections.q.size()) == t_count * num_heads * head_dim &&
                  static_cast<int64_t>(out.size()) == t_count * hidden,
              "q %zu, kv %zu, out %zu", projections.q.size(), projections.kv.size(), out.size());
  DSV41_CHECK(layout.head_dim == head_dim, "cache head_dim %d", layout.head_dim);
  DSV41_CHECK(!block || (dspark_stage_ >= 0 && role_.ratio == 0),
              "layer %d: DSpark block attention on a backbone layer", role_.layer);
  DSV41_CHECK(selections.size() == (role_.ratio > 0 ? requests.size() : 0),
              "layer %d: ratio %d, %zu selections for %zu requests", role_.layer, role_.ratio,
              selections.size(), requests.size());
  const KvSourcePlaces* source = nullptr;
  if (role_.ratio > 0) {
    source = &*layout.sources[*role_.kv_source_layer];
  }

  // Per row: its request, and the cos/sin of its position (shared by q, kv and the inverse
  // rotation of the output).
  std::span<int32_t> request_of = arena.Alloc<int32_t>(t_count);
  std::span<float> cos = arena.Alloc<float>(t_count * half);
  std::span<float> sin = arena.Alloc<float>(t_count * half);
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& r = requests[i];
    std::fill_n(request_of.begin() + r.first_row, r.num_tokens, static_cast<int32_t>(i));
  }
  RowAngles(requests, cos, sin);

  // §7.1 query path: q = rope(wq_b·qr) per head.
  const std::span<float> q = projections.q;
  RopeRotateRowsSimd(q, t_count, num_heads, cos, sin, /*inverse=*/false);

  // §7.2 SWA path: kv = fq8_b32(rope(RMSNorm(kv_norm, wkv·x))), stored at its position's row
  // (a DSpark block keeps its rows to itself).
  const std::span<float> kv = projections.kv;
  WindowKv(requests, cos, sin, cache, /*store=*/!block, kv);

  // The keys each request's tokens may attend, decoded once: its window rows and the union of
  // its tokens' selected entries.
  std::span<RequestKeys> keys_of = arena.Alloc<RequestKeys>(requests.size());
  int32_t max_keys = 0;  // the longest key list of any token
  for (size_t i = 0; i < requests.size(); ++i) {
    keys_of[i] = RequestKeys{};
    max_keys =
        std::max(max_keys, DecodeWindowKeys(requests[i], cache, block, kv, keys_of[i], arena));
    if (source == nullptr) continue;
    max_keys = std::max(max_keys, DecodeSelectedEntries(requests[i], selections[i], *source, cache,
                                                        keys_of[i], arena));
  }

  // §7.6 sparse attention with the per-head sink, then §7.7 the output projection.
  std::span<float> o = arena.Alloc<float>(t_count * num_heads * head_dim);
  AttendAll(q, requests, request_of, keys_of, selections, block, max_keys, o, ctx);
  OutputProjection(o, cos, sin, t_count, out, ctx);
}

}  // namespace dsv41

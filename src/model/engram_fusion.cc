#include "model/engram_fusion.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "base/check.h"
#include "base/thread_pool.h"
#include "checkpoint/dtype.h"
#include "kernels/engram_gate.h"
#include "kernels/exact_sum.h"
#include "model/linear_weight.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

float LoadBf16(const std::byte* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return F32FromBf16(bits);
}

}  // namespace

void DequantizeEngramRows(std::span<const std::byte> values, std::span<const std::byte> scales,
                          int32_t row_dim, int64_t n, std::span<float> out) {
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(row_dim);
  DSV41_CHECK(row_dim > 0 && row_dim % 32 == 0 && values.size() == count &&
                  scales.size() == count / 32 && out.size() == count,
              "DequantizeEngramRows: %lld rows of %d, %zu values, %zu scales, %zu outputs",
              static_cast<long long>(n), row_dim, values.size(), scales.size(), out.size());
  for (size_t i = 0; i < count; ++i) {
    const float value = F32FromE4m3(static_cast<uint8_t>(values[i]));
    const float scale = F32FromE8m0(static_cast<uint8_t>(scales[i / 32]));
    out[i] = Bf16Round(value * scale);
  }
}

// ---- EngramFusion -------------------------------------------------------------------------

Result<EngramFusion> EngramFusion::Load(const ModelWeights& weights, int32_t layer) {
  const ModelConfig& config = weights.config();
  const LayerPlan& plan = weights.plan();
  if (layer < 0 || static_cast<size_t>(layer) >= plan.layers.size() ||
      !plan.layers[static_cast<size_t>(layer)].has_engram()) {
    return InvalidArgumentError("layer %d has no Engram slot in the layer plan", layer);
  }
  EngramFusion fusion;
  fusion.num_cols_ = config.n_hash_cols();
  fusion.hc_mult_ = config.hc_mult;
  fusion.hidden_ = config.hidden_size;
  fusion.eps_ = static_cast<float>(config.rms_norm_eps);
  fusion.inv_sqrt_hidden_ = CrPow(static_cast<float>(config.hidden_size), -0.5);

  DSV41_ASSIGN_OR_RETURN(MappedEngramRowSource rows,
                         MappedEngramRowSource::Open(weights.checkpoint(), layer));
  if (rows.row_dim() != config.engram_head_dim) {
    return InvalidArgumentError("'layers.%d.engram.embed.weight': rows of %d, want %d", layer,
                                rows.row_dim(), config.engram_head_dim);
  }
  fusion.row_dim_ = rows.row_dim();
  fusion.resident_rows_ = std::make_unique<MappedEngramRowSource>(std::move(rows));

  const std::string prefix = "layers." + std::to_string(layer) + ".engram";
  DSV41_ASSIGN_OR_RETURN(fusion.wkv_, GetLinear(weights, prefix + ".wkv"));
  if (fusion.wkv_.out != fusion.engram_out() || fusion.wkv_.in != fusion.engram_in()) {
    return InvalidArgumentError("'%s.wkv.weight': [%lld, %lld], want [%d, %d]", prefix.c_str(),
                                static_cast<long long>(fusion.wkv_.out),
                                static_cast<long long>(fusion.wkv_.in), fusion.engram_out(),
                                fusion.engram_in());
  }
  const Shape qk_shape = {config.hc_mult, config.hidden_size};
  DSV41_ASSIGN_OR_RETURN(
      TensorView q, weights.checkpoint().GetChecked(prefix + ".q_weight", DType::kBF16, qk_shape));
  DSV41_ASSIGN_OR_RETURN(
      TensorView k, weights.checkpoint().GetChecked(prefix + ".k_weight", DType::kBF16, qk_shape));
  const size_t n = static_cast<size_t>(config.hc_mult) * static_cast<size_t>(config.hidden_size);
  fusion.qk_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    // The fp32 product of two bf16 values (exact: 8-bit significands).
    fusion.qk_[i] = LoadBf16(q.bytes.data() + 2 * i) * LoadBf16(k.bytes.data() + 2 * i);
  }
  return fusion;
}

Status EngramFusion::GatherRows(const EngramRowSource& source, std::span<const int64_t> row_ids,
                                int64_t num_tokens, std::span<float> e, ExecContext& ctx) const {
  const size_t num_rows = static_cast<size_t>(num_tokens) * static_cast<size_t>(num_cols_);
  DSV41_CHECK(
      num_tokens >= 0 && row_ids.size() == num_rows &&
          e.size() == num_rows * static_cast<size_t>(row_dim_) && source.row_dim() == row_dim_,
      "GatherRows: %lld tokens, %zu row ids, %zu outputs, source rows of %d (want %d)",
      static_cast<long long>(num_tokens), row_ids.size(), e.size(), source.row_dim(), row_dim_);
  ArenaScope scope(ctx.arena);
  std::span<std::byte> values =
      ctx.arena.Alloc<std::byte>(num_rows * static_cast<size_t>(row_dim_));
  std::span<std::byte> scales = ctx.arena.Alloc<std::byte>(values.size() / 32);
  DSV41_RETURN_IF_ERROR(source.FillRows(row_ids, values, scales));
  // Rows of a token are consecutive in row_ids, so the dequantised rows concatenate in column
  // order into e [T, num_cols·row_dim].
  DequantizeEngramRows(values, scales, row_dim_, static_cast<int64_t>(num_rows), e);
  return OkStatus();
}

void EngramFusion::GatherFetched(const EngramFetchedRows& rows, int64_t num_tokens,
                                 std::span<float> e, ExecContext& ctx) const {
  const size_t num_slots = static_cast<size_t>(num_tokens) * static_cast<size_t>(num_cols_);
  const size_t value_bytes = static_cast<size_t>(row_dim_);
  const size_t scale_bytes = value_bytes / 32;
  const size_t num_unique = rows.values.size() / value_bytes;
  DSV41_CHECK(num_tokens >= 0 && rows.index.size() == num_slots &&
                  rows.values.size() == num_unique * value_bytes &&
                  rows.scales.size() == num_unique * scale_bytes &&
                  e.size() == num_slots * value_bytes,
              "GatherFetched: %lld tokens, %zu indices, %zu value and %zu scale bytes, %zu outputs",
              static_cast<long long>(num_tokens), rows.index.size(), rows.values.size(),
              rows.scales.size(), e.size());
  const auto run = [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const size_t u = static_cast<size_t>(rows.index[static_cast<size_t>(i)]);
      DSV41_CHECK(u < num_unique, "GatherFetched: index %zu of %zu rows", u, num_unique);
      DequantizeEngramRows(rows.values.subspan(u * value_bytes, value_bytes),
                           rows.scales.subspan(u * scale_bytes, scale_bytes), row_dim_, 1,
                           e.subspan(static_cast<size_t>(i) * value_bytes, value_bytes));
    }
  };
  ctx.pool.ParallelFor(static_cast<int64_t>(num_slots), 8, run);
}

void EngramFusion::Project(std::span<const float> e, int64_t num_tokens, std::span<float> kv,
                           ExecContext& ctx) const {
  DSV41_CHECK(num_tokens >= 0 &&
                  e.size() == static_cast<size_t>(num_tokens) * static_cast<size_t>(engram_in()) &&
                  kv.size() == static_cast<size_t>(num_tokens) * static_cast<size_t>(engram_out()),
              "Project: %lld tokens, e %zu, kv %zu", static_cast<long long>(num_tokens), e.size(),
              kv.size());
  LinearBf16(wkv_, e, num_tokens, kv, ctx);
}

void EngramFusion::FuseToken(const float* kv, float* streams, float* gate, bool dead,
                             std::span<float> scratch) const {
  const size_t hidden = static_cast<size_t>(hidden_);
  const float* value = kv + static_cast<size_t>(hc_mult_) * hidden;  // V, shared by the streams
  const float tiny = 1e-6f;
  for (int32_t j = 0; j < hc_mult_; ++j) {
    float* h = streams + static_cast<size_t>(j) * hidden;
    const float* key = kv + static_cast<size_t>(j) * hidden;
    const float* w = qk_.data() + static_cast<size_t>(j) * hidden;
    const std::span<const float> h_span(h, hidden);
    const std::span<const float> key_span(key, hidden);
    const float r =
        CrRsqrt(ExactMeanSquareSimd(h_span) + eps_) * CrRsqrt(ExactMeanSquareSimd(key_span) + eps_);
    // fp32(fp32(H·w)·K) per element (H·w is exact: 8- and 16-bit significands; the product with
    // K is rounded), then the exact sum of those, rounded once (§9.6, §12.8 item 2).
    const float sum =
        EngramGateDotSimd(h_span, std::span<const float>(w, hidden), key_span, scratch);
    const float dot = sum * r * inv_sqrt_hidden_;
    float g = Sigmoid(std::copysign(CrSqrt(std::fmax(std::fabs(dot), tiny)), dot));
    if (dead) g = 0.0f;
    if (gate != nullptr) gate[j] = g;
    AddGatedSimd(std::span<float>(h, hidden), g, std::span<const float>(value, hidden));
  }
}

void EngramFusion::Fuse(std::span<const float> kv, int64_t num_tokens, std::span<float> streams,
                        std::span<float> gate, std::span<const uint8_t> dead,
                        ExecContext& ctx) const {
  const size_t t_count = static_cast<size_t>(num_tokens);
  const size_t stream_size = static_cast<size_t>(hc_mult_) * static_cast<size_t>(hidden_);
  DSV41_CHECK(num_tokens >= 0 && kv.size() == t_count * static_cast<size_t>(engram_out()) &&
                  streams.size() == t_count * stream_size &&
                  (gate.empty() || gate.size() == t_count * static_cast<size_t>(hc_mult_)) &&
                  (dead.empty() || dead.size() == t_count),
              "Fuse: %lld tokens, kv %zu, streams %zu, gate %zu, dead %zu",
              static_cast<long long>(num_tokens), kv.size(), streams.size(), gate.size(),
              dead.size());
  ArenaScope scope(ctx.arena);
  // Per-thread scratch for the gate terms, drawn before the parallel region.
  std::span<float> scratch = ctx.arena.Alloc<float>(static_cast<size_t>(ctx.pool.num_threads()) *
                                                    static_cast<size_t>(hidden_));
  const auto run = [&](int64_t begin, int64_t end, int thread_idx) {
    for (int64_t t = begin; t < end; ++t) {
      const size_t i = static_cast<size_t>(t);
      FuseToken(kv.data() + i * static_cast<size_t>(engram_out()), streams.data() + i * stream_size,
                gate.empty() ? nullptr : gate.data() + i * static_cast<size_t>(hc_mult_),
                !dead.empty() && dead[i] != 0,
                scratch.subspan(static_cast<size_t>(thread_idx) * hidden_, hidden_));
    }
  };
  ctx.pool.ParallelFor(num_tokens, 1, run);
}

Status EngramFusion::Forward(std::span<const int64_t> row_ids, int64_t num_tokens,
                             std::span<float> streams, std::span<float> gate, ExecContext& ctx,
                             std::span<const uint8_t> dead) const {
  ArenaScope scope(ctx.arena);
  std::span<float> e =
      ctx.arena.Alloc<float>(static_cast<size_t>(num_tokens) * static_cast<size_t>(engram_in()));
  DSV41_RETURN_IF_ERROR(GatherRows(*resident_rows_, row_ids, num_tokens, e, ctx));
  std::span<float> kv =
      ctx.arena.Alloc<float>(static_cast<size_t>(num_tokens) * static_cast<size_t>(engram_out()));
  Project(e, num_tokens, kv, ctx);
  Fuse(kv, num_tokens, streams, gate, dead, ctx);
  return OkStatus();
}

void EngramFusion::ForwardFetched(const EngramFetchedRows& rows, int64_t num_tokens,
                                  std::span<float> streams, std::span<float> gate, ExecContext& ctx,
                                  std::span<const uint8_t> dead) const {
  ArenaScope scope(ctx.arena);
  std::span<float> e =
      ctx.arena.Alloc<float>(static_cast<size_t>(num_tokens) * static_cast<size_t>(engram_in()));
  GatherFetched(rows, num_tokens, e, ctx);
  std::span<float> kv =
      ctx.arena.Alloc<float>(static_cast<size_t>(num_tokens) * static_cast<size_t>(engram_out()));
  Project(e, num_tokens, kv, ctx);
  Fuse(kv, num_tokens, streams, gate, dead, ctx);
}

}  // namespace dsv41

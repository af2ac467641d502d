#include "model/vision_tower.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/activation.h"
#include "kernels/engram_gate.h"
#include "model/linear_weight.h"
#include "model/rope.h"
#include "model/weights.h"
#include "numerics/arith.h"
#include "numerics/codecs.h"

namespace dsv41 {
namespace {

// vision.md §1: the tower's RMSNorm epsilon is this constant, not rms_norm_eps.
constexpr float kVisionNormEps = 1e-6f;

// The scores of one attention block are held for every head at once: query blocks are sized so
// that heads × block × keys floats stay near this.
constexpr int64_t kAttentionScoreFloats = int64_t{4} << 20;

// A BF16 vector [n] as float values (biases and the span rows: a few KiB).
Result<std::vector<float>> ReadBf16Vector(const ModelWeights& weights, const std::string& name,
                                          int64_t n) {
  DSV41_ASSIGN_OR_RETURN(NormWeight view, GetNormWeight(weights, name, n));
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, view.bf16.data() + 2 * i, 2);  // may be unaligned
    out[static_cast<size_t>(i)] = F32FromBf16(bits);
  }
  return out;
}

// §13.2's reference: the exact sum of the products and the bias, rounded once, then bf16.
void LinearBiasExact(const LinearWeight& w, std::span<const float> bias, std::span<const float> x,
                     int64_t rows, std::span<float> y, ExecContext& ctx) {
  const int64_t in = w.in;
  const int64_t out = w.out;
  ctx.pool.ParallelFor(rows * out, 64, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = i / out;
      const int64_t o = i % out;
      const std::byte* weight_row = w.weight.data() + 2 * o * in;
      ExactAccumulator acc;
      for (int64_t k = 0; k < in; ++k) {
        uint16_t bits;
        std::memcpy(&bits, weight_row + 2 * k, 2);
        acc.AddProduct(F32FromBf16(bits), x[static_cast<size_t>(r * in + k)]);
      }
      acc.Add(bias[static_cast<size_t>(o)]);
      y[static_cast<size_t>(i)] = Bf16Round(acc.Round());
    }
  });
  ctx.stats.weight_bytes += w.weight.size();
  ctx.stats.weight_macs += static_cast<uint64_t>(rows * out * in);
}

// y[r, :] = bf16(W · x[r] + bias) for every row (§13.2 "Linear"): under the reference numerics
// the exact sum with the bias rounded once; otherwise the kernel's fp32 sum, then the fp32 add.
void LinearBias(const LinearWeight& w, std::span<const float> bias, std::span<const float> x,
                int64_t rows, std::span<float> y, ExecContext& ctx) {
  if (ctx.numerics == Numerics::kReference && !bias.empty() && w.format == WeightFormat::kBf16) {
    LinearBiasExact(w, bias, x, rows, y, ctx);
    return;
  }
  LinearProduct(w, x, rows, y, ctx);
  const int64_t out = w.out;
  ctx.pool.ParallelFor(rows, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      std::span<float> row = y.subspan(static_cast<size_t>(r * out), static_cast<size_t>(out));
      if (bias.empty()) {
        for (float& v : row) v = Bf16Round(v);
      } else {
        AddGatedSimd(row, 1.0f, bias);  // bf16(row + fp32(1 · bias)): the fp32 add, rounded
      }
    }
  });
}

// x = bf16(x + h) over [rows, d] (§13.2 "Residual adds"), split over the pool.
void AddResidual(std::span<float> x, std::span<const float> h, int64_t rows, int64_t d,
                 ExecContext& ctx) {
  ctx.pool.ParallelFor(rows, 16, [&](int64_t begin, int64_t end, int) {
    const size_t first = static_cast<size_t>(begin * d);
    const size_t count = static_cast<size_t>((end - begin) * d);
    AddGatedSimd(x.subspan(first, count), 1.0f, h.subspan(first, count));
  });
}

// The 2-D RoPE angles of every patch of every image (§8 step 2): for patch (row, col) of its
// grid, cos / sin [hd / 2] of a[d] = fp32(row · inv[d]) for d < hd / 4 and fp32(col · inv[d −
// hd / 4]) after.
void RopeTables(std::span<const ImagePlan> plans, std::span<const float> inv_freq,
                std::span<float> cos_out, std::span<float> sin_out) {
  const size_t quarter = inv_freq.size();
  const size_t half = 2 * quarter;
  size_t row_idx = 0;
  for (const ImagePlan& plan : plans) {
    for (int64_t n = 0; n < plan.num_patches(); ++n, ++row_idx) {
      const float row = static_cast<float>(n / plan.patch_cols);
      const float col = static_cast<float>(n % plan.patch_cols);
      float* c = cos_out.data() + row_idx * half;
      float* s = sin_out.data() + row_idx * half;
      for (size_t d = 0; d < half; ++d) {
        const float angle = d < quarter ? row * inv_freq[d] : col * inv_freq[d - quarter];
        c[d] = CrCos(angle);
        s[d] = CrSin(angle);
      }
    }
  }
}

// Split-half RoPE over a whole head (§8 step 3): out[d] = bf16(x1·cos − x2·sin), out[d + hd/2] =
// bf16(x2·cos + x1·sin), pair (d, d + hd/2) with angle d.
void RotateHead(const float* in, const float* cos, const float* sin, int64_t hd, float* out) {
  const int64_t half = hd / 2;
  for (int64_t d = 0; d < half; ++d) {
    const float x1 = in[d];
    const float x2 = in[d + half];
    out[d] = Bf16Round(x1 * cos[d] - x2 * sin[d]);
    out[d + half] = Bf16Round(x2 * cos[d] + x1 * sin[d]);
  }
}

// Σ x in double, four interleaved partial sums, rounded once: the exact sum of §13.2 except when
// the double sums' rounding errors reach an fp32 rounding boundary (the fast path's freedom).
float DoubleSum(std::span<const float> x) {
  double partial[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= x.size(); i += 4) {
    for (int lane = 0; lane < 4; ++lane) partial[lane] += x[i + lane];
  }
  for (; i < x.size(); ++i) partial[0] += x[i];
  return static_cast<float>((partial[0] + partial[1]) + (partial[2] + partial[3]));
}

// fp32 softmax of one row in place (§13.2): max, exp(s − max), the sum of the exponentials
// rounded once (exactly with `exact_sum`, the reference; else DoubleSum), p / sum.
void SoftmaxRow(std::span<float> row, bool exact_sum) {
  float max_value = row[0];
  for (float v : row) max_value = std::max(max_value, v);
  for (float& v : row) v = v - max_value;
  CrExpSimd(row, row);
  const float sum = exact_sum ? ExactSum(row) : DoubleSum(row);
  for (float& v : row) v = v / sum;
}

// A stored-format view of fp32 rows [out, in] as a weight for the GEMM kernels: the attention's
// keys (q·k) and transposed values (p·v).
LinearWeight F32Rows(std::span<const float> rows, int64_t out, int64_t in) {
  return LinearWeight{.format = WeightFormat::kF32,
                      .out = out,
                      .in = in,
                      .weight = std::as_bytes(rows.subspan(0, static_cast<size_t>(out * in))),
                      .scale = {}};
}

}  // namespace

Result<std::unique_ptr<VisionTower>> VisionTower::Load(const ModelWeights& weights) {
  const ModelConfig& config = weights.config();
  if (!config.vision.has_tower()) {
    return InvalidArgumentError("the model has no vision tower (vision_config.num_hidden_layers)");
  }
  std::unique_ptr<VisionTower> tower(new VisionTower());
  const VisionConfig& v = config.vision;
  tower->config_ = v;
  tower->output_dim_ = config.hidden_size;
  const int64_t d = v.hidden_size;
  const int64_t dim = config.hidden_size;
  DSV41_ASSIGN_OR_RETURN(tower->patch_embed_,
                         GetLinear(weights, "vision.patch_embed.proj", d, v.patch_values()));
  DSV41_ASSIGN_OR_RETURN(tower->patch_embed_bias_,
                         ReadBf16Vector(weights, "vision.patch_embed.proj.bias", d));
  for (int32_t i = 0; i < v.num_hidden_layers; ++i) {
    const std::string p = "vision.blocks." + std::to_string(i);
    VisionBlockWeights block;
    DSV41_ASSIGN_OR_RETURN(block.norm1, GetNormWeight(weights, p + ".norm1.weight", d));
    DSV41_ASSIGN_OR_RETURN(block.wqkv, GetLinear(weights, p + ".attn.wqkv", 3 * d, d));
    DSV41_ASSIGN_OR_RETURN(block.wqkv_bias, ReadBf16Vector(weights, p + ".attn.wqkv.bias", 3 * d));
    DSV41_ASSIGN_OR_RETURN(block.wo, GetLinear(weights, p + ".attn.wo", d, d));
    DSV41_ASSIGN_OR_RETURN(block.wo_bias, ReadBf16Vector(weights, p + ".attn.wo.bias", d));
    DSV41_ASSIGN_OR_RETURN(block.norm2, GetNormWeight(weights, p + ".norm2.weight", d));
    DSV41_ASSIGN_OR_RETURN(block.w1, GetLinear(weights, p + ".mlp.w1", 2 * v.intermediate_size, d));
    DSV41_ASSIGN_OR_RETURN(block.w2, GetLinear(weights, p + ".mlp.w2", d, v.intermediate_size));
    tower->blocks_.push_back(std::move(block));
  }
  DSV41_ASSIGN_OR_RETURN(tower->final_norm_, GetNormWeight(weights, "vision.norm.weight", d));
  const int64_t r = v.downsample_ratio;
  DSV41_ASSIGN_OR_RETURN(tower->aligner_w1_, GetLinear(weights, "aligner.w1", dim, r * r * d));
  DSV41_ASSIGN_OR_RETURN(tower->aligner_w1_bias_, ReadBf16Vector(weights, "aligner.w1.bias", dim));
  DSV41_ASSIGN_OR_RETURN(tower->aligner_w2_, GetLinear(weights, "aligner.w2", dim, dim));
  DSV41_ASSIGN_OR_RETURN(tower->aligner_w2_bias_, ReadBf16Vector(weights, "aligner.w2.bias", dim));
  DSV41_ASSIGN_OR_RETURN(tower->image_start_, ReadBf16Vector(weights, "image_start", dim));
  DSV41_ASSIGN_OR_RETURN(tower->image_end_, ReadBf16Vector(weights, "image_end", dim));
  DSV41_ASSIGN_OR_RETURN(tower->image_newline_, ReadBf16Vector(weights, "image_newline", dim));
  // §8 step 2: model.md §6.2's table with rope width hd / 2 and no YaRN.
  tower->rope_inv_freq_ = RopeInvFreq(v.head_dim() / 2, v.rope_theta, YarnConfig{});
  return tower;
}

void VisionTower::ImageAttention(std::span<const float> qkv, int64_t n, std::span<float> o,
                                 ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  const int64_t heads = config_.num_attention_heads;
  const int64_t hd = config_.head_dim();
  const int64_t d = config_.hidden_size;
  // Per head: q, k [n, hd] and v transposed [hd, n], contiguous for the GEMM kernels.
  std::span<float> q = ctx.arena.Alloc<float>(heads * n * hd);
  std::span<float> k = ctx.arena.Alloc<float>(heads * n * hd);
  std::span<float> vt = ctx.arena.Alloc<float>(heads * hd * n);
  ctx.pool.ParallelFor(heads, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t h = begin; h < end; ++h) {
      for (int64_t t = 0; t < n; ++t) {
        const float* row = qkv.data() + t * 3 * d + h * hd;
        std::copy_n(row, hd, q.data() + (h * n + t) * hd);
        std::copy_n(row + d, hd, k.data() + (h * n + t) * hd);
        for (int64_t e = 0; e < hd; ++e) vt[(h * hd + e) * n + t] = row[2 * d + e];
      }
    }
  });
  const float scale = CrRsqrt(static_cast<float>(hd));  // fp32(hd^−½)
  const bool exact_sum = ctx.numerics == Numerics::kReference;
  const int64_t block = std::clamp<int64_t>(kAttentionScoreFloats / (heads * n), 1, n);
  std::span<float> scores = ctx.arena.Alloc<float>(heads * block * n);
  std::span<float> out = ctx.arena.Alloc<float>(block * d);
  std::vector<LinearWeight> keys, values;
  for (int64_t h = 0; h < heads; ++h) {
    keys.push_back(F32Rows(k.subspan(h * n * hd), n, hd));
    values.push_back(F32Rows(vt.subspan(h * hd * n), hd, n));
  }
  // The attention's operands are activations: their bytes are not weight traffic.
  const ExecStats stats = ctx.stats;
  for (int64_t first = 0; first < n; first += block) {
    const int64_t rows = std::min(block, n - first);
    for (int64_t h = 0; h < heads; ++h) {  // logits fp32(q·k), then · fp32(hd^−½)
      LinearProduct(keys[h], q.subspan((h * n + first) * hd, rows * hd), rows,
                    scores.subspan(h * block * n, rows * n), ctx);
    }
    ctx.pool.ParallelFor(heads * rows, 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t h = i / rows;
        std::span<float> row = scores.subspan((h * block + i % rows) * n, n);
        for (float& s : row) s = s * scale;
        SoftmaxRow(row, exact_sum);
      }
    });
    for (int64_t h = 0; h < heads; ++h) {  // o = bf16(Σ p · v), p kept in fp32
      Linear(values[h], scores.subspan(h * block * n, rows * n), rows, out.subspan(0, rows * hd),
             LinearOptions{}, ctx);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t e = 0; e < hd; ++e) {
          o[(first + t) * d + h * hd + e] = Bf16Round(out[t * hd + e]);
        }
      }
    }
  }
  ctx.stats = stats;
}

void VisionTower::Block(const VisionBlockWeights& block, std::span<float> x, int64_t rows,
                        std::span<const ImagePlan> plans, std::span<const float> rope_cos,
                        std::span<const float> rope_sin, ExecContext& ctx) const {
  ArenaScope scope(ctx.arena);
  const int64_t d = config_.hidden_size;
  const int64_t hd = config_.head_dim();
  const int64_t heads = config_.num_attention_heads;
  const int64_t inter = config_.intermediate_size;
  std::span<float> h = ctx.arena.Alloc<float>(rows * d);
  std::span<float> qkv = ctx.arena.Alloc<float>(rows * 3 * d);
  std::span<float> o = ctx.arena.Alloc<float>(rows * d);
  RmsNormRows(x, rows, block.norm1, kVisionNormEps, h);
  LinearBias(block.wqkv, block.wqkv_bias, h, rows, qkv, ctx);
  // RoPE on q and k of every head, in place.
  ctx.pool.ParallelFor(rows, 16, [&](int64_t begin, int64_t end, int) {
    float rotated[kMaxVisionHeadDim];
    for (int64_t t = begin; t < end; ++t) {
      const float* c = rope_cos.data() + t * (hd / 2);
      const float* s = rope_sin.data() + t * (hd / 2);
      for (int64_t part = 0; part < 2; ++part) {
        for (int64_t head = 0; head < heads; ++head) {
          float* v = qkv.data() + t * 3 * d + part * d + head * hd;
          RotateHead(v, c, s, hd, rotated);
          std::copy_n(rotated, hd, v);
        }
      }
    }
  });
  int64_t first = 0;
  for (const ImagePlan& plan : plans) {
    const int64_t n = plan.num_patches();
    ImageAttention(qkv.subspan(first * 3 * d, n * 3 * d), n, o.subspan(first * d, n * d), ctx);
    first += n;
  }
  LinearBias(block.wo, block.wo_bias, o, rows, h, ctx);
  AddResidual(x, h, rows, d, ctx);
  // MLP: x += W2 · bf16(bf16(silu(g)) · u), g and u the bf16 halves of W1 · RMSNorm(x).
  RmsNormRows(x, rows, block.norm2, kVisionNormEps, h);
  std::span<float> gu = ctx.arena.Alloc<float>(rows * 2 * inter);
  LinearBias(block.w1, {}, h, rows, gu, ctx);
  std::span<float> act = ctx.arena.Alloc<float>(rows * inter);
  ctx.pool.ParallelFor(rows, 16, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const float* g = gu.data() + t * 2 * inter;
      const float* u = g + inter;
      for (int64_t j = 0; j < inter; ++j) {
        act[t * inter + j] = Bf16Round(Bf16Round(Silu(g[j])) * u[j]);
      }
    }
  });
  LinearBias(block.w2, {}, act, rows, h, ctx);
  AddResidual(x, h, rows, d, ctx);
}

void VisionTower::ForwardVit(std::span<const float> patches, std::span<const ImagePlan> plans,
                             std::span<float> vit_out, ExecContext& ctx) const {
  int64_t rows = 0;
  for (const ImagePlan& plan : plans) rows += plan.num_patches();
  const int64_t d = config_.hidden_size;
  const int64_t hd = config_.head_dim();
  DSV41_CHECK(static_cast<int64_t>(patches.size()) == rows * config_.patch_values() &&
                  static_cast<int64_t>(vit_out.size()) == rows * d && hd <= kMaxVisionHeadDim,
              "ForwardVit: %zu patch values, %zu outputs for %lld patches", patches.size(),
              vit_out.size(), static_cast<long long>(rows));
  if (rows == 0) return;
  ArenaScope scope(ctx.arena);
  std::span<float> rope_cos = ctx.arena.Alloc<float>(rows * hd / 2);
  std::span<float> rope_sin = ctx.arena.Alloc<float>(rows * hd / 2);
  RopeTables(plans, rope_inv_freq_, rope_cos, rope_sin);
  std::span<float> x = vit_out;  // the residual, bf16 values
  LinearBias(patch_embed_, patch_embed_bias_, patches, rows, x, ctx);
  for (const VisionBlockWeights& block : blocks_) {
    Block(block, x, rows, plans, rope_cos, rope_sin, ctx);
  }
  RmsNormRows(x, rows, final_norm_, kVisionNormEps, x);
}

void VisionTower::ForwardAligner(std::span<const float> vit_out, std::span<const ImagePlan> plans,
                                 std::span<float> rows, ExecContext& ctx) const {
  const int64_t d = config_.hidden_size;
  const int64_t r = config_.downsample_ratio;
  const int64_t width = r * r * d;
  int64_t num_tokens = 0;
  int64_t num_patches = 0;
  for (const ImagePlan& plan : plans) {
    num_tokens += plan.num_image_tokens();
    num_patches += plan.num_patches();
  }
  DSV41_CHECK(static_cast<int64_t>(vit_out.size()) == num_patches * d &&
                  static_cast<int64_t>(rows.size()) == num_tokens * output_dim_,
              "ForwardAligner: %zu inputs, %zu outputs", vit_out.size(), rows.size());
  if (num_tokens == 0) return;
  ArenaScope scope(ctx.arena);
  // §9: zero-pad each grid to (r·H, r·W), unfold r × r blocks channel-major (c · r² + ki · r + kj).
  std::span<float> z = ctx.arena.AllocZeroed<float>(num_tokens * width);
  int64_t token = 0;
  int64_t patch = 0;
  for (const ImagePlan& plan : plans) {
    for (int64_t i = 0; i < plan.patch_rows; ++i) {
      for (int64_t j = 0; j < plan.patch_cols; ++j) {
        const float* g = vit_out.data() + (patch + i * plan.patch_cols + j) * d;
        float* zrow = z.data() + (token + (i / r) * plan.token_cols + j / r) * width;
        const int64_t offset = (i % r) * r + j % r;
        for (int64_t c = 0; c < d; ++c) zrow[c * r * r + offset] = g[c];
      }
    }
    token += plan.num_image_tokens();
    patch += plan.num_patches();
  }
  std::span<float> hidden = ctx.arena.Alloc<float>(num_tokens * output_dim_);
  LinearBias(aligner_w1_, aligner_w1_bias_, z, num_tokens, hidden, ctx);
  for (float& v : hidden) v = Bf16Round(CrGelu(v));
  LinearBias(aligner_w2_, aligner_w2_bias_, hidden, num_tokens, rows, ctx);
}

void VisionTower::Encode(std::span<const float> patches, std::span<const ImagePlan> plans,
                         std::span<float> rows, ExecContext& ctx) const {
  int64_t num_patches = 0;
  for (const ImagePlan& plan : plans) num_patches += plan.num_patches();
  ArenaScope scope(ctx.arena);
  std::span<float> vit_out = ctx.arena.Alloc<float>(num_patches * config_.hidden_size);
  ForwardVit(patches, plans, vit_out, ctx);
  ForwardAligner(vit_out, plans, rows, ctx);
}

double VisionTower::MultiplyAddsPerImage(const VisionConfig& c, int32_t output_dim,
                                         const ImagePlan& plan) {
  const double n = static_cast<double>(plan.num_patches());
  const double d = c.hidden_size;
  const double per_block = n * (3 * d * d + d * d + 3.0 * c.intermediate_size * d) + 2 * n * n * d;
  const double r2 = static_cast<double>(c.downsample_ratio) * c.downsample_ratio;
  const double tokens = static_cast<double>(plan.num_image_tokens());
  return n * d * c.patch_values() + c.num_hidden_layers * per_block +
         tokens * (r2 * d * output_dim + static_cast<double>(output_dim) * output_dim);
}

}  // namespace dsv41

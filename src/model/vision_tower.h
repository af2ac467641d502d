#pragma once

// The vision tower (vision.md §8, §9): the ViT over the patches of one or more images, then the
// aligner that turns each r × r block of its output into one row of the text width. Weights are
// the checkpoint's BF16 tensors, read in place through the weight kernels (kernels/linear.h);
// every weight product runs once over the rows of all images of a call, and only the attention,
// full and bidirectional within each image (never across images), is per image. The arithmetic
// follows §13.2 with ExecContext::numerics choosing the weight-product accumulation (the
// attention's q·k and p·v products run on the same kernels over the keys and values).

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/exec_context.h"
#include "base/status.h"
#include "config/config.h"
#include "kernels/linear.h"
#include "model/norm.h"
#include "vision/image_plan.h"

namespace dsv41 {

class ModelWeights;

// The per-block weights (`vision.blocks.{i}.*`).
struct VisionBlockWeights {
  NormWeight norm1;
  LinearWeight wqkv;  // [3D, D]: rows q, then k, then v
  std::vector<float> wqkv_bias;
  LinearWeight wo;  // [D, D]
  std::vector<float> wo_bias;
  NormWeight norm2;
  LinearWeight w1;  // [2I, D]: rows 0 .. I − 1 gate, I .. 2I − 1 up; no bias
  LinearWeight w2;  // [D, I]; no bias
};

// Immutable after Load; views into the ModelWeights, which must outlive it. Forward functions are
// engine thread only (they use ctx's pool and arena).
class VisionTower {
 public:
  // The tower of a checkpoint whose config has one (FailedPrecondition-like InvalidArgument
  // otherwise); errors name the tensor.
  static Result<std::unique_ptr<VisionTower>> Load(const ModelWeights& weights);

  const VisionConfig& config() const { return config_; }
  int32_t output_dim() const { return output_dim_; }  // the text model's hidden size

  // ViT (§8) over a batch of images: patches [Σ N_i, 3p²] holds each image's patches in order
  // (bf16 values, vision/patches.h), plans[i] gives image i's patch grid (N_i = Hv · Wv);
  // vit_out [Σ N_i, D] receives the final-norm output (bf16 values).
  void ForwardVit(std::span<const float> patches, std::span<const ImagePlan> plans,
                  std::span<float> vit_out, ExecContext& ctx) const;

  // Aligner (§9) over ForwardVit's output: rows [Σ H_i · W_i, dim] (bf16 values), each image's
  // tokens in reading order.
  void ForwardAligner(std::span<const float> vit_out, std::span<const ImagePlan> plans,
                      std::span<float> rows, ExecContext& ctx) const;

  // Both: the aligner rows of each image from its patches.
  void Encode(std::span<const float> patches, std::span<const ImagePlan> plans,
              std::span<float> rows, ExecContext& ctx) const;

  // The learned rows of the span delimiters (§10), bf16 values [dim].
  std::span<const float> image_start() const { return image_start_; }
  std::span<const float> image_end() const { return image_end_; }
  std::span<const float> image_newline() const { return image_newline_; }

  // Multiply-adds of encoding one image of `plan` (weight products and the attention's two
  // products), for the speed report.
  static double MultiplyAddsPerImage(const VisionConfig& config, int32_t output_dim,
                                     const ImagePlan& plan);

 private:
  VisionTower() = default;

  void Block(const VisionBlockWeights& block, std::span<float> x, int64_t rows,
             std::span<const ImagePlan> plans, std::span<const float> rope_cos,
             std::span<const float> rope_sin, ExecContext& ctx) const;
  // Full attention of one image over its rows of qkv [n, 3D] into o [n, D] (bf16 values).
  void ImageAttention(std::span<const float> qkv, int64_t n, std::span<float> o,
                      ExecContext& ctx) const;

  VisionConfig config_;
  int32_t output_dim_ = 0;
  LinearWeight patch_embed_;
  std::vector<float> patch_embed_bias_;
  std::vector<VisionBlockWeights> blocks_;
  NormWeight final_norm_;
  LinearWeight aligner_w1_;
  std::vector<float> aligner_w1_bias_;
  LinearWeight aligner_w2_;
  std::vector<float> aligner_w2_bias_;
  std::vector<float> image_start_;
  std::vector<float> image_end_;
  std::vector<float> image_newline_;
  std::vector<float> rope_inv_freq_;  // [hd / 4]
};

}  // namespace dsv41

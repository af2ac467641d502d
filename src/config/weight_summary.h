#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "config/tensor_inventory.h"

namespace dsv41 {

// What a stored tensor is for, to account memory by kind (serving.md §10).
enum class WeightKind {
  kEmbedHead,         // embed.weight, head.weight
  kAttention,         // layers.N.attn.* except compressor and indexer
  kCompressor,        // layers.N.attn.compressor.*
  kIndexer,           // layers.N.attn.indexer.*
  kNormsAndMhc,       // every RMSNorm weight and hc_* tensor
  kRouter,            // ffn.gate.*
  kRoutedExperts,     // ffn.experts.*
  kSharedExperts,     // ffn.shared_experts.*
  kEngramTables,      // engram.embed.* (the ~190 GiB tables)
  kEngramProjection,  // engram.wkv, q_weight, k_weight
  kDspark,            // mtp.*
  kVision,            // vision.*, aligner.*, image_start / image_end / image_newline
  kOther,
};
inline constexpr int kNumWeightKinds = static_cast<int>(WeightKind::kOther) + 1;

// "embed+head", "attention", ..., "other".
std::string_view WeightKindName(WeightKind kind);
WeightKind ClassifyTensor(std::string_view name);

struct WeightKindTotal {
  WeightKind kind = WeightKind::kOther;
  uint64_t num_tensors = 0;
  uint64_t bytes = 0;
};

// Tensor count and bytes per kind, every kind listed in enum order (zero rows included).
std::vector<WeightKindTotal> SummarizeWeights(const std::vector<TensorSpec>& tensors);

}  // namespace dsv41

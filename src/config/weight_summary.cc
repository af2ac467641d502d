#include "config/weight_summary.h"

#include <array>

namespace dsv41 {
namespace {
bool Has(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}
}  // namespace

std::string_view WeightKindName(WeightKind kind) {
  static constexpr std::array<std::string_view, kNumWeightKinds> kNames = {
      "embed+head", "attention",      "compressor",     "indexer",       "norms+mhc",
      "router",     "routed experts", "shared experts", "engram tables", "engram proj",
      "dspark",     "vision",         "other"};
  return kNames[static_cast<size_t>(kind)];
}

WeightKind ClassifyTensor(std::string_view name) {
  if (name.rfind("mtp.", 0) == 0) return WeightKind::kDspark;
  if (name.starts_with("vision.") || name.starts_with("aligner.") || name.starts_with("image_")) {
    return WeightKind::kVision;
  }
  if (name == "embed.weight" || name == "head.weight") return WeightKind::kEmbedHead;
  if (Has(name, ".engram.embed.")) return WeightKind::kEngramTables;
  if (Has(name, ".engram.")) return WeightKind::kEngramProjection;
  if (Has(name, ".attn.compressor.")) return WeightKind::kCompressor;
  if (Has(name, ".attn.indexer.")) return WeightKind::kIndexer;
  if (Has(name, ".attn.")) return WeightKind::kAttention;
  if (Has(name, ".ffn.gate.")) return WeightKind::kRouter;
  if (Has(name, ".ffn.experts.")) return WeightKind::kRoutedExperts;
  if (Has(name, ".ffn.shared_experts.")) return WeightKind::kSharedExperts;
  if (Has(name, "norm") || Has(name, ".hc_")) return WeightKind::kNormsAndMhc;
  return WeightKind::kOther;
}

std::vector<WeightKindTotal> SummarizeWeights(const std::vector<TensorSpec>& tensors) {
  std::vector<WeightKindTotal> totals(kNumWeightKinds);
  for (int k = 0; k < kNumWeightKinds; ++k) totals[k].kind = static_cast<WeightKind>(k);
  for (const TensorSpec& t : tensors) {
    WeightKindTotal& total = totals[static_cast<size_t>(ClassifyTensor(t.name))];
    ++total.num_tensors;
    total.bytes += TensorBytes(t);
  }
  return totals;
}

}  // namespace dsv41

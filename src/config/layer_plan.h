#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "config/config.h"

namespace dsv41 {

// What a layer's attention does (model.md §2.1).
enum class LayerMode {
  kSwaOnly,  // ratio 0: own SWA KV only
  kFull,     // kv source: own compressor + own indexer
  kReindex,  // index source, not kv source: own indexer over the kv source's keys
  kReuse,    // uses its kv source's compressed KV and its index source's top-k
};

enum class RopeTable { kMain, kCompress };

// vLLM-Ascend's indexer candidate mode of an index-source layer.
enum class CandidateMode { kNone = 0, kProduce = 1, kFilter = 2, kPlain = 3 };

// The role of one backbone layer. Computed from the config alone.
struct LayerRole {
  int32_t layer = 0;
  int32_t ratio = 0;
  LayerMode mode = LayerMode::kSwaOnly;
  std::optional<int32_t> kv_source_layer;     // ratio > 0 only
  std::optional<int32_t> index_source_layer;  // ratio > 0 only
  bool is_kv_source = false;
  bool is_index_source = false;
  bool is_candidate_source = false;
  bool uses_candidate_filter = false;
  std::optional<int32_t> engram_slot;
  RopeTable rope_table = RopeTable::kMain;
  std::optional<int32_t> dspark_target_index;
  CandidateMode candidate_mode = CandidateMode::kNone;

  bool owns_compressor() const { return is_kv_source; }
  bool owns_compressor_gate() const { return is_kv_source && ratio > 1; }
  bool owns_indexer_query() const { return is_index_source; }
  bool owns_indexer_key() const { return is_kv_source; }
  bool has_engram() const { return engram_slot.has_value(); }
};

struct LayerPlan {
  std::vector<LayerRole> layers;  // backbone layers 0..n-1
  int32_t num_dspark_stages = 0;  // mtp.0..: SWA-only, main RoPE
};

// Derives the plan (model.md §2.1). The config must be valid (ValidateConfig).
LayerPlan PlanLayers(const ModelConfig& config);

// "swa", "full", "reindex", "reuse" (the goldens' layer_plan.json spelling).
std::string_view LayerModeName(LayerMode mode);
std::string_view RopeTableName(RopeTable table);
// "-", "produce", "filter", "plain".
std::string_view CandidateModeName(CandidateMode mode);

// The plan as the goldens' layer_plan.json: one object per layer with layer, ratio, mode,
// kv_source, index_source, candidate_source, uses_candidates, engram_slot, rope.
Json LayerPlanToJson(const LayerPlan& plan);

}  // namespace dsv41

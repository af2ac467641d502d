#include "config/layer_plan.h"

#include <algorithm>

#include "base/check.h"

namespace dsv41 {
namespace {

// The largest element of `ids` that is <= l (model.md §2.1 `latest`).
std::optional<int32_t> Latest(const std::vector<int32_t>& ids, int32_t l) {
  std::optional<int32_t> latest;
  for (const int32_t id : ids) {
    if (id <= l && (!latest || id > *latest)) latest = id;
  }
  return latest;
}

std::optional<int32_t> IndexOf(const std::vector<int32_t>& ids, int32_t l) {
  const auto it = std::find(ids.begin(), ids.end(), l);
  if (it == ids.end()) return std::nullopt;
  return static_cast<int32_t>(it - ids.begin());
}

}  // namespace

LayerPlan PlanLayers(const ModelConfig& config) {
  DSV41_CHECK(config.compress_ratios.size() == static_cast<size_t>(config.num_hidden_layers),
              "compress_ratios has %zu entries for %d layers (config not validated)",
              config.compress_ratios.size(), config.num_hidden_layers);
  LayerPlan plan;
  plan.num_dspark_stages = config.num_nextn_predict_layers;
  const int32_t candidate = config.candidate_source_layer_id;
  for (int32_t l = 0; l < config.num_hidden_layers; ++l) {
    LayerRole role;
    role.layer = l;
    role.ratio = config.compress_ratios[static_cast<size_t>(l)];
    role.is_kv_source = IndexOf(config.kv_source_layer_ids, l).has_value();
    role.is_index_source = IndexOf(config.index_source_layer_ids, l).has_value();
    role.is_candidate_source = candidate >= 0 && l == candidate;
    role.uses_candidate_filter = role.is_index_source && candidate >= 0 && l > candidate;
    if (role.ratio > 0) {
      role.kv_source_layer = Latest(config.kv_source_layer_ids, l);
      role.index_source_layer = Latest(config.index_source_layer_ids, l);
      role.rope_table = RopeTable::kCompress;
    }
    if (role.ratio == 0) {
      role.mode = LayerMode::kSwaOnly;
    } else if (role.is_kv_source) {
      role.mode = LayerMode::kFull;
    } else if (role.is_index_source) {
      role.mode = LayerMode::kReindex;
    } else {
      role.mode = LayerMode::kReuse;
    }
    role.engram_slot = IndexOf(config.engram_layer_ids, l);
    role.dspark_target_index = IndexOf(config.dspark_target_layer_ids, l);
    if (role.is_index_source) {
      role.candidate_mode = role.is_candidate_source     ? CandidateMode::kProduce
                            : role.uses_candidate_filter ? CandidateMode::kFilter
                                                         : CandidateMode::kPlain;
    }
    plan.layers.push_back(role);
  }
  return plan;
}

std::string_view LayerModeName(LayerMode mode) {
  switch (mode) {
    case LayerMode::kSwaOnly:
      return "swa";
    case LayerMode::kFull:
      return "full";
    case LayerMode::kReindex:
      return "reindex";
    case LayerMode::kReuse:
      return "reuse";
  }
  return "swa";
}

std::string_view RopeTableName(RopeTable table) {
  return table == RopeTable::kCompress ? "compress" : "main";
}

std::string_view CandidateModeName(CandidateMode mode) {
  switch (mode) {
    case CandidateMode::kNone:
      return "-";
    case CandidateMode::kProduce:
      return "produce";
    case CandidateMode::kFilter:
      return "filter";
    case CandidateMode::kPlain:
      return "plain";
  }
  return "-";
}

Json LayerPlanToJson(const LayerPlan& plan) {
  const auto optional_int = [](const std::optional<int32_t>& value) -> Json {
    return value ? Json(*value) : Json(nullptr);
  };
  Json layers = Json::array();
  for (const LayerRole& role : plan.layers) {
    Json j = Json::object();
    j["layer"] = role.layer;
    j["ratio"] = role.ratio;
    j["mode"] = std::string(LayerModeName(role.mode));
    j["kv_source"] = optional_int(role.kv_source_layer);
    j["index_source"] = optional_int(role.index_source_layer);
    j["candidate_source"] = role.is_candidate_source;
    j["uses_candidates"] = role.uses_candidate_filter;
    j["engram_slot"] = optional_int(role.engram_slot);
    j["rope"] = std::string(RopeTableName(role.rope_table));
    layers.push_back(std::move(j));
  }
  return layers;
}

}  // namespace dsv41

// `dsv41 plan`: the layer roles, weight bytes by kind, KV bytes per token, the cache plan and how
// much context fits a memory budget — from a model directory, a config file, or the release.

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "base/json.h"
#include "cli/command.h"
#include "cli/progress_printer.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "config/weight_summary.h"
#include "kv/cache_plan.h"
#include "model/weights.h"

namespace dsv41 {
namespace {

struct PlanFlags {
  std::string model_dir;
  std::string config_file;
  bool released = false;
  int32_t block_size = 128;
  std::string kv_profile = "seed";
  bool dspark = false;
  int32_t num_speculative_tokens = 0;
  double kv_cache_gib = 4.0;
  bool json = false;
};

std::string OptLayer(const std::optional<int32_t>& v) { return v ? std::to_string(*v) : "-"; }

void PrintLayerTable(const LayerPlan& plan) {
  std::printf("layer plan (%zu layers, %d DSpark stages)\n", plan.layers.size(),
              plan.num_dspark_stages);
  std::printf("  %5s %5s %-8s %9s %12s %-9s %-6s %-6s %-8s %-6s\n", "layer", "ratio", "mode",
              "kv_source", "index_source", "candidate", "filter", "engram", "rope", "dspark");
  for (const LayerRole& r : plan.layers) {
    std::printf("  %5d %5d %-8.*s %9s %12s %-9.*s %-6s %-6s %-8.*s %-6s\n", r.layer, r.ratio,
                static_cast<int>(LayerModeName(r.mode).size()), LayerModeName(r.mode).data(),
                OptLayer(r.kv_source_layer).c_str(), OptLayer(r.index_source_layer).c_str(),
                static_cast<int>(CandidateModeName(r.candidate_mode).size()),
                CandidateModeName(r.candidate_mode).data(), r.uses_candidate_filter ? "yes" : "no",
                OptLayer(r.engram_slot).c_str(),
                static_cast<int>(RopeTableName(r.rope_table).size()),
                RopeTableName(r.rope_table).data(), OptLayer(r.dspark_target_index).c_str());
  }
}

void PrintWeights(const std::vector<WeightKindTotal>& totals) {
  uint64_t all_bytes = 0;
  uint64_t all_tensors = 0;
  std::printf("weights by kind\n");
  for (const WeightKindTotal& t : totals) {
    if (t.num_tensors == 0) continue;
    std::printf("  %-15.*s %8llu tensors %18llu B (%10.3f GiB)\n",
                static_cast<int>(WeightKindName(t.kind).size()), WeightKindName(t.kind).data(),
                static_cast<unsigned long long>(t.num_tensors),
                static_cast<unsigned long long>(t.bytes), static_cast<double>(t.bytes) / (1 << 30));
    all_bytes += t.bytes;
    all_tensors += t.num_tensors;
  }
  std::printf("  %-15s %8llu tensors %18llu B (%10.3f GiB)\n", "total",
              static_cast<unsigned long long>(all_tensors),
              static_cast<unsigned long long>(all_bytes),
              static_cast<double>(all_bytes) / (1 << 30));
}

int RunPlan(const PlanFlags& flags) {
  const int sources = !flags.model_dir.empty() + !flags.config_file.empty() + flags.released;
  if (sources != 1) {
    std::fprintf(stderr, "dsv41 plan: give exactly one of --model, --config, --released\n");
    return 2;
  }
  Result<KvProfile> profile = ParseKvProfile(flags.kv_profile);
  if (!profile.ok()) {
    std::fprintf(stderr, "dsv41 plan: --kv-profile: %s\n", profile.status().message().c_str());
    return 2;
  }
  ModelConfig config;
  std::vector<TensorSpec> present;
  bool checked_weights = false;
  if (flags.released) {
    config = ReleasedConfig();
  } else if (!flags.config_file.empty()) {
    Result<Json> json = ReadJsonFile(flags.config_file);
    Result<ModelConfig> parsed =
        json.ok() ? ParseModelConfig(*json) : Result<ModelConfig>(json.status());
    if (!parsed.ok()) {
      std::fprintf(stderr, "dsv41 plan: %s\n", parsed.status().ToString().c_str());
      return 1;
    }
    config = std::move(parsed).value();
  } else {
    const bool has_weights =
        std::filesystem::exists(flags.model_dir + "/model.safetensors.index.json") ||
        std::filesystem::exists(flags.model_dir + "/model.safetensors");
    if (has_weights) {
      ProgressPrinter printer;
      Result<ModelWeights> weights =
          ModelWeights::Load(flags.model_dir, LoadOptions{}, printer.AsFn());
      printer.Done();
      if (!weights.ok()) {
        std::fprintf(stderr, "dsv41 plan: %s\n", weights.status().ToString().c_str());
        return 1;
      }
      config = weights->config();
      checked_weights = true;
    } else {
      Result<ModelConfig> parsed = LoadModelConfig(flags.model_dir);
      if (!parsed.ok()) {
        std::fprintf(stderr, "dsv41 plan: %s\n", parsed.status().ToString().c_str());
        return 1;
      }
      config = std::move(parsed).value();
    }
  }
  const LayerPlan plan = PlanLayers(config);
  CachePlanOptions cache_options;
  cache_options.block_tokens = flags.block_size;
  cache_options.profile = *profile;
  cache_options.dspark = flags.dspark;
  cache_options.num_speculative_tokens = flags.num_speculative_tokens;
  Result<CachePlan> cache = PlanCache(config, plan, cache_options);
  if (!cache.ok()) {
    std::fprintf(stderr, "dsv41 plan: %s\n", cache.status().ToString().c_str());
    return 1;
  }
  const uint64_t budget = static_cast<uint64_t>(std::llround(flags.kv_cache_gib * (1ull << 30)));
  const PoolSizing pool = SizePool(*cache, budget, config);
  const std::vector<WeightKindTotal> weights = SummarizeWeights(ExpectedTensors(config, plan));

  if (flags.json) {
    OrderedJson out;
    out["layers"] = LayerPlanToJson(plan);
    OrderedJson w = OrderedJson::object();
    for (const WeightKindTotal& t : weights) w[std::string(WeightKindName(t.kind))] = t.bytes;
    out["weight_bytes"] = std::move(w);
    out["kv_bytes_per_token"] = cache->KvBytesPerToken();
    out["kv_payload_bytes_per_token"] = cache->PayloadBytesPerToken();
    out["cache_plan"] = CachePlanToJson(*cache);
    out["pool"] = PoolSizingToJson(pool);
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("model: %s\n", flags.released              ? "DeepSeek-V4.1-Flash (released config)"
                             : flags.config_file.empty() ? flags.model_dir.c_str()
                                                         : flags.config_file.c_str());
  std::printf("  %d layers, hidden %d, vocab %d, %d routed experts (top %d), %s weights%s\n",
              config.num_hidden_layers, config.hidden_size, config.vocab_size,
              config.n_routed_experts, config.num_experts_per_tok,
              config.quantization.quantized ? "FP8/MXFP4" : "BF16",
              checked_weights ? "; every expected tensor present with its dtype and shape" : "");
  PrintLayerTable(plan);
  PrintWeights(weights);
  std::printf("kv bytes per token: %.1f amortised over a block id (%.1f of payload)\n",
              cache->KvBytesPerToken(), cache->PayloadBytesPerToken());
  std::printf("%s", DescribeCachePlan(*cache).c_str());
  std::printf("pool for %.2f GiB: %u block ids of %zu B; longest single request %lld tokens\n",
              flags.kv_cache_gib, pool.num_block_ids, pool.bytes_per_block_id,
              static_cast<long long>(pool.max_context_tokens));
  return 0;
}

std::function<int()> SetupPlan(CLI::App& sub) {
  auto flags = std::make_shared<PlanFlags>();
  sub.add_option("-m,--model", flags->model_dir,
                 "model directory (weights are checked if present)");
  sub.add_option("--config", flags->config_file, "a config.json file instead of a directory");
  sub.add_flag("--released", flags->released, "plan the released DeepSeek-V4.1-Flash config");
  sub.add_option("--block-size", flags->block_size, "tokens per cache block");
  sub.add_option("--kv-profile", flags->kv_profile, "cache row formats: seed, compact or packed");
  sub.add_flag("--dspark", flags->dspark, "reserve DSpark draft windows");
  sub.add_option("--num-speculative-tokens", flags->num_speculative_tokens,
                 "draft tokens per verify step (ring sizing)");
  sub.add_option("--kv-cache-gib", flags->kv_cache_gib, "KV cache budget in GiB");
  sub.add_flag("--json", flags->json, "print JSON instead of text");
  return [flags] { return RunPlan(*flags); };
}

DSV41_REGISTER_COMMAND(kPlanCommand, "plan",
                       "print layer roles, weight bytes, the KV cache plan and what fits",
                       SetupPlan);

}  // namespace
}  // namespace dsv41

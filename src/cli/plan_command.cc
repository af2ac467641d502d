// `dsv41 plan`: the layer roles, weight bytes by kind, KV bytes per token, the cache plan and how
// much context fits a memory budget — from a model directory, a config file, or the release.

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>

#include "base/json.h"
#include "cli/command.h"
#include "cli/progress_printer.h"
#include "config/config.h"
#include "config/layer_plan.h"
#include "config/rank_shard.h"
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
  int64_t max_model_len = 0;  // > 0: also size one request of this many tokens
  int32_t ranks = 0;          // > 0: what each rank of an mpirun -np N run holds
  bool json = false;
};

// The memory one rank of a multi-process run needs (docs/multinode.md): its weights, the KV cache
// (attention runs on every rank, so each holds the whole cache) and its Engram rows in memory —
// or, on the disk tier, a hot-row cache of 1 GiB (the default) instead of the rows.
struct RankMemory {
  RankWeightBytes weights;
  IndexRange first_moe_experts;         // its routed experts of MoE 0 (the ranges rotate)
  std::vector<IndexRange> engram_rows;  // its rows of each Engram table
  uint64_t kv_cache_bytes = 0;
  uint64_t engram_cache_bytes = uint64_t{1} << 30;
  uint64_t with_engram_in_memory() const {
    return weights.weights() + kv_cache_bytes + weights.engram_rows;
  }
  uint64_t with_engram_on_disk() const {
    return weights.weights() + kv_cache_bytes + engram_cache_bytes;
  }
};

// A machine fits a rank when the rank needs at most 90 % of its memory (the rest: the OS, the
// step's activations, I/O buffers).
constexpr double kUsableMemoryFraction = 0.9;
constexpr uint64_t kMachineBytes[] = {256'000'000'000ull, 512'000'000'000ull};

bool Fits(uint64_t need, uint64_t machine) {
  return static_cast<double>(need) <= kUsableMemoryFraction * static_cast<double>(machine);
}

std::vector<RankMemory> PlanRanks(const ModelConfig& config, const std::vector<TensorSpec>& tensors,
                                  int32_t ranks, uint64_t kv_cache_bytes) {
  std::vector<RankMemory> out;
  for (const RankWeightBytes& w : WeightBytesPerRank(config, tensors, ranks)) {
    const RankShard shard{static_cast<int32_t>(out.size()), ranks};
    RankMemory m{.weights = w,
                 .first_moe_experts = ShardExperts(config.n_routed_experts, 0, shard),
                 .engram_rows = {},
                 .kv_cache_bytes = kv_cache_bytes};
    for (int64_t rows : config.engram_num_embeddings) {
      m.engram_rows.push_back(ShardEngramRows(rows, shard));
    }
    out.push_back(std::move(m));
  }
  return out;
}

double Gib(uint64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }

OrderedJson RanksToJson(const std::vector<RankMemory>& ranks) {
  OrderedJson out;
  OrderedJson per_rank = OrderedJson::array();
  uint64_t worst_in_memory = 0, worst_on_disk = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    OrderedJson j;
    j["rank"] = r;
    j["routed_expert_bytes"] = ranks[r].weights.routed_experts;
    j["replicated_bytes"] = ranks[r].weights.replicated;
    j["engram_row_bytes"] = ranks[r].weights.engram_rows;
    j["kv_cache_bytes"] = ranks[r].kv_cache_bytes;
    j["bytes_engram_in_memory"] = ranks[r].with_engram_in_memory();
    j["bytes_engram_on_disk"] = ranks[r].with_engram_on_disk();
    j["first_moe_experts"] = {ranks[r].first_moe_experts.begin, ranks[r].first_moe_experts.end};
    OrderedJson rows = OrderedJson::array();
    for (const IndexRange& range : ranks[r].engram_rows) rows.push_back({range.begin, range.end});
    j["engram_rows"] = std::move(rows);
    worst_in_memory = std::max(worst_in_memory, ranks[r].with_engram_in_memory());
    worst_on_disk = std::max(worst_on_disk, ranks[r].with_engram_on_disk());
    per_rank.push_back(std::move(j));
  }
  out["num_ranks"] = ranks.size();
  out["per_rank"] = std::move(per_rank);
  OrderedJson fits;
  for (uint64_t machine : kMachineBytes) {
    OrderedJson f;
    f["engram_in_memory"] = Fits(worst_in_memory, machine);
    f["engram_on_disk"] = Fits(worst_on_disk, machine);
    fits[StrFormat("%lluGB", static_cast<unsigned long long>(machine / 1'000'000'000ull))] =
        std::move(f);
  }
  out["fits"] = std::move(fits);
  return out;
}

void PrintRanks(const std::vector<RankMemory>& ranks) {
  std::printf(
      "ranks: %zu (routed experts and Engram rows split between the ranks; attention, routers, "
      "shared experts, mHC, embedding, head and the KV cache on every rank)\n",
      ranks.size());
  std::printf("  %4s %14s %14s %14s %14s %20s %20s\n", "rank", "routed experts", "replicated",
              "engram rows", "kv cache", "engram in memory", "engram on disk");
  uint64_t worst_in_memory = 0, worst_on_disk = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankMemory& m = ranks[r];
    std::printf("  %4zu %10.2f GiB %10.2f GiB %10.2f GiB %10.2f GiB %16.2f GiB %16.2f GiB\n", r,
                Gib(m.weights.routed_experts), Gib(m.weights.replicated),
                Gib(m.weights.engram_rows), Gib(m.kv_cache_bytes), Gib(m.with_engram_in_memory()),
                Gib(m.with_engram_on_disk()));
    worst_in_memory = std::max(worst_in_memory, m.with_engram_in_memory());
    worst_on_disk = std::max(worst_on_disk, m.with_engram_on_disk());
  }
  // What each holds: its experts of the first MoE (the larger ranges rotate from one MoE to
  // the next) and its row range [begin, end) of each Engram table (config/rank_shard.h).
  for (size_t r = 0; r < ranks.size(); ++r) {
    const IndexRange experts = ranks[r].first_moe_experts;
    std::printf("  rank %zu: experts %lld..%lld of MoE 0", r, static_cast<long long>(experts.begin),
                static_cast<long long>(experts.end - 1));
    for (size_t t = 0; t < ranks[r].engram_rows.size(); ++t) {
      const IndexRange rows = ranks[r].engram_rows[t];
      std::printf("; engram table %zu rows [%lld, %lld)", t, static_cast<long long>(rows.begin),
                  static_cast<long long>(rows.end));
    }
    std::printf("\n");
  }
  for (uint64_t machine : kMachineBytes) {
    const bool in_memory = Fits(worst_in_memory, machine);
    const bool on_disk = Fits(worst_on_disk, machine);
    const char* verdict = in_memory ? "fits, with the Engram rows in memory"
                          : on_disk
                              ? "fits only with the Engram rows on disk (--engram-storage disk)"
                              : "does not fit, even with the Engram rows on disk";
    std::printf("  one %llu GB machine per rank: %s\n",
                static_cast<unsigned long long>(machine / 1'000'000'000ull), verdict);
  }
  std::printf(
      "  (a rank fits when it needs at most %.0f %% of the machine's memory; on disk the Engram "
      "rows cost a 1 GiB hot-row cache)\n",
      kUsableMemoryFraction * 100);
}

// One request of `context_tokens` positions at its peak (serving.md §3.7), in 64-bit arithmetic:
// at 2^20 tokens the release needs 8,215 ids, over 4 GiB.
struct RequestSizing {
  int64_t context_tokens = 0;
  int32_t step_tokens = 1;
  RequestBlockNeed need;
  uint64_t bytes = 0;  // need.total() × bytes_per_block_id
  bool fits_pool = false;
};

RequestSizing SizeRequest(const CachePlan& plan, const PoolSizing& pool, int64_t context_tokens) {
  RequestSizing r;
  r.context_tokens = context_tokens;
  r.step_tokens = DecodeStepTokens(plan);
  r.need = PeakRequestBlockNeed(plan, context_tokens, r.step_tokens);
  r.bytes = static_cast<uint64_t>(r.need.total()) * static_cast<uint64_t>(plan.bytes_per_block_id);
  r.fits_pool = r.need.total() <= static_cast<int64_t>(pool.num_block_ids);
  return r;
}

OrderedJson RequestSizingToJson(const RequestSizing& r) {
  OrderedJson j;
  j["context_tokens"] = r.context_tokens;
  j["step_tokens"] = r.step_tokens;
  j["kv_ids"] = r.need.kv_ids;
  j["ring_ids"] = r.need.ring_ids;
  j["window_ids_per_group"] = r.need.swa_ids_per_group;
  j["num_window_groups"] = r.need.num_swa_groups + r.need.num_draft_groups;
  j["block_ids"] = r.need.total();
  j["bytes"] = r.bytes;
  j["fits_pool"] = r.fits_pool;
  return j;
}

// --max-model-len must be a position count the model and the engine's int32 positions can hold
// (model.md §12.7: positions >= max_position_embeddings are rejected). Empty when it is.
std::string CheckMaxModelLen(int64_t max_model_len, const ModelConfig& config) {
  if (max_model_len < 0) {
    return StrFormat("--max-model-len %lld: want >= 0", static_cast<long long>(max_model_len));
  }
  if (config.max_position_embeddings > 0 && max_model_len > config.max_position_embeddings) {
    return StrFormat("--max-model-len %lld exceeds max_position_embeddings %lld",
                     static_cast<long long>(max_model_len),
                     static_cast<long long>(config.max_position_embeddings));
  }
  if (max_model_len > std::numeric_limits<int32_t>::max()) {
    return StrFormat("--max-model-len %lld exceeds the largest position count %d (int32 positions)",
                     static_cast<long long>(max_model_len), std::numeric_limits<int32_t>::max());
  }
  return "";
}

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

// The config the flags name: the release's, a config.json, or a model directory's (whose
// tensors are then checked against it: `checked_weights`).
Result<ModelConfig> LoadPlanConfig(const PlanFlags& flags, bool& checked_weights) {
  if (flags.released) return ReleasedConfig();
  if (!flags.config_file.empty()) {
    DSV41_ASSIGN_OR_RETURN(Json json, ReadJsonFile(flags.config_file));
    return ParseModelConfig(json);
  }
  const bool has_weights =
      std::filesystem::exists(flags.model_dir + "/model.safetensors.index.json") ||
      std::filesystem::exists(flags.model_dir + "/model.safetensors");
  if (!has_weights) return LoadModelConfig(flags.model_dir);
  ProgressPrinter printer;
  Result<ModelWeights> weights = ModelWeights::Load(flags.model_dir, LoadOptions{}, printer.AsFn());
  printer.Done();
  DSV41_RETURN_IF_ERROR(weights.status());
  checked_weights = true;
  return weights->config();
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
  bool checked_weights = false;
  Result<ModelConfig> loaded = LoadPlanConfig(flags, checked_weights);
  if (!loaded.ok()) {
    std::fprintf(stderr, "dsv41 plan: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  const ModelConfig config = std::move(loaded).value();
  if (const std::string bad = CheckMaxModelLen(flags.max_model_len, config); !bad.empty()) {
    std::fprintf(stderr, "dsv41 plan: %s\n", bad.c_str());
    return 2;
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
  const std::vector<TensorSpec> tensors = ExpectedTensors(config, plan);
  const std::vector<WeightKindTotal> weights = SummarizeWeights(tensors);
  if (flags.ranks < 0) {
    std::fprintf(stderr, "dsv41 plan: --ranks %d: want >= 1\n", flags.ranks);
    return 2;
  }
  const std::vector<RankMemory> ranks =
      flags.ranks > 0 ? PlanRanks(config, tensors, flags.ranks, pool.used_bytes)
                      : std::vector<RankMemory>{};

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
    if (flags.max_model_len > 0) {
      out["request"] = RequestSizingToJson(SizeRequest(*cache, pool, flags.max_model_len));
    }
    if (!ranks.empty()) out["ranks"] = RanksToJson(ranks);
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
  if (flags.max_model_len > 0) {
    const RequestSizing r = SizeRequest(*cache, pool, flags.max_model_len);
    std::printf(
        "request of %lld tokens (steps of %d): %lld block ids (kv %lld + ring %lld + %lld x %d "
        "window groups) = %llu B (%.3f GiB); %s the pool\n",
        static_cast<long long>(r.context_tokens), r.step_tokens,
        static_cast<long long>(r.need.total()), static_cast<long long>(r.need.kv_ids),
        static_cast<long long>(r.need.ring_ids), static_cast<long long>(r.need.swa_ids_per_group),
        r.need.num_swa_groups + r.need.num_draft_groups, static_cast<unsigned long long>(r.bytes),
        static_cast<double>(r.bytes) / (1ull << 30), r.fits_pool ? "fits" : "does not fit");
  }
  if (!ranks.empty()) PrintRanks(ranks);
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
  sub.add_option("--max-model-len", flags->max_model_len,
                 "also size one request of this many tokens (prompt + output)");
  sub.add_option("--ranks", flags->ranks,
                 "also print what each rank of `mpirun -np N` holds (experts, Engram rows, KV) "
                 "and whether it fits a 256 GB / 512 GB machine");
  sub.add_flag("--json", flags->json, "print JSON instead of text");
  return [flags] { return RunPlan(*flags); };
}

DSV41_REGISTER_COMMAND(kPlanCommand, "plan",
                       "print layer roles, weight bytes, the KV cache plan and what fits",
                       SetupPlan);

}  // namespace
}  // namespace dsv41

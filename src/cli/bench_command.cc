// `dsv41 bench`: speed of the engine on the loaded model (the harness is engine/bench_engine.h).
// At each concurrency level N it runs N independent requests with different synthetic prompts at
// once and reports the median time to first token, the aggregate prefill and decode tokens/s, the
// median time per output token, and the figures against the machine's limits measured on the spot
// (STYLE.md §12): decode weight bytes per second over the read bandwidth, prefill weight-GEMM
// flops per second over the faster of the fp32 FMA and bf16 dot-product peaks. With --speculative
// it also runs each repetition with speculative decoding and reports its decode tokens/s, the
// speed-up, the draft acceptance rate (per position too), the mean accepted length and a verify
// step's time over a plain decode step's. Figures on stdout (text, or one JSON object per level
// with --json), progress on stderr.
//
// Engram offload (serving.md §8.6): --engram-storage and --engram-prefetch take comma lists
// (e.g. resident,disk and on,off); every combination is measured with its repetitions
// interleaved, and --cold drops the table files from the page cache and empties the hot-row cache
// before every repetition. Each tier is opened once.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/machine_limits.h"
#include "base/mpi_communicator.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/image_flags.h"
#include "cli/int_list.h"
#include "cli/job.h"
#include "engine/bench_engine.h"
#include "engine/bench_vision.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"

namespace dsv41 {
namespace {

struct BenchFlags {
  std::string model_dir;
  int32_t prompt_tokens = 128;
  int32_t decode_tokens = 32;
  int32_t repetitions = 5;
  std::string concurrency = "1";
  bool json = false;
  bool cold = false;
  bool oracle = false;  // also measure the verify path with drafts that are always right
  std::string image;    // measure the vision tower on this image instead of the engine
  EngineFlags engine;
  ImageFlags image_flags;
};

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) items.push_back(item);
  return items;
}

// The engine flags of one configuration: the shared ones with its Engram tier and prefetch.
EngineFlags ConfigFlags(const BenchFlags& flags, const EngineBenchConfig& config) {
  EngineFlags one = flags.engine;
  one.engram_storage = config.engram_storage;
  one.engram_prefetch = config.engram_prefetch;
  return one;
}

// The harness's options: every combination of --engram-storage and --engram-prefetch, each with
// the engine options its flags resolve to. Null after the usage on stderr when a flag is bad.
std::optional<EngineBenchOptions> ToBenchOptions(const BenchFlags& flags) {
  Result<std::vector<int32_t>> levels = ParseIntList(flags.concurrency, "--concurrency", 1, 4096);
  EngineBenchOptions options;
  options.prompt_tokens = flags.prompt_tokens;
  options.decode_tokens = flags.decode_tokens;
  options.repetitions = flags.repetitions;
  options.cold = flags.cold;
  options.oracle = flags.oracle;
  if (levels.ok()) options.concurrency = *levels;
  for (const std::string& storage : SplitList(flags.engine.engram_storage)) {
    for (const std::string& prefetch : SplitList(flags.engine.engram_prefetch)) {
      options.configs.push_back(EngineBenchConfig{storage, prefetch, {}});
    }
  }
  Status bad_flag =
      options.configs.empty() ? InvalidArgumentError("--engram-storage is empty") : Status();
  for (EngineBenchConfig& c : options.configs) {
    Result<EngineOptions> engine_options = ToEngineOptions(ConfigFlags(flags, c));
    if (!engine_options.ok()) {
      bad_flag = engine_options.status();
      break;
    }
    c.options = *engine_options;
  }
  if (flags.prompt_tokens < 1 || flags.decode_tokens < 1 || flags.repetitions < 1 || !levels.ok() ||
      !bad_flag.ok()) {
    std::fprintf(stderr,
                 "dsv41 bench: want --prompt-tokens >= 1, --decode-tokens >= 1, "
                 "--repetitions >= 1, --concurrency N[,N...] and valid engine flags%s%s\n",
                 levels.ok() ? "" : ": ", levels.ok() ? "" : levels.status().message().c_str());
    if (!bad_flag.ok()) std::fprintf(stderr, "dsv41 bench: %s\n", bad_flag.ToString().c_str());
    return std::nullopt;
  }
  return options;
}

// Opens each configuration's Engram tier once, keyed by its name.
Status OpenStorages(LoadedTextModel& m, ThreadPool& pool, const BenchFlags& flags,
                    const EngineBenchOptions& options,
                    std::map<std::string, std::unique_ptr<EngramStorage>>& storages) {
  for (const EngineBenchConfig& c : options.configs) {
    if (storages.count(c.engram_storage) != 0) continue;
    DSV41_RETURN_IF_ERROR(OpenEngramStorage(m, pool, ConfigFlags(flags, c)));
    storages[c.engram_storage] = std::move(m.engram_storage);
  }
  return Status();
}

void PrintHeader(const BenchFlags& flags, int threads, const MachineLimits& limits, int ranks) {
  std::printf("dsv41 bench (medians of %d repetitions)\n", flags.repetitions);
  std::printf("  %-32s %s\n", "model", flags.model_dir.c_str());
  std::printf("  %-32s %d\n", "ranks", ranks);
  std::printf("  %-32s %d\n", "threads", threads);
  std::printf("  %-32s %d\n", "prompt_tokens", flags.prompt_tokens);
  std::printf("  %-32s %d\n", "decode_tokens", flags.decode_tokens);
  std::printf("  %-32s %s\n", "engram_cold", flags.cold ? "yes" : "no");
  std::printf("  %-32s %.3f\n", "read_bandwidth_gb_per_s", limits.read_bytes_per_second / 1e9);
  std::printf("  %-32s %.1f\n", "fma_peak_gflops", limits.fma_flops_per_second / 1e9);
  std::printf("  %-32s %.1f\n", "bf16_dot_peak_gflops", limits.bf16_dot_flops_per_second / 1e9);
  std::printf("  %-32s %.1f\n", "fp16_fma_peak_gflops", limits.fp16_fma_flops_per_second / 1e9);
  std::printf("  %-32s %.1f\n", "amx_bf16_peak_gflops", limits.amx_bf16_flops_per_second / 1e9);
  std::printf("  %-32s %.1f\n", "amx_int8_peak_gops", limits.amx_int8_ops_per_second / 1e9);
  std::printf("  %-32s %s (%.1f GFLOP/s)\n", "matrix_unit", MatrixUnitName(limits.matrix_unit()),
              limits.compute_roof_flops_per_second() / 1e9);
}

// A run's progress line on stderr.
void PrintRun(const EngineBenchOptions& options, const EngineBenchRun& run) {
  const EngineBenchConfig& config = options.configs[run.config_idx];
  switch (run.kind) {
    case EngineBenchRunKind::kPlain:
      std::fprintf(stderr,
                   "concurrency %d, engram %s prefetch %s, repetition %d/%d: decode %.2f tok/s, "
                   "prefill %.2f tok/s, engram wait %.3f ms/step\n",
                   run.concurrency, config.engram_storage.c_str(), config.engram_prefetch.c_str(),
                   run.repetition + 1, options.repetitions, run.decode_tokens_per_s,
                   run.prefill_tokens_per_s, run.engram_wait_ms_per_step);
      break;
    case EngineBenchRunKind::kSpeculative:
      std::fprintf(stderr, "  --speculative %s: decode %.2f tok/s, acceptance %.3f\n",
                   std::string(SpeculativeMethodName(config.options.speculative.method)).c_str(),
                   run.decode_tokens_per_s, run.acceptance_rate);
      break;
    case EngineBenchRunKind::kOracle:
      std::fprintf(stderr, "  oracle drafts: decode %.2f tok/s\n", run.decode_tokens_per_s);
      break;
  }
}

// "spec_decode_tokens_per_s" for the speculative run, "oracle_decode_tokens_per_s" for the
// oracle's: the figures both runs share have the run's prefix (none for the speculative one).
std::string DraftKey(const std::string& prefix, const char* name) {
  return (prefix.empty() ? std::string("spec_") : prefix) + name;
}

void DraftFiguresToJson(const std::string& prefix, const SpeculativeFigures& f, OrderedJson& line) {
  line[DraftKey(prefix, "decode_tokens_per_s")] = f.decode_tokens_per_s;
  line[DraftKey(prefix, "speedup")] = f.speedup;
  line[prefix + "acceptance_rate"] = f.acceptance_rate;
  line[prefix + "mean_accepted_length"] = f.mean_accepted_length;
  line[prefix + "verify_step_ratio"] = f.verify_step_ratio;
  line[prefix + "plain_step_ratio"] = f.plain_step_ratio;
  line[prefix + "verify_steps"] = f.verify_steps;
  line[prefix + "acceptance_rate_by_position"] = f.acceptance_rate_by_position;
}

void PrintDraftFigures(const std::string& prefix, const SpeculativeFigures& f) {
  const auto row = [](const std::string& key, const char* format, double value) {
    std::printf("    %-30s ", key.c_str());
    std::printf(format, value);
    std::printf("\n");
  };
  row(DraftKey(prefix, "decode_tokens_per_s"), "%.2f", f.decode_tokens_per_s);
  row(DraftKey(prefix, "speedup"), "%.3f", f.speedup);
  row(prefix + "acceptance_rate", "%.3f", f.acceptance_rate);
  row(prefix + "mean_accepted_length", "%.3f", f.mean_accepted_length);
  row(prefix + "verify_step_ratio", "%.3f", f.verify_step_ratio);
  row(prefix + "plain_step_ratio", "%.3f", f.plain_step_ratio);
  row(prefix + "verify_steps", "%.0f", static_cast<double>(f.verify_steps));
  std::printf("    %-30s", (prefix + "acceptance_rate_by_position").c_str());
  for (double r : f.acceptance_rate_by_position) std::printf(" %.3f", r);
  std::printf("\n");
}

// The speculative method every configuration asks for.
SpeculativeMethod Method(const EngineBenchOptions& options) {
  return options.configs.front().options.speculative.method;
}

std::string DigestText(uint64_t digest) {
  return StrFormat("%016llx", static_cast<unsigned long long>(digest));
}

// The logits digest and, with several ranks, each rank's figures (docs/multinode.md).
void RankFiguresToJson(const EngineBenchFigures& f, OrderedJson& line) {
  line["logits_digest"] = DigestText(f.logits_digest);
  line["logits_digest_stable"] = f.logits_digest_stable;
  if (f.ranks.empty()) return;
  line["expert_imbalance"] = f.expert_imbalance;
  OrderedJson ranks = OrderedJson::array();
  for (const RankBenchFigures& r : f.ranks) {
    OrderedJson j;
    j["rank"] = r.rank;
    j["step_ms"] = r.step_ms;
    j["compute_ms"] = r.compute_ms;
    j["engram_wait_ms"] = r.engram_wait_ms;
    for (CommKind kind :
         {CommKind::kHeader, CommKind::kEngram, CommKind::kMoe, CommKind::kTokens}) {
      j[std::string("blocked_ms_") + std::string(CommKindName(kind))] =
          r.blocked_ms[static_cast<size_t>(kind)];
    }
    j["collectives_per_token"] = r.collectives_per_token;
    j["bytes_per_token"] = r.bytes_per_token;
    ranks.push_back(std::move(j));
  }
  line["ranks"] = std::move(ranks);
}

void PrintRankFigures(const EngineBenchFigures& f) {
  std::printf("    %-30s %s (%s)\n", "logits_digest", DigestText(f.logits_digest).c_str(),
              f.logits_digest_stable ? "the same in every repetition and on every rank"
                                     : "NOT the same in every repetition and on every rank");
  if (f.ranks.empty()) return;
  std::printf("    %-30s %.3f\n", "expert_imbalance", f.expert_imbalance);
  for (const RankBenchFigures& r : f.ranks) {
    const auto blocked = [&](CommKind k) { return r.blocked_ms[static_cast<size_t>(k)]; };
    std::printf(
        "    rank %d: steps %.1f ms, compute %.1f ms, engram wait %.1f ms; blocked ms: header "
        "%.1f, engram %.1f, moe %.1f, tokens %.1f; %.2f collectives and %.0f bytes per token\n",
        r.rank, r.step_ms, r.compute_ms, r.engram_wait_ms, blocked(CommKind::kHeader),
        blocked(CommKind::kEngram), blocked(CommKind::kMoe), blocked(CommKind::kTokens),
        r.collectives_per_token, r.bytes_per_token);
  }
}

void PrintFiguresJson(const BenchFlags& flags, const EngineBenchOptions& options, int threads,
                      const MachineLimits& limits, const EngineBenchFigures& f) {
  const EngineBenchConfig& config = options.configs[f.config_idx];
  OrderedJson line;
  line["concurrency"] = f.concurrency;
  line["engram_storage"] = config.engram_storage;
  line["engram_prefetch"] = config.engram_prefetch;
  line["engram_cold"] = flags.cold;
  line["decode_tokens_per_s"] = f.decode_tokens_per_s;
  line["tpot_ms_median"] = f.tpot_ms;
  line["ttft_ms_median"] = f.ttft_ms;
  line["prefill_tokens_per_s"] = f.prefill_tokens_per_s;
  line["engram_wait_ms_per_step"] = f.engram_wait_ms_per_step;
  line["engram_decode_wait_ms_per_step"] = f.engram_decode_wait_ms_per_step;
  line["engram_cache_hit_rate"] = f.engram_cache_hit_rate;
  line["engram_read_mib"] = f.engram_read_mib;
  line["threads"] = threads;
  line["decode_weight_bytes_per_token"] = f.decode_weight_bytes_per_token;
  line["decode_weight_gb_per_s"] = f.decode_weight_bytes_per_s / 1e9;
  line["read_bandwidth_gb_per_s"] = limits.read_bytes_per_second / 1e9;
  line["read_bandwidth_ratio"] = f.read_bandwidth_ratio;
  line["prefill_gflops"] = f.prefill_flops_per_s / 1e9;
  line["fma_roof_gflops"] = limits.compute_roof_flops_per_second() / 1e9;
  line["prefill_roof_ratio"] = f.prefill_roof_ratio;
  line["matrix_unit"] = MatrixUnitName(limits.matrix_unit());
  line["matrix_unit_peak_gflops"] = limits.compute_roof_flops_per_second() / 1e9;
  line["fma_peak_gflops"] = limits.fma_flops_per_second / 1e9;
  line["bf16_dot_peak_gflops"] = limits.bf16_dot_flops_per_second / 1e9;
  line["fp16_fma_peak_gflops"] = limits.fp16_fma_flops_per_second / 1e9;
  line["amx_bf16_peak_gflops"] = limits.amx_bf16_flops_per_second / 1e9;
  line["amx_int8_peak_gops"] = limits.amx_int8_ops_per_second / 1e9;
  line["prefill_roofline_ratio"] = f.prefill_roofline_ratio;
  if (f.decode_vs_one_stream) line["decode_vs_one_stream"] = *f.decode_vs_one_stream;
  if (f.speculative) {
    line["speculative"] = std::string(SpeculativeMethodName(Method(options)));
    DraftFiguresToJson("", *f.speculative, line);
  }
  if (f.oracle) DraftFiguresToJson("oracle_", *f.oracle, line);
  RankFiguresToJson(f, line);
  std::printf("%s\n", line.dump().c_str());
}

void PrintFigures(const EngineBenchOptions& options, const EngineBenchFigures& f) {
  const EngineBenchConfig& config = options.configs[f.config_idx];
  std::printf("  concurrency %d, engram %s, prefetch %s\n", f.concurrency,
              config.engram_storage.c_str(), config.engram_prefetch.c_str());
  std::printf("    %-30s %.3f\n", "time_to_first_token_ms", f.ttft_ms);
  std::printf("    %-30s %.2f\n", "prefill_tokens_per_s", f.prefill_tokens_per_s);
  std::printf("    %-30s %.2f\n", "decode_tokens_per_s", f.decode_tokens_per_s);
  std::printf("    %-30s %.3f\n", "decode_ms_per_token", f.tpot_ms);
  std::printf("    %-30s %.3f\n", "engram_wait_ms_per_step", f.engram_wait_ms_per_step);
  std::printf("    %-30s %.3f\n", "engram_decode_wait_ms_per_step",
              f.engram_decode_wait_ms_per_step);
  std::printf("    %-30s %.3f\n", "engram_cache_hit_rate", f.engram_cache_hit_rate);
  std::printf("    %-30s %.2f\n", "engram_read_mib", f.engram_read_mib);
  std::printf("    %-30s %.2f\n", "decode_weight_mib_per_token",
              f.decode_weight_bytes_per_token / (1 << 20));
  std::printf("    %-30s %.3f\n", "decode_weight_gb_per_s", f.decode_weight_bytes_per_s / 1e9);
  std::printf("    %-30s %.4f\n", "read_bandwidth_ratio", f.read_bandwidth_ratio);
  std::printf("    %-30s %.1f\n", "prefill_gflops", f.prefill_flops_per_s / 1e9);
  std::printf("    %-30s %.4f\n", "prefill_roof_ratio", f.prefill_roof_ratio);
  std::printf("    %-30s %.4f\n", "prefill_roofline_ratio", f.prefill_roofline_ratio);
  if (f.decode_vs_one_stream && f.concurrency > 1) {
    std::printf("    %-30s %.2f\n", "decode_vs_one_stream", *f.decode_vs_one_stream);
  }
  if (f.speculative) {
    std::printf("    %-30s %s\n", "speculative",
                std::string(SpeculativeMethodName(Method(options))).c_str());
    PrintDraftFigures("", *f.speculative);
  }
  if (f.oracle) PrintDraftFigures("oracle_", *f.oracle);
  PrintRankFigures(f);
}

// --image: the tower's figures (engine/bench_vision.h), as text or one JSON object.
int RunVisionBench(const BenchFlags& flags) {
  Result<Numerics> numerics = ParseNumerics(flags.engine.numerics);
  if (!numerics.ok()) {
    std::fprintf(stderr, "dsv41 bench: %s\n", numerics.status().ToString().c_str());
    return 2;
  }
  Result<std::vector<uint8_t>> bytes = ReadImageFile(flags.image);
  Result<LoadedTextModel> m =
      bytes.ok() ? LoadedTextModel::Load(flags.model_dir) : Result<LoadedTextModel>(bytes.status());
  if (!m.ok()) {
    std::fprintf(stderr, "dsv41 bench: %s\n", m.status().ToString().c_str());
    return 1;
  }
  const int threads = ComputeThreads(flags.engine);
  ThreadPool pool(threads);
  ResideWeights(*m, pool, flags.engine);
  const MachineLimits limits = MeasureMachineLimits(pool);
  Result<VisionBenchFigures> f = RunVisionBench(*m, *bytes, flags.image_flags.decode_options(),
                                                pool, limits, flags.repetitions, *numerics);
  if (!f.ok()) {
    std::fprintf(stderr, "dsv41 bench: image '%s': %s\n", flags.image.c_str(),
                 f.status().ToString().c_str());
    return 1;
  }
  const VisionConfig& v = m->vision->config();
  if (flags.json) {
    OrderedJson j;
    j["image"] = flags.image;
    j["threads"] = threads;
    j["vision_layers"] = v.num_hidden_layers;
    j["vision_width"] = v.hidden_size;
    j["patches"] = f->plan.num_patches();
    j["span_length"] = f->plan.span_length;
    j["prepare_ms_median"] = f->prepare_seconds * 1e3;
    j["encode_ms_median"] = f->encode_seconds * 1e3;
    j["images_per_s"] = f->images_per_second;
    j["gflops_per_s"] = f->gflops_per_second;
    j["roof_gflops_per_s"] = limits.compute_roof_flops_per_second() / 1e9;
    j["roof_fraction"] = f->roof_fraction;
    j["released_patches"] = f->released_plan.num_patches();
    j["released_gflop_per_image"] = 2 * f->released_multiply_adds / 1e9;
    j["released_seconds_per_image"] = f->released_seconds_at_measured_rate;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "vision tower: %d layers, width %d, %d heads; %d threads, roof %.1f GFLOP/s\n"
      "image %d x %d: %lld patches (%d x %d), span of %d positions\n"
      "decode + plan + letterbox: %.2f ms (median of %d)\n"
      "tower (patches, ViT, aligner): %.2f ms, %.2f images/s, %.3f GFLOP per image, %.1f GFLOP/s "
      "(%.1f%% of the roof)\n"
      "released tower (32 x 1024) on this image: %lld patches, %.1f GFLOP, %.1f s per image at "
      "%.1f GFLOP/s\n",
      v.num_hidden_layers, v.hidden_size, v.num_attention_heads, threads,
      limits.compute_roof_flops_per_second() / 1e9, f->plan.input_w, f->plan.input_h,
      static_cast<long long>(f->plan.num_patches()), f->plan.patch_cols, f->plan.patch_rows,
      f->plan.span_length, f->prepare_seconds * 1e3, flags.repetitions, f->encode_seconds * 1e3,
      f->images_per_second, 2 * f->multiply_adds / 1e9, f->gflops_per_second,
      100 * f->roof_fraction, static_cast<long long>(f->released_plan.num_patches()),
      2 * f->released_multiply_adds / 1e9, f->released_seconds_at_measured_rate,
      f->gflops_per_second);
  return 0;
}

// What cannot run on several ranks: the tiers' list (the other ranks open one), --cold (it drops
// rank 0's caches only) and --oracle (its drafter is a function rank 0 cannot send).
Status CheckMultiRankFlags(const BenchFlags& flags, const EngineBenchOptions& options) {
  if (options.configs.size() > 1 && SplitList(flags.engine.engram_storage).size() > 1) {
    return InvalidArgumentError("--engram-storage: under mpirun, one tier");
  }
  if (flags.cold || flags.oracle) {
    return InvalidArgumentError("--cold and --oracle run in one process, not under mpirun");
  }
  return OkStatus();
}

int RunBench(BenchFlags flags) {
  if (!flags.image.empty()) {
    if (LaunchedByMpiLauncher()) {
      std::fprintf(stderr, "dsv41 bench: --image runs in one process, not under mpirun\n");
      return 2;
    }
    return RunVisionBench(flags);
  }
  const std::optional<EngineBenchOptions> options = ToBenchOptions(flags);
  if (!options) return 2;
  if (LaunchedByMpiLauncher()) {
    if (const Status s = CheckMultiRankFlags(flags, *options); !s.ok()) {
      std::fprintf(stderr, "dsv41 bench: %s\n", s.ToString().c_str());
      return 2;
    }
  }
  // Every rank loads the first configuration's tier; rank 0 opens the others too.
  EngineFlags first = ConfigFlags(flags, options->configs.front());
  Result<std::unique_ptr<Job>> job = Job::Start(first);
  if (!job.ok()) {
    std::fprintf(stderr, "dsv41 bench: %s\n", job.status().ToString().c_str());
    return 1;
  }
  Result<RankModel> rank =
      LoadRankModel(**job, "dsv41 bench", flags.model_dir, first, options->configs.front().options);
  if (!rank.ok()) {
    if ((*job)->leads())
      std::fprintf(stderr, "dsv41 bench: %s\n", rank.status().ToString().c_str());
    return 1;
  }
  if (!(*job)->leads()) return (*job)->Follow("dsv41 bench", rank->model, *rank->pool);
  LoadedTextModel& m = rank->model;
  ThreadPool& pool = *rank->pool;
  const int threads = ComputeThreads(flags.engine);
  // Each tier opened once; the engine of a run uses the one its configuration names.
  std::map<std::string, std::unique_ptr<EngramStorage>> storages;
  storages[options->configs.front().engram_storage] = std::move(m.engram_storage);
  if (const Status s = OpenStorages(m, pool, flags, *options, storages); !s.ok()) {
    std::fprintf(stderr, "dsv41 bench: %s\n", s.ToString().c_str());
    return 1;
  }
  const MachineLimits limits = MeasureMachineLimits(pool);
  if (!flags.json) PrintHeader(flags, threads, limits, (*job)->shard().num_ranks);
  EngineBenchCallbacks callbacks;
  callbacks.on_run = [&](const EngineBenchRun& run) { PrintRun(*options, run); };
  callbacks.on_level = [&](const std::vector<EngineBenchFigures>& level) {
    for (const EngineBenchFigures& f : level) {
      if (flags.json) {
        PrintFiguresJson(flags, *options, threads, limits, f);
      } else {
        PrintFigures(*options, f);
      }
      std::fflush(stdout);
    }
  };
  const Status ran = RunEngineBench(m, pool, (*job)->comm(), storages, limits, *options, callbacks);
  if (!ran.ok()) {
    std::fprintf(stderr, "dsv41 bench: %s\n", ran.ToString().c_str());
    return 1;
  }
  return 0;
}

std::function<int()> SetupBench(CLI::App& sub) {
  auto flags = std::make_shared<BenchFlags>();
  // Required unless the subcommand `bench serve` runs instead.
  sub.add_option("-m,--model", flags->model_dir, "model directory (required)");
  sub.add_option("--prompt-tokens", flags->prompt_tokens, "prompt tokens of each request")
      ->capture_default_str();
  sub.add_option("--decode-tokens", flags->decode_tokens,
                 "tokens each request generates after its first")
      ->capture_default_str();
  sub.add_option("-r,--repetitions", flags->repetitions, "runs of each concurrency level (medians)")
      ->capture_default_str();
  sub.add_option("--concurrency", flags->concurrency,
                 "comma-separated numbers of simultaneous requests, e.g. 1,8")
      ->capture_default_str();
  sub.add_flag("--json", flags->json,
               "one JSON object per concurrency level (and Engram configuration) on stdout");
  sub.add_flag("--cold", flags->cold,
               "before every repetition drop the Engram table files from the page cache "
               "(posix_fadvise DONTNEED) and empty the hot-row cache");
  sub.add_flag("--oracle", flags->oracle,
               "also run the verify path with drafts that are always right (the plain run's "
               "tokens; the drafter's own cost excluded)");
  sub.add_option("--image", flags->image,
                 "measure the vision tower on this PNG / JPEG instead: images/s and GFLOP/s "
                 "against the roof, and the released tower's cost per image");
  AddEngineFlags(sub, flags->engine);
  AddImageFlags(sub, flags->image_flags);
  return [flags] {
    if (flags->model_dir.empty()) {
      std::fprintf(stderr, "dsv41 bench: --model is required\n");
      return 2;
    }
    return RunBench(*flags);  // a copy: the run's flags are its own
  };
}

DSV41_REGISTER_COMMAND(kBenchCommand, "bench",
                       "measure time to first token, prefill and decode speed", SetupBench);

}  // namespace
}  // namespace dsv41

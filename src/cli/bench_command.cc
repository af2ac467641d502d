// `dsv41 bench`: speed of the engine on the loaded model. At each concurrency level N it runs N
// independent requests with different synthetic prompts at once (continuous batching through the
// paged cache) and reports the median time to first token, the aggregate prefill and decode
// tokens/s, the median time per output token, and the figures against the machine's limits
// measured on the spot (STYLE.md §12): the weight bytes the decode steps read (as the forward
// counts them: every product's matrix once per step, so only the experts actually routed to,
// plus embedding, Engram and mHC rows) per second over the read bandwidth, and the prefill's
// weight-GEMM flops per second over the faster of the fp32 FMA and bf16 dot-product peaks.
// Medians over repetitions; figures on stdout (text, or one JSON object per level with --json).
//
// Engram offload (serving.md §8.6): --engram-storage and --engram-prefetch take comma lists
// (e.g. resident,disk and on,off); every combination is measured with its repetitions
// interleaved (one repetition of each in turn, so drift of a shared machine hits all alike), and
// --cold drops the table files from the page cache and empties the hot-row cache before every
// repetition. Each tier is opened once.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/json.h"
#include "base/machine_limits.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
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
  EngineFlags engine;
};

// One measured configuration: an Engram tier and prefetch on or off.
struct BenchConfig {
  std::string storage;
  std::string prefetch;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One repetition at one concurrency level.
struct LevelTimes {
  std::vector<double> ttft_s;       // per request: first token time from the start
  std::vector<double> tpot_s;       // per request: (last − first token time) / (tokens − 1)
  double prefill_tokens_per_s = 0;  // all prompt tokens / time until the last first token
  double decode_tokens_per_s = 0;   // tokens after each first one / time after the last first one
  double prefill_flops_per_s = 0;   // 2 × weight-product MACs until the last first token / time
  double decode_weight_bytes_per_s = 0;  // weight bytes read after the last first token / time
  double decode_weight_bytes_per_token = 0;
  double engram_wait_ms_per_step = 0;         // the forward's wait for rows, all steps
  double engram_decode_wait_ms_per_step = 0;  // the same over the decode steps
  double engram_cache_hit_rate = 0;           // hot-row cache hits / rows fetched (disk tier)
  double engram_read_mib = 0;                 // bytes read from the table files
};

double TotalWaitMs(const EngineStats& s) {
  double total = 0;
  for (double ms : s.engram_fetch.wait_ms_per_layer) total += ms;
  return total;
}

// A synthetic prompt for stream `stream`: ids spread over the vocabulary, different per stream so
// nothing is shared through the prefix cache (the speed does not depend on the ids).
std::vector<int32_t> SyntheticPrompt(int32_t stream, int32_t tokens, int32_t vocab_size) {
  std::vector<int32_t> prompt(tokens);
  for (int32_t i = 0; i < tokens; ++i) {
    prompt[i] =
        static_cast<int32_t>((int64_t{i} * 7919 + 1000 + int64_t{stream} * 104729) % vocab_size);
  }
  return prompt;
}

Result<LevelTimes> RunLevel(const LoadedTextModel& m, const EngineOptions& options,
                            ThreadPool& pool, const BenchFlags& flags, int32_t streams) {
  using Clock = std::chrono::steady_clock;
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(m, options, pool));
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = flags.decode_tokens + 1;  // the first token ends the prefill
  params.ignore_eos = true;
  const EngramStoreCounters store_at_start =
      engine->stats().engram_store;  // stores outlive engines
  const Clock::time_point start = Clock::now();
  std::map<uint64_t, std::vector<double>> token_times;  // per request, seconds from the start
  // Engine counters when the last request got its first token (the end of the prefill).
  EngineStats at_last_first;
  int32_t num_started = 0;
  for (int32_t i = 0; i < streams; ++i) {
    DSV41_ASSIGN_OR_RETURN(
        uint64_t id,
        engine->AddRequest(SyntheticPrompt(i, flags.prompt_tokens, m.config().vocab_size), params));
    token_times[id];
  }
  while (engine->HasUnfinished()) {
    DSV41_ASSIGN_OR_RETURN(std::vector<RequestOutput> outputs, engine->Step());
    const double now = std::chrono::duration<double>(Clock::now() - start).count();
    for (const RequestOutput& out : outputs) {
      if (out.finish == FinishReason::kError) return InternalError("%s", out.error.c_str());
      std::vector<double>& times = token_times[out.request_id];
      if (times.empty() && !out.new_token_ids.empty()) ++num_started;
      for (size_t k = 0; k < out.new_token_ids.size(); ++k) times.push_back(now);
    }
    if (num_started == streams && at_last_first.num_steps == 0) at_last_first = engine->stats();
  }
  const EngineStats at_end = engine->stats();
  LevelTimes times;
  double last_first = 0, end = 0;
  int64_t decoded = 0;
  for (const auto& [id, t] : token_times) {
    if (t.empty()) continue;
    times.ttft_s.push_back(t.front());
    last_first = std::max(last_first, t.front());
    end = std::max(end, t.back());
    if (t.size() > 1) times.tpot_s.push_back((t.back() - t.front()) / (t.size() - 1));
  }
  for (const auto& [id, t] : token_times) {
    for (double when : t) decoded += when > last_first;
  }
  times.prefill_tokens_per_s = int64_t{streams} * flags.prompt_tokens / std::max(last_first, 1e-9);
  times.decode_tokens_per_s = decoded / std::max(end - last_first, 1e-9);
  times.prefill_flops_per_s =
      2.0 * static_cast<double>(at_last_first.weight_macs) / std::max(last_first, 1e-9);
  const double decode_bytes = static_cast<double>(at_end.weight_bytes - at_last_first.weight_bytes);
  times.decode_weight_bytes_per_s = decode_bytes / std::max(end - last_first, 1e-9);
  times.decode_weight_bytes_per_token = decoded > 0 ? decode_bytes / decoded : 0.0;
  times.engram_wait_ms_per_step =
      TotalWaitMs(at_end) / static_cast<double>(std::max<uint64_t>(1, at_end.num_steps));
  times.engram_decode_wait_ms_per_step =
      (TotalWaitMs(at_end) - TotalWaitMs(at_last_first)) /
      static_cast<double>(std::max<uint64_t>(1, at_end.num_steps - at_last_first.num_steps));
  const EngramStoreCounters& store = at_end.engram_store;
  const uint64_t fetched = store.rows_fetched - store_at_start.rows_fetched;
  times.engram_cache_hit_rate =
      fetched > 0 ? static_cast<double>(store.cache_hits - store_at_start.cache_hits) /
                        static_cast<double>(fetched)
                  : 0.0;
  times.engram_read_mib =
      static_cast<double>(store.bytes_read - store_at_start.bytes_read) / (1 << 20);
  return times;
}

Result<std::vector<int32_t>> ParseLevels(const std::string& text) {
  std::vector<int32_t> levels;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 4096) {
      return InvalidArgumentError("--concurrency: want a list like 1,8, got '%s'", text.c_str());
    }
    levels.push_back(static_cast<int32_t>(v));
  }
  if (levels.empty()) return InvalidArgumentError("--concurrency is empty");
  return levels;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) items.push_back(item);
  return items;
}

int RunBench(const BenchFlags& flags) {
  Result<std::vector<int32_t>> levels = ParseLevels(flags.concurrency);
  std::vector<BenchConfig> configs;
  for (const std::string& storage : SplitList(flags.engine.engram_storage)) {
    for (const std::string& prefetch : SplitList(flags.engine.engram_prefetch)) {
      configs.push_back(BenchConfig{storage, prefetch});
    }
  }
  std::vector<EngineOptions> config_options;
  Status bad_flag = configs.empty() ? InvalidArgumentError("--engram-storage is empty") : Status();
  for (const BenchConfig& c : configs) {
    EngineFlags one = flags.engine;
    one.engram_storage = c.storage;
    one.engram_prefetch = c.prefetch;
    Result<EngineOptions> options = ToEngineOptions(one);
    if (!options.ok()) {
      bad_flag = options.status();
      break;
    }
    config_options.push_back(*options);
  }
  if (flags.prompt_tokens < 1 || flags.decode_tokens < 1 || flags.repetitions < 1 || !levels.ok() ||
      !bad_flag.ok()) {
    std::fprintf(stderr,
                 "dsv41 bench: want --prompt-tokens >= 1, --decode-tokens >= 1, "
                 "--repetitions >= 1, --concurrency N[,N...] and valid engine flags%s%s\n",
                 levels.ok() ? "" : ": ", levels.ok() ? "" : levels.status().message().c_str());
    if (!bad_flag.ok()) std::fprintf(stderr, "dsv41 bench: %s\n", bad_flag.ToString().c_str());
    return 2;
  }
  Result<LoadedTextModel> m = LoadedTextModel::Load(flags.model_dir);
  if (!m.ok()) {
    std::fprintf(stderr, "dsv41 bench: %s\n", m.status().ToString().c_str());
    return 1;
  }
  const int threads = ComputeThreads(flags.engine);
  ThreadPool pool(threads);
  PrefaultWeights(*m, pool, flags.engine);
  // Each tier opened once; the engine of a repetition uses the one its configuration names.
  std::map<std::string, std::unique_ptr<EngramStorage>> storages;
  for (const BenchConfig& c : configs) {
    if (storages.count(c.storage) != 0) continue;
    EngineFlags one = flags.engine;
    one.engram_storage = c.storage;
    one.engram_prefetch = c.prefetch;
    if (const Status s = OpenEngramStorage(*m, pool, one); !s.ok()) {
      std::fprintf(stderr, "dsv41 bench: %s\n", s.ToString().c_str());
      return 1;
    }
    storages[c.storage] = std::move(m->engram_storage);
  }
  const MachineLimits limits = MeasureMachineLimits(pool);
  const double roof = limits.compute_roof_flops_per_second();

  if (!flags.json) {
    std::printf("dsv41 bench (medians of %d repetitions)\n", flags.repetitions);
    std::printf("  %-32s %s\n", "model", flags.model_dir.c_str());
    std::printf("  %-32s %d\n", "threads", threads);
    std::printf("  %-32s %d\n", "prompt_tokens", flags.prompt_tokens);
    std::printf("  %-32s %d\n", "decode_tokens", flags.decode_tokens);
    std::printf("  %-32s %s\n", "engram_cold", flags.cold ? "yes" : "no");
    std::printf("  %-32s %.3f\n", "read_bandwidth_gb_per_s", limits.read_bytes_per_second / 1e9);
    std::printf("  %-32s %.1f\n", "fma_peak_gflops", limits.fma_flops_per_second / 1e9);
    std::printf("  %-32s %.1f\n", "bf16_dot_peak_gflops", limits.bf16_dot_flops_per_second / 1e9);
  }
  std::vector<double> single_stream_decode(configs.size(), 0.0);
  for (int32_t streams : *levels) {
    std::vector<std::vector<LevelTimes>> runs(configs.size());
    for (int32_t r = 0; r < flags.repetitions; ++r) {
      for (size_t c = 0; c < configs.size(); ++c) {  // interleaved
        std::unique_ptr<EngramStorage>& storage = storages[configs[c].storage];
        if (flags.cold && storage != nullptr) {
          if (const Status s = storage->DropCaches(); !s.ok()) {
            std::fprintf(stderr, "dsv41 bench: --cold: %s\n", s.ToString().c_str());
            return 1;
          }
        }
        m->engram_storage = std::move(storage);
        Result<LevelTimes> times = RunLevel(*m, config_options[c], pool, flags, streams);
        storage = std::move(m->engram_storage);
        if (!times.ok()) {
          std::fprintf(stderr, "dsv41 bench: %s\n", times.status().ToString().c_str());
          return 1;
        }
        std::fprintf(stderr,
                     "concurrency %d, engram %s prefetch %s, repetition %d/%d: decode %.2f tok/s, "
                     "prefill %.2f tok/s, engram wait %.3f ms/step\n",
                     streams, configs[c].storage.c_str(), configs[c].prefetch.c_str(), r + 1,
                     flags.repetitions, times->decode_tokens_per_s, times->prefill_tokens_per_s,
                     times->engram_wait_ms_per_step);
        runs[c].push_back(std::move(times).value());
      }
    }
    for (size_t c = 0; c < configs.size(); ++c) {
      std::vector<double> ttft, tpot, prefill_tps, decode_tps, prefill_flops, decode_bps,
          decode_bytes_per_token, wait, decode_wait, hit_rate, read_mib;
      for (const LevelTimes& t : runs[c]) {
        ttft.insert(ttft.end(), t.ttft_s.begin(), t.ttft_s.end());
        tpot.insert(tpot.end(), t.tpot_s.begin(), t.tpot_s.end());
        prefill_tps.push_back(t.prefill_tokens_per_s);
        decode_tps.push_back(t.decode_tokens_per_s);
        prefill_flops.push_back(t.prefill_flops_per_s);
        decode_bps.push_back(t.decode_weight_bytes_per_s);
        decode_bytes_per_token.push_back(t.decode_weight_bytes_per_token);
        wait.push_back(t.engram_wait_ms_per_step);
        decode_wait.push_back(t.engram_decode_wait_ms_per_step);
        hit_rate.push_back(t.engram_cache_hit_rate);
        read_mib.push_back(t.engram_read_mib);
      }
      const double decode = Median(decode_tps);
      if (streams == 1) single_stream_decode[c] = decode;
      const double weight_read_bps = Median(decode_bps);
      const double ratio =
          limits.read_bytes_per_second > 0 ? weight_read_bps / limits.read_bytes_per_second : 0.0;
      const double gflops = Median(prefill_flops) / 1e9;
      const double roof_ratio = roof > 0 ? Median(prefill_flops) / roof : 0.0;
      if (flags.json) {
        OrderedJson line;
        line["concurrency"] = streams;
        line["engram_storage"] = configs[c].storage;
        line["engram_prefetch"] = configs[c].prefetch;
        line["engram_cold"] = flags.cold;
        line["decode_tokens_per_s"] = decode;
        line["tpot_ms_median"] = Median(tpot) * 1e3;
        line["ttft_ms_median"] = Median(ttft) * 1e3;
        line["prefill_tokens_per_s"] = Median(prefill_tps);
        line["engram_wait_ms_per_step"] = Median(wait);
        line["engram_decode_wait_ms_per_step"] = Median(decode_wait);
        line["engram_cache_hit_rate"] = Median(hit_rate);
        line["engram_read_mib"] = Median(read_mib);
        line["threads"] = threads;
        line["decode_weight_bytes_per_token"] = Median(decode_bytes_per_token);
        line["decode_weight_gb_per_s"] = weight_read_bps / 1e9;
        line["read_bandwidth_gb_per_s"] = limits.read_bytes_per_second / 1e9;
        line["read_bandwidth_ratio"] = ratio;
        line["prefill_gflops"] = gflops;
        line["fma_roof_gflops"] = roof / 1e9;
        line["prefill_roof_ratio"] = roof_ratio;
        if (single_stream_decode[c] > 0) {
          line["decode_vs_one_stream"] = decode / single_stream_decode[c];
        }
        std::printf("%s\n", line.dump().c_str());
        continue;
      }
      std::printf("  concurrency %d, engram %s, prefetch %s\n", streams, configs[c].storage.c_str(),
                  configs[c].prefetch.c_str());
      std::printf("    %-30s %.3f\n", "time_to_first_token_ms", Median(ttft) * 1e3);
      std::printf("    %-30s %.2f\n", "prefill_tokens_per_s", Median(prefill_tps));
      std::printf("    %-30s %.2f\n", "decode_tokens_per_s", decode);
      std::printf("    %-30s %.3f\n", "decode_ms_per_token", Median(tpot) * 1e3);
      std::printf("    %-30s %.3f\n", "engram_wait_ms_per_step", Median(wait));
      std::printf("    %-30s %.3f\n", "engram_decode_wait_ms_per_step", Median(decode_wait));
      std::printf("    %-30s %.3f\n", "engram_cache_hit_rate", Median(hit_rate));
      std::printf("    %-30s %.2f\n", "engram_read_mib", Median(read_mib));
      std::printf("    %-30s %.2f\n", "decode_weight_mib_per_token",
                  Median(decode_bytes_per_token) / (1 << 20));
      std::printf("    %-30s %.3f\n", "decode_weight_gb_per_s", weight_read_bps / 1e9);
      std::printf("    %-30s %.4f\n", "read_bandwidth_ratio", ratio);
      std::printf("    %-30s %.1f\n", "prefill_gflops", gflops);
      std::printf("    %-30s %.4f\n", "prefill_roof_ratio", roof_ratio);
      if (single_stream_decode[c] > 0 && streams > 1) {
        std::printf("    %-30s %.2f\n", "decode_vs_one_stream", decode / single_stream_decode[c]);
      }
    }
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
  AddEngineFlags(sub, flags->engine);
  return [flags] {
    if (flags->model_dir.empty()) {
      std::fprintf(stderr, "dsv41 bench: --model is required\n");
      return 2;
    }
    return RunBench(*flags);
  };
}

DSV41_REGISTER_COMMAND(kBenchCommand, "bench",
                       "measure time to first token, prefill and decode speed", SetupBench);

}  // namespace
}  // namespace dsv41

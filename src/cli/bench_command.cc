// `dsv41 bench`: speed of the engine on the loaded model. At each concurrency level N it runs N
// independent requests with different synthetic prompts at once (continuous batching through the
// paged cache) and reports the median time to first token, the aggregate prefill and decode
// tokens/s, the median time per output token, and the figures against the machine's limits
// measured on the spot (STYLE.md §12): the weight bytes the decode steps read (as the forward
// counts them: every product's matrix once per step, so only the experts actually routed to,
// plus embedding, Engram and mHC rows) per second over the read bandwidth, and the prefill's
// weight-GEMM flops per second over the faster of the fp32 FMA and bf16 dot-product peaks. With
// --speculative it also runs each repetition with speculative decoding (interleaved with the plain
// one, same prompts) and reports its decode tokens/s, the speed-up, the draft acceptance rate (per
// position too), the mean accepted length and a verify step's time over a plain decode step's.
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
#include "cli/int_list.h"
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
  // Durations of the steps after every request's first token: those without a verify (plain
  // decode steps) and those with one (draft forward included).
  std::vector<double> plain_step_s;
  std::vector<double> verify_step_s;
  EngineStats stats;
  std::vector<std::vector<int32_t>> outputs;  // per stream, in stream order
};

double TotalWaitMs(const EngineStats& s) {
  double total = 0;
  for (double ms : s.engram_fetch.wait_ms_per_layer) total += ms;
  return total;
}

// A synthetic prompt for stream `stream`: ids spread over the vocabulary, different per stream so
// nothing is shared through the prefix cache (the speed does not depend on the ids). Repetitive:
// a 16-token phrase over and over, which the n-gram drafter can look up.
std::vector<int32_t> SyntheticPrompt(int32_t stream, int32_t tokens, int32_t vocab_size,
                                     bool repetitive) {
  std::vector<int32_t> prompt(tokens);
  for (int32_t i = 0; i < tokens; ++i) {
    const int64_t at = repetitive ? i % 16 : i;
    prompt[i] = static_cast<int32_t>((at * 7919 + 1000 + int64_t{stream} * 104729) % vocab_size);
  }
  return prompt;
}

Result<LevelTimes> RunLevel(const LoadedTextModel& m, const EngineOptions& options,
                            ThreadPool& pool, const BenchFlags& flags,
                            const std::vector<std::vector<int32_t>>& prompts) {
  using Clock = std::chrono::steady_clock;
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(m, options, pool));
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = flags.decode_tokens + 1;  // the first token ends the prefill
  params.ignore_eos = true;
  const int32_t streams = static_cast<int32_t>(prompts.size());
  const EngramStoreCounters store_at_start =
      engine->stats().engram_store;  // stores outlive engines
  const Clock::time_point start = Clock::now();
  std::map<uint64_t, std::vector<double>> token_times;  // per request, seconds from the start
  // Engine counters when the last request got its first token (the end of the prefill).
  EngineStats at_last_first;
  std::map<uint64_t, std::vector<int32_t>> tokens;
  for (int32_t i = 0; i < streams; ++i) {
    DSV41_ASSIGN_OR_RETURN(uint64_t id, engine->AddRequest(prompts[i], params));
    token_times[id];
  }
  LevelTimes times;
  int32_t num_started = 0;             // requests with their first token
  std::vector<RequestOutput> outputs;  // reused: a steady-state step allocates nothing
  while (engine->HasUnfinished()) {
    const uint64_t verify_steps = engine->stats().num_verify_steps;
    const Clock::time_point step_start = Clock::now();
    DSV41_RETURN_IF_ERROR(engine->Step(outputs));
    const Clock::time_point step_end = Clock::now();
    const double now = std::chrono::duration<double>(step_end - start).count();
    if (num_started == streams) {
      const double step_s = std::chrono::duration<double>(step_end - step_start).count();
      (engine->stats().num_verify_steps > verify_steps ? times.verify_step_s : times.plain_step_s)
          .push_back(step_s);
    }
    for (const RequestOutput& out : outputs) {
      if (out.finish == FinishReason::kError) return InternalError("%s", out.error.c_str());
      std::vector<double>& t = token_times[out.request_id];
      num_started += t.empty() && !out.new_token_ids.empty();
      t.insert(t.end(), out.new_token_ids.size(), now);
      tokens[out.request_id].insert(tokens[out.request_id].end(), out.new_token_ids.begin(),
                                    out.new_token_ids.end());
    }
    if (num_started == streams && at_last_first.num_steps == 0) at_last_first = engine->stats();
  }
  const EngineStats at_end = engine->stats();
  times.stats = at_end;
  for (const auto& [id, t] : tokens) times.outputs.push_back(t);
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

// The speculative runs of one concurrency level, over its repetitions.
struct SpecFigures {
  std::vector<double> decode_tps;
  std::vector<double> verify_step_s;
  std::vector<double> plain_step_s;
  uint64_t verifies = 0, drafts = 0, accepted = 0;
  std::vector<uint64_t> drafts_at, accepted_at;

  void Add(const LevelTimes& t) {
    decode_tps.push_back(t.decode_tokens_per_s);
    verify_step_s.insert(verify_step_s.end(), t.verify_step_s.begin(), t.verify_step_s.end());
    plain_step_s.insert(plain_step_s.end(), t.plain_step_s.begin(), t.plain_step_s.end());
    verifies += t.stats.num_verifies;
    drafts += t.stats.num_draft_tokens;
    accepted += t.stats.num_accepted_tokens;
    drafts_at.resize(t.stats.drafts_at_position.size());
    accepted_at.resize(drafts_at.size());
    for (size_t i = 0; i < drafts_at.size(); ++i) {
      drafts_at[i] += t.stats.drafts_at_position[i];
      accepted_at[i] += t.stats.accepted_at_position[i];
    }
  }
  double acceptance_rate() const { return drafts == 0 ? 0.0 : double(accepted) / drafts; }
  double mean_accepted_length() const {
    return verifies == 0 ? 0.0 : 1.0 + double(accepted) / verifies;
  }
  std::vector<double> rate_at() const {
    std::vector<double> r;
    for (size_t i = 0; i < drafts_at.size(); ++i) {
      r.push_back(drafts_at[i] == 0 ? 0.0 : double(accepted_at[i]) / drafts_at[i]);
    }
    return r;
  }
  // A verify step's median time over the plain decode step's (of the run without speculation);
  // 0 when no step verified anything.
  double verify_step_ratio(double plain_step) const {
    return verify_step_s.empty() || plain_step <= 0 ? 0.0 : Median(verify_step_s) / plain_step;
  }
  // The same for the steps of this run that did not verify (DSpark still seeds its windows).
  double plain_step_ratio(double plain_step) const {
    return plain_step_s.empty() || plain_step <= 0 ? 0.0 : Median(plain_step_s) / plain_step;
  }

  // "spec_decode_tokens_per_s" for the speculative run, "oracle_decode_tokens_per_s" for the
  // oracle's: the figures both runs share have the run's prefix (none for the speculative one).
  static std::string Key(const std::string& prefix, const char* name) {
    return (prefix.empty() ? std::string("spec_") : prefix) + name;
  }

  void ToJson(const std::string& prefix, double off_decode, double plain_step,
              OrderedJson& line) const {
    const double decode = Median(decode_tps);
    line[Key(prefix, "decode_tokens_per_s")] = decode;
    line[Key(prefix, "speedup")] = off_decode > 0 ? decode / off_decode : 0.0;
    line[prefix + "acceptance_rate"] = acceptance_rate();
    line[prefix + "mean_accepted_length"] = mean_accepted_length();
    line[prefix + "verify_step_ratio"] = verify_step_ratio(plain_step);
    line[prefix + "plain_step_ratio"] = plain_step_ratio(plain_step);
    line[prefix + "verify_steps"] = verify_step_s.size();
    line[prefix + "acceptance_rate_by_position"] = rate_at();
  }
  void Print(const std::string& prefix, double off_decode, double plain_step) const {
    const double decode = Median(decode_tps);
    auto row = [&](const char* name, double v, const char* fmt) {
      std::printf("    %-30s ", (prefix + name).c_str());
      std::printf(fmt, v);
      std::printf("\n");
    };
    // row() adds the prefix; Key() holds the full names.
    const size_t skip = prefix.size();
    row(Key(prefix, "decode_tokens_per_s").substr(skip).c_str(), decode, "%.2f");
    row(Key(prefix, "speedup").substr(skip).c_str(), off_decode > 0 ? decode / off_decode : 0.0,
        "%.3f");
    row("acceptance_rate", acceptance_rate(), "%.3f");
    row("mean_accepted_length", mean_accepted_length(), "%.3f");
    row("verify_step_ratio", verify_step_ratio(plain_step), "%.3f");
    row("plain_step_ratio", plain_step_ratio(plain_step), "%.3f");
    row("verify_steps", static_cast<double>(verify_step_s.size()), "%.0f");
    std::printf("    %-30s", (prefix + "acceptance_rate_by_position").c_str());
    for (double r : rate_at()) std::printf(" %.3f", r);
    std::printf("\n");
  }
};

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) items.push_back(item);
  return items;
}

int RunBench(const BenchFlags& flags) {
  Result<std::vector<int32_t>> levels = ParseIntList(flags.concurrency, "--concurrency", 1, 4096);
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
  Result<LoadedTextModel> m = LoadedTextModel::Load(flags.model_dir, {}, NeedsDspark(flags.engine));
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
  // Every repetition runs each configuration in turn (interleaved) and, with --speculative X,
  // each of them twice: off, then X (then, with --oracle, the verify path with drafts that are
  // always right), on the same prompts.
  const SpeculativeMethod method = config_options.front().speculative.method;
  std::vector<double> single_stream_decode(configs.size(), 0.0);
  for (int32_t streams : *levels) {
    std::vector<std::vector<int32_t>> prompts;
    for (int32_t i = 0; i < streams; ++i) {
      prompts.push_back(SyntheticPrompt(i, flags.prompt_tokens, m->config().vocab_size,
                                        method == SpeculativeMethod::kNgram));
    }
    std::vector<std::vector<LevelTimes>> runs(configs.size());
    std::vector<SpecFigures> spec(configs.size()), oracle(configs.size());
    for (int32_t r = 0; r < flags.repetitions; ++r) {
      for (size_t c = 0; c < configs.size(); ++c) {  // interleaved
        std::unique_ptr<EngramStorage>& storage = storages[configs[c].storage];
        // One run of this configuration, the storage lent to the model meanwhile.
        const auto run = [&](const EngineOptions& options) -> Result<LevelTimes> {
          if (flags.cold && storage != nullptr) DSV41_RETURN_IF_ERROR(storage->DropCaches());
          m->engram_storage = std::move(storage);
          Result<LevelTimes> times = RunLevel(*m, options, pool, flags, prompts);
          storage = std::move(m->engram_storage);
          return times;
        };
        EngineOptions off_options = config_options[c];
        off_options.speculative = SpeculativeOptions{};
        Result<LevelTimes> times = run(off_options);
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
        if (method != SpeculativeMethod::kOff) {
          Result<LevelTimes> spec_times = run(config_options[c]);
          if (!spec_times.ok()) {
            std::fprintf(stderr, "dsv41 bench: %s\n", spec_times.status().ToString().c_str());
            return 1;
          }
          spec[c].Add(*spec_times);
          std::fprintf(stderr, "  --speculative %s: decode %.2f tok/s, acceptance %.3f\n",
                       std::string(SpeculativeMethodName(method)).c_str(),
                       spec_times->decode_tokens_per_s, spec_times->stats.acceptance_rate());
        }
        if (flags.oracle) {
          EngineOptions oracle_options = config_options[c];
          if (method == SpeculativeMethod::kOff) {
            oracle_options.speculative.method = SpeculativeMethod::kNgram;
          }
          oracle_options.speculative.custom_drafter = ContinuationDrafter(prompts, times->outputs);
          oracle_options.speculative.min_acceptance = 0.0;  // it always hits: draft every step
          Result<LevelTimes> oracle_times = run(oracle_options);
          if (!oracle_times.ok()) {
            std::fprintf(stderr, "dsv41 bench: %s\n", oracle_times.status().ToString().c_str());
            return 1;
          }
          oracle[c].Add(*oracle_times);
          std::fprintf(stderr, "  oracle drafts: decode %.2f tok/s\n",
                       oracle_times->decode_tokens_per_s);
        }
        runs[c].push_back(std::move(times).value());
      }
    }
    for (size_t c = 0; c < configs.size(); ++c) {
      std::vector<double> ttft, tpot, prefill_tps, decode_tps, prefill_flops, decode_bps,
          decode_bytes_per_token, wait, decode_wait, hit_rate, read_mib, plain_steps;
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
        plain_steps.insert(plain_steps.end(), t.plain_step_s.begin(), t.plain_step_s.end());
      }
      const double decode = Median(decode_tps);
      if (streams == 1) single_stream_decode[c] = decode;
      const double weight_read_bps = Median(decode_bps);
      const double ratio =
          limits.read_bytes_per_second > 0 ? weight_read_bps / limits.read_bytes_per_second : 0.0;
      const double gflops = Median(prefill_flops) / 1e9;
      const double roof_ratio = roof > 0 ? Median(prefill_flops) / roof : 0.0;
      const double plain_step = plain_steps.empty() ? 0.0 : Median(plain_steps);
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
        if (method != SpeculativeMethod::kOff) {
          line["speculative"] = std::string(SpeculativeMethodName(method));
          spec[c].ToJson("", decode, plain_step, line);
        }
        if (flags.oracle) oracle[c].ToJson("oracle_", decode, plain_step, line);
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
      if (method != SpeculativeMethod::kOff) {
        std::printf("    %-30s %s\n", "speculative",
                    std::string(SpeculativeMethodName(method)).c_str());
        spec[c].Print("", decode, plain_step);
      }
      if (flags.oracle) oracle[c].Print("oracle_", decode, plain_step);
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
  sub.add_flag("--oracle", flags->oracle,
               "also run the verify path with drafts that are always right (the plain run's "
               "tokens; the drafter's own cost excluded)");
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

#include "engine/bench_engine.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "engine/speculative.h"

namespace dsv41 {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

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

// What one run recorded: when each request's tokens came and the engine counters at the points
// the figures need.
struct RunTrace {
  std::map<uint64_t, std::vector<double>> token_times;  // per request, seconds from the start
  std::map<uint64_t, std::vector<int32_t>> tokens;      // per request, its output
  EngramStoreCounters store_at_start;                   // stores outlive engines
  EngineStats at_last_first;  // when the last request got its first token (end of the prefill)
  EngineStats at_end;
  // Durations of the steps after every request's first token: those without a verify (plain
  // decode steps) and those with one (draft forward included).
  std::vector<double> plain_step_s;
  std::vector<double> verify_step_s;
  // Every rank's counters before the first request and after the last (one entry in one
  // process).
  std::vector<RankReport> ranks_at_start;
  std::vector<RankReport> ranks_at_end;
};

// One run: every prompt at once, greedy, each request decode_tokens after its first token.
Result<RunTrace> TraceRun(const LoadedTextModel& m, const EngineOptions& asked, ThreadPool& pool,
                          Communicator& comm, int32_t decode_tokens,
                          const std::vector<std::vector<int32_t>>& prompts) {
  EngineOptions options = asked;
  options.digest_logits = true;  // the run's logits digest: a bit-identity check between runs
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(m, options, pool, comm));
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = decode_tokens + 1;  // the first token ends the prefill
  params.ignore_eos = true;
  const int32_t streams = static_cast<int32_t>(prompts.size());
  RunTrace trace;
  trace.store_at_start = engine->stats().engram_store;
  trace.ranks_at_start = engine->GatherRankReports();
  const Clock::time_point start = Clock::now();
  for (int32_t i = 0; i < streams; ++i) {
    DSV41_ASSIGN_OR_RETURN(uint64_t id, engine->AddRequest(prompts[i], params));
    trace.token_times[id];
  }
  int32_t num_started = 0;             // requests with their first token
  std::vector<RequestOutput> outputs;  // reused: a steady-state step allocates nothing
  while (engine->HasUnfinished()) {
    const uint64_t verify_steps = engine->stats().num_verify_steps;
    const Clock::time_point step_start = Clock::now();
    DSV41_RETURN_IF_ERROR(engine->Step(outputs));
    const Clock::time_point step_end = Clock::now();
    const double now = Seconds(start, step_end);
    if (num_started == streams) {
      (engine->stats().num_verify_steps > verify_steps ? trace.verify_step_s : trace.plain_step_s)
          .push_back(Seconds(step_start, step_end));
    }
    for (const RequestOutput& out : outputs) {
      if (out.finish == FinishReason::kError) return InternalError("%s", out.error.c_str());
      std::vector<double>& t = trace.token_times[out.request_id];
      num_started += t.empty() && !out.new_token_ids.empty();
      t.insert(t.end(), out.new_token_ids.size(), now);
      std::vector<int32_t>& ids = trace.tokens[out.request_id];
      ids.insert(ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
    }
    if (num_started == streams && trace.at_last_first.num_steps == 0) {
      trace.at_last_first = engine->stats();
    }
  }
  trace.at_end = engine->stats();
  trace.ranks_at_end = engine->GatherRankReports();
  return trace;
}

// One run's figures.
struct RunTimes {
  std::vector<double> ttft_s;       // per request: first token time from the start
  std::vector<double> tpot_s;       // per request: (last − first token time) / (tokens − 1)
  double prefill_tokens_per_s = 0;  // all prompt tokens / time until the last first token
  double decode_tokens_per_s = 0;   // tokens after each first one / time after the last first one
  double prefill_flops_per_s = 0;   // 2 × weight-product MACs until the last first token / time
  // The products' time at the roofs (ExecStats::roofline_seconds) until the last first token /
  // that time.
  double prefill_roofline_ratio = 0;
  double decode_weight_bytes_per_s = 0;  // weight bytes read after the last first token / time
  double decode_weight_bytes_per_token = 0;
  double engram_wait_ms_per_step = 0;
  double engram_decode_wait_ms_per_step = 0;
  double engram_cache_hit_rate = 0;
  double engram_read_mib = 0;
  std::vector<double> plain_step_s;
  std::vector<double> verify_step_s;
  EngineStats stats;
  std::vector<std::vector<int32_t>> outputs;  // per stream, in stream order
  std::vector<uint64_t> rank_digests;         // every rank's logits digest
  std::vector<RankBenchFigures> ranks;        // several ranks only
  double expert_imbalance = 0;                // several ranks only
};

// What each rank did during a run (its counters at the end less those at the start) over the
// `tokens` the run computed.
void MeasureRanks(const RunTrace& trace, double tokens, RunTimes& times) {
  for (const RankReport& r : trace.ranks_at_end) times.rank_digests.push_back(r.logits_digest);
  if (trace.ranks_at_end.size() < 2) return;
  const size_t n = trace.ranks_at_end.size();
  uint64_t routed = 0, busiest = 0;
  for (size_t r = 0; r < n; ++r) {
    const RankReport& a = trace.ranks_at_start[r];
    const RankReport& b = trace.ranks_at_end[r];
    RankBenchFigures f;
    f.rank = b.rank;
    f.step_ms = b.step_ms - a.step_ms;
    f.engram_wait_ms = b.engram_wait_ms - a.engram_wait_ms;
    uint64_t calls = 0, bytes = 0;
    for (size_t k = 0; k < kNumCommKinds; ++k) {
      const CommKindCounters& ka = a.comm.kinds[k];
      const CommKindCounters& kb = b.comm.kinds[k];
      f.blocked_ms[k] = kb.blocked_ms - ka.blocked_ms;
      calls += kb.calls - ka.calls;
      bytes += (kb.bytes_sent - ka.bytes_sent) + (kb.bytes_received - ka.bytes_received);
    }
    const auto blocked = [&](CommKind kind) { return f.blocked_ms[static_cast<size_t>(kind)]; };
    // A rank other than 0 waits for rank 0's header between steps, outside step_ms.
    f.compute_ms = f.step_ms - blocked(CommKind::kMoe) - blocked(CommKind::kTokens) -
                   f.engram_wait_ms - (b.rank == 0 ? blocked(CommKind::kHeader) : 0.0);
    f.collectives_per_token = static_cast<double>(calls) / std::max(tokens, 1.0);
    f.bytes_per_token = static_cast<double>(bytes) / std::max(tokens, 1.0);
    times.ranks.push_back(f);
    routed = b.routed_rows - a.routed_rows;  // every rank counts every row
    busiest = b.routed_rows_busiest_rank - a.routed_rows_busiest_rank;
  }
  times.expert_imbalance =
      routed > 0 ? static_cast<double>(busiest) * static_cast<double>(n) / routed : 0.0;
}

// The Engram figures of a run: the forward's wait per step and the stores' traffic.
void MeasureEngram(const RunTrace& trace, RunTimes& times) {
  const EngineStats& at_end = trace.at_end;
  const EngineStats& at_last_first = trace.at_last_first;
  times.engram_wait_ms_per_step =
      TotalWaitMs(at_end) / static_cast<double>(std::max<uint64_t>(1, at_end.num_steps));
  times.engram_decode_wait_ms_per_step =
      (TotalWaitMs(at_end) - TotalWaitMs(at_last_first)) /
      static_cast<double>(std::max<uint64_t>(1, at_end.num_steps - at_last_first.num_steps));
  const EngramStoreCounters& store = at_end.engram_store;
  const EngramStoreCounters& store_at_start = trace.store_at_start;
  const uint64_t fetched = store.rows_fetched - store_at_start.rows_fetched;
  times.engram_cache_hit_rate =
      fetched > 0 ? static_cast<double>(store.cache_hits - store_at_start.cache_hits) /
                        static_cast<double>(fetched)
                  : 0.0;
  times.engram_read_mib =
      static_cast<double>(store.bytes_read - store_at_start.bytes_read) / (1 << 20);
}

RunTimes MeasureRun(RunTrace trace, int32_t prompt_tokens) {
  RunTimes times;
  times.stats = trace.at_end;
  for (auto& [id, t] : trace.tokens) times.outputs.push_back(std::move(t));
  double last_first = 0, end = 0;
  int64_t decoded = 0;
  for (const auto& [id, t] : trace.token_times) {
    if (t.empty()) continue;
    times.ttft_s.push_back(t.front());
    last_first = std::max(last_first, t.front());
    end = std::max(end, t.back());
    if (t.size() > 1) times.tpot_s.push_back((t.back() - t.front()) / (t.size() - 1));
  }
  for (const auto& [id, t] : trace.token_times) {
    for (double when : t) decoded += when > last_first;
  }
  const int64_t streams = static_cast<int64_t>(trace.token_times.size());
  times.prefill_tokens_per_s = streams * prompt_tokens / std::max(last_first, 1e-9);
  times.decode_tokens_per_s = decoded / std::max(end - last_first, 1e-9);
  times.prefill_flops_per_s =
      2.0 * static_cast<double>(trace.at_last_first.weight_macs) / std::max(last_first, 1e-9);
  times.prefill_roofline_ratio =
      trace.at_last_first.weight_roofline_seconds / std::max(last_first, 1e-9);
  const double decode_bytes =
      static_cast<double>(trace.at_end.weight_bytes - trace.at_last_first.weight_bytes);
  times.decode_weight_bytes_per_s = decode_bytes / std::max(end - last_first, 1e-9);
  times.decode_weight_bytes_per_token = decoded > 0 ? decode_bytes / decoded : 0.0;
  MeasureEngram(trace, times);
  const uint64_t tokens = (trace.at_end.prompt_tokens_computed + trace.at_end.generation_tokens);
  MeasureRanks(trace, static_cast<double>(tokens), times);
  times.plain_step_s = std::move(trace.plain_step_s);
  times.verify_step_s = std::move(trace.verify_step_s);
  return times;
}

// The runs with drafts of one configuration at one level, over its repetitions.
struct DraftRuns {
  std::vector<double> decode_tps;
  std::vector<double> verify_step_s;
  std::vector<double> plain_step_s;
  uint64_t verifies = 0, drafts = 0, accepted = 0;
  std::vector<uint64_t> drafts_at, accepted_at;

  void Add(const RunTimes& t) {
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

  // Against the plain runs' median decode tokens/s and median decode step.
  SpeculativeFigures Figures(double off_decode, double plain_step) const {
    SpeculativeFigures f;
    f.decode_tokens_per_s = Median(decode_tps);
    f.speedup = off_decode > 0 ? f.decode_tokens_per_s / off_decode : 0.0;
    f.acceptance_rate = drafts == 0 ? 0.0 : double(accepted) / drafts;
    f.mean_accepted_length = verifies == 0 ? 0.0 : 1.0 + double(accepted) / verifies;
    f.verify_step_ratio =
        verify_step_s.empty() || plain_step <= 0 ? 0.0 : Median(verify_step_s) / plain_step;
    f.plain_step_ratio =
        plain_step_s.empty() || plain_step <= 0 ? 0.0 : Median(plain_step_s) / plain_step;
    f.verify_steps = verify_step_s.size();
    for (size_t i = 0; i < drafts_at.size(); ++i) {
      f.acceptance_rate_by_position.push_back(
          drafts_at[i] == 0 ? 0.0 : double(accepted_at[i]) / drafts_at[i]);
    }
    return f;
  }
};

// Every run of one configuration at one level.
struct ConfigRuns {
  std::vector<RunTimes> plain;
  DraftRuns speculative;
  DraftRuns oracle;
};

// What every run of the benchmark shares.
struct BenchContext {
  LoadedTextModel& model;
  ThreadPool& pool;
  std::map<std::string, std::unique_ptr<EngramStorage>>& storages;
  const MachineLimits& limits;
  const EngineBenchOptions& options;
  const EngineBenchCallbacks& callbacks;
  SpeculativeMethod method;  // every configuration's
  Communicator& comm;
};

// One run of configuration `config_idx`, its Engram storage lent to the model meanwhile.
Result<RunTimes> Run(BenchContext& ctx, size_t config_idx, const EngineOptions& options,
                     const std::vector<std::vector<int32_t>>& prompts) {
  std::unique_ptr<EngramStorage>& storage =
      ctx.storages[ctx.options.configs[config_idx].engram_storage];
  if (ctx.options.cold && storage != nullptr) DSV41_RETURN_IF_ERROR(storage->DropCaches());
  ctx.model.engram_storage = std::move(storage);
  EngineOptions measured = options;
  measured.roofline =
      RooflineRates{.peak_flops_per_second = ctx.limits.compute_roof_flops_per_second(),
                    .read_bytes_per_second = ctx.limits.read_bytes_per_second};
  Result<RunTrace> trace =
      TraceRun(ctx.model, measured, ctx.pool, ctx.comm, ctx.options.decode_tokens, prompts);
  storage = std::move(ctx.model.engram_storage);
  DSV41_RETURN_IF_ERROR(trace.status());
  return MeasureRun(std::move(trace).value(), ctx.options.prompt_tokens);
}

void ReportRun(const BenchContext& ctx, EngineBenchRunKind kind, int32_t streams, size_t config_idx,
               int32_t repetition, const RunTimes& times) {
  if (!ctx.callbacks.on_run) return;
  ctx.callbacks.on_run(EngineBenchRun{.kind = kind,
                                      .concurrency = streams,
                                      .config_idx = config_idx,
                                      .repetition = repetition,
                                      .decode_tokens_per_s = times.decode_tokens_per_s,
                                      .prefill_tokens_per_s = times.prefill_tokens_per_s,
                                      .engram_wait_ms_per_step = times.engram_wait_ms_per_step,
                                      .acceptance_rate = times.stats.acceptance_rate()});
}

// Repetition `repetition` of configuration `config_idx`: off, then the speculative method asked
// for, then (with oracle) the verify path with the plain run's tokens as drafts, on the same
// prompts.
Status RunRepetition(BenchContext& ctx, size_t config_idx, int32_t repetition,
                     const std::vector<std::vector<int32_t>>& prompts, ConfigRuns& runs) {
  const int32_t streams = static_cast<int32_t>(prompts.size());
  const EngineOptions& asked = ctx.options.configs[config_idx].options;
  EngineOptions off_options = asked;
  off_options.speculative = SpeculativeOptions{};
  DSV41_ASSIGN_OR_RETURN(RunTimes times, Run(ctx, config_idx, off_options, prompts));
  ReportRun(ctx, EngineBenchRunKind::kPlain, streams, config_idx, repetition, times);
  if (ctx.method != SpeculativeMethod::kOff) {
    DSV41_ASSIGN_OR_RETURN(RunTimes spec_times, Run(ctx, config_idx, asked, prompts));
    runs.speculative.Add(spec_times);
    ReportRun(ctx, EngineBenchRunKind::kSpeculative, streams, config_idx, repetition, spec_times);
  }
  if (ctx.options.oracle) {
    EngineOptions oracle_options = asked;
    if (ctx.method == SpeculativeMethod::kOff) {
      oracle_options.speculative.method = SpeculativeMethod::kNgram;
    }
    oracle_options.speculative.custom_drafter = ContinuationDrafter(prompts, times.outputs);
    oracle_options.speculative.min_acceptance = 0.0;  // it always hits: draft every step
    DSV41_ASSIGN_OR_RETURN(RunTimes oracle_times, Run(ctx, config_idx, oracle_options, prompts));
    runs.oracle.Add(oracle_times);
    ReportRun(ctx, EngineBenchRunKind::kOracle, streams, config_idx, repetition, oracle_times);
  }
  runs.plain.push_back(std::move(times));
  return Status();
}

// The logits digest of the plain runs and the ranks' medians.
void SummarizeRanks(const std::vector<RunTimes>& plain, EngineBenchFigures& f) {
  if (plain.empty()) return;
  f.logits_digest = plain.front().stats.logits_digest;
  for (const RunTimes& t : plain) {
    f.logits_digest_stable &= t.stats.logits_digest == f.logits_digest;
    for (uint64_t d : t.rank_digests) f.logits_digest_stable &= d == f.logits_digest;
  }
  const size_t num_ranks = plain.front().ranks.size();
  std::vector<double> imbalance;
  for (const RunTimes& t : plain) imbalance.push_back(t.expert_imbalance);
  f.expert_imbalance = num_ranks > 0 ? Median(imbalance) : 0.0;
  for (size_t r = 0; r < num_ranks; ++r) {
    const auto median = [&](auto field) {
      std::vector<double> v;
      for (const RunTimes& t : plain) v.push_back(field(t.ranks[r]));
      return Median(v);
    };
    RankBenchFigures m;
    m.rank = plain.front().ranks[r].rank;
    m.step_ms = median([](const RankBenchFigures& x) { return x.step_ms; });
    m.compute_ms = median([](const RankBenchFigures& x) { return x.compute_ms; });
    m.engram_wait_ms = median([](const RankBenchFigures& x) { return x.engram_wait_ms; });
    for (size_t k = 0; k < kNumCommKinds; ++k) {
      m.blocked_ms[k] = median([k](const RankBenchFigures& x) { return x.blocked_ms[k]; });
    }
    m.collectives_per_token =
        median([](const RankBenchFigures& x) { return x.collectives_per_token; });
    m.bytes_per_token = median([](const RankBenchFigures& x) { return x.bytes_per_token; });
    f.ranks.push_back(m);
  }
}

// The medians of one configuration's runs at one level. `one_stream_decode`: the
// configuration's decode tokens/s at concurrency 1 (0 until that level ran); set at that level.
EngineBenchFigures Summarize(const BenchContext& ctx, int32_t streams, size_t config_idx,
                             const ConfigRuns& runs, double& one_stream_decode) {
  std::vector<double> ttft, tpot, prefill_tps, decode_tps, prefill_flops, roofline, decode_bps,
      decode_bytes_per_token, wait, decode_wait, hit_rate, read_mib, plain_steps;
  for (const RunTimes& t : runs.plain) {
    ttft.insert(ttft.end(), t.ttft_s.begin(), t.ttft_s.end());
    tpot.insert(tpot.end(), t.tpot_s.begin(), t.tpot_s.end());
    prefill_tps.push_back(t.prefill_tokens_per_s);
    decode_tps.push_back(t.decode_tokens_per_s);
    prefill_flops.push_back(t.prefill_flops_per_s);
    roofline.push_back(t.prefill_roofline_ratio);
    decode_bps.push_back(t.decode_weight_bytes_per_s);
    decode_bytes_per_token.push_back(t.decode_weight_bytes_per_token);
    wait.push_back(t.engram_wait_ms_per_step);
    decode_wait.push_back(t.engram_decode_wait_ms_per_step);
    hit_rate.push_back(t.engram_cache_hit_rate);
    read_mib.push_back(t.engram_read_mib);
    plain_steps.insert(plain_steps.end(), t.plain_step_s.begin(), t.plain_step_s.end());
  }
  EngineBenchFigures f;
  f.concurrency = streams;
  f.config_idx = config_idx;
  f.ttft_ms = Median(ttft) * 1e3;
  f.tpot_ms = Median(tpot) * 1e3;
  f.prefill_tokens_per_s = Median(prefill_tps);
  f.decode_tokens_per_s = Median(decode_tps);
  f.engram_wait_ms_per_step = Median(wait);
  f.engram_decode_wait_ms_per_step = Median(decode_wait);
  f.engram_cache_hit_rate = Median(hit_rate);
  f.engram_read_mib = Median(read_mib);
  f.decode_weight_bytes_per_token = Median(decode_bytes_per_token);
  f.decode_weight_bytes_per_s = Median(decode_bps);
  const double read_bps = ctx.limits.read_bytes_per_second;
  f.read_bandwidth_ratio = read_bps > 0 ? f.decode_weight_bytes_per_s / read_bps : 0.0;
  f.prefill_flops_per_s = Median(prefill_flops);
  const double roof = ctx.limits.compute_roof_flops_per_second();
  f.prefill_roof_ratio = roof > 0 ? f.prefill_flops_per_s / roof : 0.0;
  f.prefill_roofline_ratio = Median(roofline);
  if (streams == 1) one_stream_decode = f.decode_tokens_per_s;
  if (one_stream_decode > 0) f.decode_vs_one_stream = f.decode_tokens_per_s / one_stream_decode;
  const double plain_step = plain_steps.empty() ? 0.0 : Median(plain_steps);
  if (ctx.method != SpeculativeMethod::kOff) {
    f.speculative = runs.speculative.Figures(f.decode_tokens_per_s, plain_step);
  }
  if (ctx.options.oracle) f.oracle = runs.oracle.Figures(f.decode_tokens_per_s, plain_step);
  SummarizeRanks(runs.plain, f);
  return f;
}

}  // namespace

Status RunEngineBench(LoadedTextModel& model, ThreadPool& pool, Communicator& comm,
                      std::map<std::string, std::unique_ptr<EngramStorage>>& storages,
                      const MachineLimits& limits, const EngineBenchOptions& options,
                      const EngineBenchCallbacks& callbacks) {
  if (options.configs.empty()) return InvalidArgumentError("engine bench: no configuration");
  BenchContext ctx{model,
                   pool,
                   storages,
                   limits,
                   options,
                   callbacks,
                   options.configs.front().options.speculative.method,
                   comm};
  std::vector<double> one_stream_decode(options.configs.size(), 0.0);
  for (int32_t streams : options.concurrency) {
    std::vector<std::vector<int32_t>> prompts;
    for (int32_t i = 0; i < streams; ++i) {
      prompts.push_back(SyntheticPrompt(i, options.prompt_tokens, model.config().vocab_size,
                                        ctx.method == SpeculativeMethod::kNgram));
    }
    std::vector<ConfigRuns> runs(options.configs.size());
    for (int32_t r = 0; r < options.repetitions; ++r) {
      for (size_t c = 0; c < options.configs.size(); ++c) {  // interleaved
        DSV41_RETURN_IF_ERROR(RunRepetition(ctx, c, r, prompts, runs[c]));
      }
    }
    std::vector<EngineBenchFigures> figures;
    for (size_t c = 0; c < options.configs.size(); ++c) {
      figures.push_back(Summarize(ctx, streams, c, runs[c], one_stream_decode[c]));
    }
    if (callbacks.on_level) callbacks.on_level(figures);
  }
  return Status();
}

}  // namespace dsv41

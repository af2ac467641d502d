// `dsv41 bench serve`: drives a running `dsv41 serve` over HTTP (the shape of `vllm bench serve`)
// at each concurrency level and prints request and token throughput and TTFT / TPOT / ITL /
// end-to-end latency percentiles; --json prints one object per level instead.

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"
#include "server/bench_serve.h"
#include "text/json_format.h"

namespace dsv41 {
namespace {

struct BenchServeFlags {
  ServeBenchOptions options;
  std::vector<int32_t> concurrency = {8};
  bool json = false;
};

JsonValue LatencyJson(const LatencyStats& s) {
  return JsonObject({{"mean", JsonFloat(s.mean)},
                     {"p50", JsonFloat(s.p50)},
                     {"p90", JsonFloat(s.p90)},
                     {"p99", JsonFloat(s.p99)}});
}

void PrintLatency(const char* name, const LatencyStats& s) {
  std::printf("%-5s ms   mean %9.2f   p50 %9.2f   p90 %9.2f   p99 %9.2f\n", name, s.mean, s.p50,
              s.p90, s.p99);
}

int RunBenchServe(const BenchServeFlags& flags) {
  for (size_t i = 0; i < flags.concurrency.size(); ++i) {
    ServeBenchOptions options = flags.options;
    options.concurrency = flags.concurrency[i];
    // Fresh prompts per level, so no level reuses another's prefixes from the server's cache.
    options.seed = flags.options.seed + i * 1000003;
    Result<ServeBenchResult> r = RunServeBench(options);
    if (!r.ok()) {
      std::fprintf(stderr, "dsv41 bench serve: %s\n", r.status().ToString().c_str());
      return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
    if (r->num_failed > 0) {
      std::fprintf(stderr, "dsv41 bench serve: %d requests failed, first: %s\n", r->num_failed,
                   r->first_error.c_str());
    }
    if (flags.json) {
      const JsonValue line = JsonObject({
          {"concurrency", JsonInt(r->concurrency)},
          {"num_requests", JsonInt(r->num_requests)},
          {"num_failed", JsonInt(r->num_failed)},
          {"duration_s", JsonFloat(r->duration_s)},
          {"request_throughput", JsonFloat(r->request_throughput)},
          {"output_throughput", JsonFloat(r->output_throughput)},
          {"total_token_throughput", JsonFloat(r->total_token_throughput)},
          {"mean_input_tokens", JsonFloat(r->mean_input_tokens)},
          {"mean_output_tokens", JsonFloat(r->mean_output_tokens)},
          {"cached_prompt_tokens", JsonInt(r->cached_prompt_tokens)},
          {"ttft_ms", LatencyJson(r->ttft)},
          {"tpot_ms", LatencyJson(r->tpot)},
          {"itl_ms", LatencyJson(r->itl)},
          {"e2e_ms", LatencyJson(r->e2e)},
      });
      std::printf("%s\n", FormatJson(line).c_str());
    } else {
      std::printf("== concurrency %d: %d requests (%d failed) in %.2f s ==\n", r->concurrency,
                  r->num_requests, r->num_failed, r->duration_s);
      std::printf("request throughput   %.3f req/s\n", r->request_throughput);
      std::printf("output throughput    %.2f tok/s   (total %.2f tok/s)\n", r->output_throughput,
                  r->total_token_throughput);
      std::printf(
          "mean input / output  %.1f / %.1f tokens, %lld prompt tokens from the prefix cache\n",
          r->mean_input_tokens, r->mean_output_tokens,
          static_cast<long long>(r->cached_prompt_tokens));
      PrintLatency("TTFT", r->ttft);
      PrintLatency("TPOT", r->tpot);
      PrintLatency("ITL", r->itl);
      PrintLatency("E2E", r->e2e);
    }
    std::fflush(stdout);
  }
  return 0;
}

std::function<int()> SetupBenchServe(CLI::App& sub) {
  auto flags = std::make_shared<BenchServeFlags>();
  ServeBenchOptions& o = flags->options;
  sub.add_option("--host", o.host, "server address")->capture_default_str();
  sub.add_option("--port", o.port, "server port")->capture_default_str();
  sub.add_option("--api-key", o.api_key, "sent as Authorization: Bearer KEY");
  sub.add_option("--model", o.model, "served model name (default: the first of /v1/models)");
  sub.add_option("--num-prompts", o.num_prompts, "requests per concurrency level")
      ->capture_default_str();
  sub.add_option("--concurrency", flags->concurrency,
                 "clients at once; several levels comma-separated, e.g. 1,8,32")
      ->delimiter(',')
      ->capture_default_str();
  sub.add_option("--input-len", o.input_len, "mean prompt tokens (of each new turn)")
      ->capture_default_str();
  sub.add_option("--output-len", o.output_len, "mean output tokens")->capture_default_str();
  sub.add_option("--range-ratio", o.range_ratio, "lengths uniform in [len*(1-r), len*(1+r)]")
      ->capture_default_str();
  sub.add_option("--multi-turn-ratio", o.multi_turn_ratio,
                 "share of requests in multi-turn conversations (each turn re-sends the history)")
      ->capture_default_str();
  sub.add_option("--turns", o.turns, "turns per conversation")->capture_default_str();
  sub.add_option("-s,--seed", o.seed, "seed of the request mix")->capture_default_str();
  sub.add_flag("--json", flags->json, "one JSON object per concurrency level on stdout");
  return [flags] { return RunBenchServe(*flags); };
}

DSV41_REGISTER_COMMAND(kBenchServeCommand, "serve",
                       "drive a running dsv41 serve: throughput and latency percentiles",
                       SetupBenchServe, "bench");

}  // namespace
}  // namespace dsv41

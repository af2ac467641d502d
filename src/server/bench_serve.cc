#include "server/bench_serve.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "server/http_client.h"
#include "server/json_path.h"
#include "text/json_format.h"

namespace dsv41 {
namespace {

using Clock = std::chrono::steady_clock;

// Text whose tokens make the id pool: ordinary words, punctuation and digits.
constexpr const char* kPoolText =
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a "
    "single step. To be or not to be, that is the question. All that glitters is not gold; "
    "fortune favours the bold. In 1969, 12 people walked on the Moon between July and December. "
    "Prices rose 3.5% in May, while wages grew by 2 percent. She sells sea shells by the sea "
    "shore, and the shells she sells are surely sea shells. def add(a, b): return a + b";

struct Sample {
  bool ok = false;
  std::string error;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cached_tokens = 0;
  double ttft_ms = 0;
  double e2e_ms = 0;
  std::vector<double> itl_ms;
  std::vector<int32_t> output_ids;
};

// One job: a single request, or a conversation of turns run in order on one client.
struct Job {
  std::vector<int32_t> turn_input_lens;
  std::vector<int32_t> turn_output_lens;
};

HttpHeaders AuthHeaders(const ServeBenchOptions& o) {
  if (o.api_key.empty()) return {};
  return {{"Authorization", "Bearer " + o.api_key}};
}

Sample RunRequest(HttpClient& client, const ServeBenchOptions& o, const std::string& model,
                  const std::vector<int32_t>& prompt, int32_t output_len) {
  Sample s;
  JsonValue ids = JsonArray();
  for (int32_t id : prompt) ids.Push(JsonInt(id));
  const JsonValue body =
      JsonObject({{"model", JsonString(model)},
                  {"prompt", std::move(ids)},
                  {"max_tokens", JsonInt(output_len)},
                  {"ignore_eos", JsonBool(true)},
                  {"temperature", JsonInt(0)},
                  {"stream", JsonBool(true)},
                  {"stream_options", JsonObject({{"include_usage", JsonBool(true)}})},
                  {"return_token_ids", JsonBool(true)}});
  SseReader reader;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  bool first = true;
  bool done = false;
  Result<HttpResponse> r = client.PostStreaming(
      "/v1/completions", FormatJson(body), AuthHeaders(o), [&](std::string_view piece) {
        reader.Push(piece);
        for (const SseMessage& e : reader.Take()) {
          if (e.data == "[DONE]") {
            done = true;
            continue;
          }
          Result<JsonValue> chunk = ParseJsonValue(e.data, "chunk");
          if (!chunk.ok()) continue;
          if (const JsonValue* usage = JsonAt(*chunk, "usage");
              usage != nullptr && !usage->is_null()) {
            s.input_tokens = JsonInteger(*usage, "prompt_tokens").value_or(0);
            s.output_tokens = JsonInteger(*usage, "completion_tokens").value_or(0);
            s.cached_tokens =
                JsonInteger(*usage, "prompt_tokens_details.cached_tokens").value_or(0);
          }
          const JsonValue* tokens = JsonAt(*chunk, "choices.0.token_ids");
          if (tokens == nullptr || tokens->array.empty()) continue;
          const Clock::time_point now = Clock::now();
          if (first) {
            s.ttft_ms = std::chrono::duration<double, std::milli>(now - start).count();
            first = false;
          } else {
            s.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
          }
          last = now;
          for (const JsonValue& id : tokens->array) {
            s.output_ids.push_back(static_cast<int32_t>(std::strtol(id.text.c_str(), nullptr, 10)));
          }
        }
        return true;
      });
  s.e2e_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!r.ok()) {
    s.error = r.status().ToString();
  } else if (r->status != 200) {
    s.error = "HTTP " + std::to_string(r->status);
  } else if (!done || first) {
    s.error = "the stream ended without tokens or [DONE]";
  } else {
    s.ok = true;
  }
  return s;
}

LatencyStats Stats(std::vector<double> v) {
  LatencyStats s;
  if (v.empty()) return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  s.p50 = Percentile(v, 50);
  s.p90 = Percentile(v, 90);
  s.p99 = Percentile(v, 99);
  return s;
}

// The first model of the server's /v1/models.
Result<std::string> FirstServedModel(HttpClient& client, const ServeBenchOptions& o) {
  DSV41_ASSIGN_OR_RETURN(HttpResponse models, client.Get("/v1/models", AuthHeaders(o)));
  Result<JsonValue> list = ParseJsonValue(models.body, "/v1/models");
  if (models.status != 200 || !list.ok() || JsonAt(*list, "data.0.id") == nullptr) {
    return IoError("%s:%d/v1/models: HTTP %d, no model", o.host.c_str(), o.port, models.status);
  }
  return JsonText(*list, "data.0.id");
}

// The ids prompts are drawn from: the server's tokenisation of kPoolText.
Result<std::vector<int32_t>> TokenPool(HttpClient& client, const ServeBenchOptions& o) {
  DSV41_ASSIGN_OR_RETURN(
      HttpResponse tokenized,
      client.Post("/tokenize",
                  FormatJson(JsonObject({{"prompt", JsonString(kPoolText)},
                                         {"add_special_tokens", JsonBool(false)}})),
                  AuthHeaders(o)));
  Result<JsonValue> pool_json = ParseJsonValue(tokenized.body, "/tokenize");
  const JsonValue* pool_ids = pool_json.ok() ? JsonAt(*pool_json, "tokens") : nullptr;
  if (tokenized.status != 200 || pool_ids == nullptr || pool_ids->array.empty()) {
    return IoError("%s:%d/tokenize: HTTP %d", o.host.c_str(), o.port, tokenized.status);
  }
  std::vector<int32_t> pool;
  for (const JsonValue& id : pool_ids->array) {
    pool.push_back(static_cast<int32_t>(std::strtol(id.text.c_str(), nullptr, 10)));
  }
  return pool;
}

// The jobs of one level and, per job, the new prompt ids of its turns in order.
struct RequestMix {
  std::vector<Job> jobs;
  std::vector<std::vector<int32_t>> fresh_ids;
};

// The request mix, fixed by the seed: lengths, conversations and the ids drawn from `pool`.
RequestMix MakeRequestMix(const ServeBenchOptions& o, const std::vector<int32_t>& pool) {
  std::mt19937_64 rng(o.seed);
  auto length = [&](int32_t mean) {
    const int32_t lo = std::max(1, static_cast<int32_t>(std::lround(mean * (1 - o.range_ratio))));
    const int32_t hi = std::max(lo, static_cast<int32_t>(std::lround(mean * (1 + o.range_ratio))));
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
  };
  RequestMix mix;
  std::bernoulli_distribution multi(o.multi_turn_ratio);
  for (int32_t left = o.num_prompts; left > 0;) {
    const int32_t turns = o.turns > 1 && multi(rng) ? std::min(o.turns, left) : 1;
    Job job;
    for (int32_t t = 0; t < turns; ++t) {
      job.turn_input_lens.push_back(length(o.input_len));
      job.turn_output_lens.push_back(length(o.output_len));
    }
    mix.jobs.push_back(std::move(job));
    left -= turns;
  }
  mix.fresh_ids.resize(mix.jobs.size());
  for (size_t j = 0; j < mix.jobs.size(); ++j) {
    for (int32_t len : mix.jobs[j].turn_input_lens) {
      for (int32_t k = 0; k < len; ++k) mix.fresh_ids[j].push_back(pool[rng() % pool.size()]);
    }
  }
  return mix;
}

// Runs the mix on o.concurrency clients, each taking the next job; a conversation's turns run in
// order on one client, each re-sending the history. Samples in completion order.
std::vector<Sample> RunJobs(const ServeBenchOptions& o, const std::string& model,
                            const RequestMix& mix) {
  std::mutex mu;
  std::vector<Sample> samples;
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int32_t w = 0; w < o.concurrency; ++w) {
    workers.emplace_back([&] {
      HttpClient c(o.host, o.port);
      for (size_t j = next++; j < mix.jobs.size(); j = next++) {
        const Job& job = mix.jobs[j];
        std::vector<int32_t> history;
        size_t used = 0;
        for (size_t t = 0; t < job.turn_input_lens.size(); ++t) {
          const size_t n = static_cast<size_t>(job.turn_input_lens[t]);
          history.insert(history.end(), mix.fresh_ids[j].begin() + used,
                         mix.fresh_ids[j].begin() + used + n);
          used += n;
          Sample s = RunRequest(c, o, model, history, job.turn_output_lens[t]);
          history.insert(history.end(), s.output_ids.begin(), s.output_ids.end());
          const bool ok = s.ok;
          {
            std::lock_guard<std::mutex> lock(mu);
            samples.push_back(std::move(s));
          }
          if (!ok) break;  // the next turn would need this one's output
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  return samples;
}

// The level's figures from its samples: failures counted, latencies of the completed requests.
ServeBenchResult Summarize(const std::vector<Sample>& samples, int32_t concurrency,
                           double duration_s) {
  ServeBenchResult out;
  out.concurrency = concurrency;
  out.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t input = 0, output = 0;
  for (const Sample& s : samples) {
    if (!s.ok) {
      ++out.num_failed;
      if (out.first_error.empty()) out.first_error = s.error;
      continue;
    }
    ++out.num_requests;
    input += s.input_tokens;
    output += s.output_tokens;
    out.cached_prompt_tokens += s.cached_tokens;
    ttft.push_back(s.ttft_ms);
    e2e.push_back(s.e2e_ms);
    if (s.output_tokens > 1) {
      tpot.push_back((s.e2e_ms - s.ttft_ms) / static_cast<double>(s.output_tokens - 1));
    }
    itl.insert(itl.end(), s.itl_ms.begin(), s.itl_ms.end());
  }
  const double seconds = std::max(out.duration_s, 1e-9);
  out.request_throughput = out.num_requests / seconds;
  out.output_throughput = static_cast<double>(output) / seconds;
  out.total_token_throughput = static_cast<double>(input + output) / seconds;
  if (out.num_requests > 0) {
    out.mean_input_tokens = static_cast<double>(input) / out.num_requests;
    out.mean_output_tokens = static_cast<double>(output) / out.num_requests;
  }
  out.ttft = Stats(std::move(ttft));
  out.tpot = Stats(std::move(tpot));
  out.itl = Stats(std::move(itl));
  out.e2e = Stats(std::move(e2e));
  return out;
}

}  // namespace

double Percentile(std::vector<double>& values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = q / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

Result<ServeBenchResult> RunServeBench(const ServeBenchOptions& o) {
  if (o.num_prompts < 1 || o.concurrency < 1 || o.input_len < 1 || o.output_len < 1 ||
      o.turns < 1 || !(o.range_ratio >= 0 && o.range_ratio < 1) ||
      !(o.multi_turn_ratio >= 0 && o.multi_turn_ratio <= 1)) {
    return InvalidArgumentError(
        "--num-prompts, --concurrency, --input-len, --output-len, --turns must be >= 1, "
        "--range-ratio in [0, 1), --multi-turn-ratio in [0, 1]");
  }
  HttpClient client(o.host, o.port);
  std::string model = o.model;
  if (model.empty()) {
    DSV41_ASSIGN_OR_RETURN(model, FirstServedModel(client, o));
  }
  DSV41_ASSIGN_OR_RETURN(const std::vector<int32_t> pool, TokenPool(client, o));
  const RequestMix mix = MakeRequestMix(o, pool);
  const Clock::time_point start = Clock::now();
  const std::vector<Sample> samples = RunJobs(o, model, mix);
  return Summarize(samples, o.concurrency,
                   std::chrono::duration<double>(Clock::now() - start).count());
}

}  // namespace dsv41

#include "server/metrics.h"

#include <cstdlib>
#include <utility>

#include "base/status.h"

namespace dsv41 {
namespace {

// Prometheus writes bounds and sums in Go's shortest float form; %.17g round-trips and stays
// valid exposition syntax.
std::string FormatDouble(double value) {
  std::string s = StrFormat("%.6g", value);
  if (std::strtod(s.c_str(), nullptr) != value) s = StrFormat("%.17g", value);
  return s;
}

void Header(std::string_view name, std::string_view help, std::string_view type, std::string& out) {
  out +=
      StrFormat("# HELP %.*s %.*s\n# TYPE %.*s %.*s\n", static_cast<int>(name.size()), name.data(),
                static_cast<int>(help.size()), help.data(), static_cast<int>(name.size()),
                name.data(), static_cast<int>(type.size()), type.data());
}

void Sample(std::string_view name, std::string_view labels, double value, std::string& out) {
  out.append(name);
  out.append(labels);
  out += ' ';
  out += FormatDouble(value);
  out += '\n';
}

void Single(std::string_view name, std::string_view help, std::string_view type, double value,
            std::string& out) {
  Header(name, help, type, out);
  Sample(name, "", value, out);
}

// Latency buckets in seconds, as vLLM's (fine at the low end, where a tiny model lives).
std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,    2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
}

// Speculative decoding (serving.md §7, §11.4), named as vLLM's spec_decode metrics: the counters,
// and the rates derived from them (0 while nothing was verified). Per-position series exist for
// the positions a verify step may check (none with speculation off).
void RenderSpeculative(const EngineStats& e, std::string& out) {
  Single("dsv41_spec_decode_num_drafts_total",
         "Verify steps of a request: decode steps that checked at least one draft.", "counter",
         static_cast<double>(e.num_verifies), out);
  Single("dsv41_spec_decode_num_draft_tokens_total", "Draft tokens verified.", "counter",
         static_cast<double>(e.num_draft_tokens), out);
  Single("dsv41_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", "counter",
         static_cast<double>(e.num_accepted_tokens), out);
  Single("dsv41_spec_decode_acceptance_rate", "Accepted over verified draft tokens (0..1).",
         "gauge", e.acceptance_rate(), out);
  Single("dsv41_spec_decode_mean_accepted_length",
         "Tokens a verify step emits on average: 1 + accepted drafts per verify.", "gauge",
         e.mean_accepted_length(), out);
  const auto per_position = [&](std::string_view name, std::string_view help, std::string_view type,
                                auto value) {
    if (e.drafts_at_position.empty()) return;
    Header(name, help, type, out);
    for (size_t i = 0; i < e.drafts_at_position.size(); ++i) {
      Sample(name, StrFormat("{position=\"%zu\"}", i), value(i), out);
    }
  };
  per_position("dsv41_spec_decode_num_draft_tokens_per_pos_total",
               "Verify steps that checked a draft at this position of their block.", "counter",
               [&](size_t i) { return static_cast<double>(e.drafts_at_position[i]); });
  per_position("dsv41_spec_decode_num_accepted_tokens_per_pos_total",
               "Drafts accepted at this position of their block.", "counter",
               [&](size_t i) { return static_cast<double>(e.accepted_at_position[i]); });
  const std::vector<double> rates = e.acceptance_rate_at_position();
  per_position("dsv41_spec_decode_acceptance_rate_per_pos",
               "Accepted over checked drafts at this position (0..1).", "gauge",
               [&](size_t i) { return rates[i]; });
  Single("dsv41_spec_decode_guard_pauses_total",
         "Times the acceptance guard paused a request's drafting.", "counter",
         static_cast<double>(e.num_guard_pauses), out);
}

// The scheduler, KV cache and token counters, named as vLLM's where it has them.
void RenderScheduler(const EngineStats& e, std::string& out) {
  const uint32_t used = e.total_blocks - e.free_blocks;
  Single("dsv41_num_requests_running", "Requests in the engine's running batch.", "gauge",
         e.running, out);
  Single("dsv41_num_requests_waiting", "Requests waiting to be scheduled.", "gauge", e.waiting,
         out);
  Single("dsv41_kv_blocks_used", "KV block ids referenced by live requests.", "gauge", used, out);
  Single("dsv41_kv_blocks_cached",
         "Free KV block ids that still hold a prefix-cache entry (evictable).", "gauge",
         e.cached_blocks, out);
  Single("dsv41_kv_blocks_free", "KV block ids that are free and hold no prefix-cache entry.",
         "gauge", e.free_blocks - e.cached_blocks, out);
  Single("dsv41_kv_blocks_total", "KV block ids in the pool.", "gauge", e.total_blocks, out);
  Single("dsv41_kv_cache_usage", "Fraction of KV block ids in use (0..1).", "gauge",
         e.total_blocks == 0 ? 0.0 : static_cast<double>(used) / e.total_blocks, out);
  Single("dsv41_prompt_tokens_total", "Prompt tokens admitted.", "counter",
         static_cast<double>(e.prompt_tokens), out);
  Single("dsv41_prompt_tokens_computed_total",
         "Prompt tokens computed (prefill chunks run; prefix-cache hits are not).", "counter",
         static_cast<double>(e.prompt_tokens_computed), out);
  Single("dsv41_generation_tokens_total", "Tokens generated.", "counter",
         static_cast<double>(e.generation_tokens), out);
  Single("dsv41_prefix_cache_queried_tokens_total", "Prompt tokens looked up in the prefix cache.",
         "counter", static_cast<double>(e.prefix_queried_tokens), out);
  Single("dsv41_prefix_cache_hit_tokens_total", "Prompt tokens served by the prefix cache.",
         "counter", static_cast<double>(e.prefix_hit_tokens), out);
  Single("dsv41_num_preemptions_total", "Requests preempted (blocks released, recomputed later).",
         "counter", static_cast<double>(e.num_preemptions), out);
  Single("dsv41_engine_steps_total", "Engine steps run.", "counter",
         static_cast<double>(e.num_steps), out);
}

// Image input (vision.md §12): images the tower encoded, its time, and the prompt positions inside
// image spans.
void RenderVision(const EngineStats& e, std::string& out) {
  Single("dsv41_images_encoded_total", "Images the vision tower encoded.", "counter",
         static_cast<double>(e.images_encoded), out);
  Single("dsv41_vision_encode_seconds_total",
         "Seconds the vision tower spent encoding images (patches, ViT, aligner).", "counter",
         e.vision_encode_seconds, out);
  Single("dsv41_image_span_tokens_total",
         "Prompt positions inside image spans (START, IMAGE, NEWLINE, END), admitted.", "counter",
         static_cast<double>(e.image_span_tokens), out);
}

// Engram offload (serving.md §8.7): row traffic of the prefetcher and the stores, the forward's
// wait per Engram slot and the fetch latency histogram.
void RenderEngram(const EngineStats& e, std::string& out) {
  const EngramFetchStats& f = e.engram_fetch;
  const EngramStoreCounters& st = e.engram_store;
  Single("dsv41_engram_rows_requested_total",
         "Engram rows the scheduled tokens asked for (token x column x layer).", "counter",
         static_cast<double>(f.rows_requested), out);
  Single("dsv41_engram_rows_deduplicated_total",
         "Of those, repeats within a step that were not fetched again.", "counter",
         static_cast<double>(f.rows_deduplicated), out);
  Single("dsv41_engram_rows_fetched_total",
         "Rows asked of the Engram stores (de-duplicated, plus look-ahead).", "counter",
         static_cast<double>(st.rows_fetched), out);
  Single("dsv41_engram_rows_cache_hits_total", "Rows served from the hot-row cache.", "counter",
         static_cast<double>(st.cache_hits), out);
  Single("dsv41_engram_rows_read_total", "Rows read from the table files (disk tier).", "counter",
         static_cast<double>(st.rows_read), out);
  Single("dsv41_engram_bytes_read_total", "Bytes read from the table files (disk tier).", "counter",
         static_cast<double>(st.bytes_read), out);
  Single("dsv41_engram_pages_read_total", "Distinct 4 KiB pages read (disk tier).", "counter",
         static_cast<double>(st.pages_read), out);
  Single("dsv41_engram_cache_hit_rate", "Hot-row cache hits / rows fetched (0..1).", "gauge",
         st.rows_fetched == 0
             ? 0.0
             : static_cast<double>(st.cache_hits) / static_cast<double>(st.rows_fetched),
         out);
  Single("dsv41_engram_failed_steps_total",
         "Steps whose requests failed because their Engram rows could not be read.", "counter",
         static_cast<double>(e.failed_steps), out);
  Header("dsv41_engram_wait_seconds_total",
         "Time the forward waited for an Engram layer's rows, by Engram slot.", "counter", out);
  for (size_t slot = 0; slot < f.wait_ms_per_layer.size(); ++slot) {
    Sample("dsv41_engram_wait_seconds_total", StrFormat("{engram_slot=\"%zu\"}", slot),
           f.wait_ms_per_layer[slot] / 1e3, out);
  }
  Header("dsv41_engram_fetch_latency_seconds", "Time to fetch one Engram layer's rows of one step.",
         "histogram", out);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < f.fetch_latency_counts.size(); ++i) {
    cumulative += f.fetch_latency_counts[i];
    const std::string le = i < kEngramFetchLatencyBucketsMs.size()
                               ? FormatDouble(kEngramFetchLatencyBucketsMs[i] / 1e3)
                               : "+Inf";
    Sample("dsv41_engram_fetch_latency_seconds_bucket", "{le=\"" + le + "\"}",
           static_cast<double>(cumulative), out);
  }
  Sample("dsv41_engram_fetch_latency_seconds_sum", "", f.fetch_latency_sum_ms / 1e3, out);
  Sample("dsv41_engram_fetch_latency_seconds_count", "", static_cast<double>(f.fetch_latency_count),
         out);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t bucket = 0;
  while (bucket < upper_bounds_.size() && value > upper_bounds_[bucket]) ++bucket;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void Histogram::Render(std::string_view name, std::string_view help, std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  Header(name, help, "histogram", out);
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < upper_bounds_.size() ? FormatDouble(upper_bounds_[i]) : "+Inf";
    Sample(bucket, "{le=\"" + le + "\"}", static_cast<double>(cumulative), out);
  }
  Sample(std::string(name) + "_sum", "", sum_, out);
  Sample(std::string(name) + "_count", "", static_cast<double>(count_), out);
}

std::string_view RequestErrorTypeName(RequestErrorType type) {
  switch (type) {
    case RequestErrorType::kInvalidRequest:
      return "invalid_request";
    case RequestErrorType::kAuthentication:
      return "authentication";
    case RequestErrorType::kNotFound:
      return "not_found";
    case RequestErrorType::kTooLarge:
      return "too_large";
    case RequestErrorType::kOverloaded:
      return "overloaded";
    case RequestErrorType::kUnavailable:
      return "unavailable";
    case RequestErrorType::kInternal:
      return "internal";
  }
  return "internal";
}

ServerMetrics::ServerMetrics()
    : ttft_(LatencyBuckets()),
      itl_(LatencyBuckets()),
      e2e_(LatencyBuckets()),
      step_(LatencyBuckets()) {}

void ServerMetrics::CountError(RequestErrorType type) {
  std::lock_guard<std::mutex> lock(mu_);
  ++errors_[static_cast<size_t>(type)];
}

uint64_t ServerMetrics::num_errors(RequestErrorType type) const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_[static_cast<size_t>(type)];
}

void ServerMetrics::CountFinished(std::string_view finish) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = finished_.find(finish);
  if (it == finished_.end()) it = finished_.emplace(std::string(finish), 0).first;
  ++it->second;
}

void ServerMetrics::CountMalformedToolOutput() {
  std::lock_guard<std::mutex> lock(mu_);
  ++malformed_tool_outputs_;
}

void ServerMetrics::PublishEngineStats(const EngineStats& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_ = stats;
}

EngineStats ServerMetrics::engine_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_;
}

std::string ServerMetrics::RenderPrometheus() const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RenderScheduler(engine_, out);
    RenderSpeculative(engine_, out);
    RenderEngram(engine_, out);
    RenderVision(engine_, out);
    Header("dsv41_request_success_total", "Requests that ended, by finish reason.", "counter", out);
    for (std::string_view reason : {"stop", "length", "abort"}) {
      const auto it = finished_.find(reason);
      Sample(
          "dsv41_request_success_total",
          StrFormat("{finished_reason=\"%.*s\"}", static_cast<int>(reason.size()), reason.data()),
          it == finished_.end() ? 0.0 : static_cast<double>(it->second), out);
    }
    Header("dsv41_request_errors_total", "Requests answered with an HTTP error, by type.",
           "counter", out);
    for (int t = 0; t < kNumRequestErrorTypes; ++t) {
      const std::string_view name = RequestErrorTypeName(static_cast<RequestErrorType>(t));
      Sample("dsv41_request_errors_total",
             StrFormat("{type=\"%.*s\"}", static_cast<int>(name.size()), name.data()),
             static_cast<double>(errors_[t]), out);
    }
    Single("dsv41_malformed_tool_outputs_total",
           "Generated tool-call blocks that were not well formed (returned as content).", "counter",
           static_cast<double>(malformed_tool_outputs_), out);
  }
  ttft_.Render("dsv41_time_to_first_token_seconds", "Time from arrival to the first token.", out);
  itl_.Render("dsv41_inter_token_latency_seconds", "Time between successive tokens of a request.",
              out);
  e2e_.Render("dsv41_e2e_request_latency_seconds", "Time from arrival to the end of a request.",
              out);
  step_.Render("dsv41_step_time_seconds",
               "Duration of one engine step (schedule, forward, sample).", out);
  return out;
}

}  // namespace dsv41

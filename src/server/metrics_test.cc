// Metrics exposition, SSE reading and error-field extraction, with hand-computed values.

#include "server/metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/bench_serve.h"
#include "server/http_client.h"

namespace dsv41 {
namespace {

TEST(HistogramTest, BucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.1);  // a bound is inclusive (le)
  h.Observe(0.5);
  h.Observe(7.0);
  std::string out;
  h.Render("x_seconds", "help", out);
  EXPECT_EQ(out,
            "# HELP x_seconds help\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{le=\"0.1\"} 2\nx_seconds_bucket{le=\"1\"} 3\n"
            "x_seconds_bucket{le=\"+Inf\"} 4\nx_seconds_sum 7.65\nx_seconds_count 4\n");
}

TEST(ServerMetricsTest, EngineGaugesSplitFreeCachedAndUsedBlocks) {
  ServerMetrics m;
  EngineStats s;
  s.total_blocks = 100;
  s.free_blocks = 70;
  s.cached_blocks = 20;
  s.running = 3;
  m.PublishEngineStats(s);
  const std::string out = m.RenderPrometheus();
  EXPECT_NE(out.find("dsv41_kv_blocks_used 30\n"), std::string::npos) << out;
  EXPECT_NE(out.find("dsv41_kv_blocks_cached 20\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_kv_blocks_free 50\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_kv_cache_usage 0.3\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_num_requests_running 3\n"), std::string::npos);
}

// The speculative counters and the rates derived from them (serving.md §11.4, vLLM's names):
// 4 verifies of 2 drafts each, 4 accepted (3 at position 0, 1 at position 1).
TEST(ServerMetricsTest, SpeculativeCountersRatesAndPerPositionSeries) {
  ServerMetrics m;
  EngineStats s;
  s.num_verifies = 4;
  s.num_draft_tokens = 8;
  s.num_accepted_tokens = 4;
  s.drafts_at_position = {4, 4};
  s.accepted_at_position = {3, 1};
  s.num_guard_pauses = 1;
  m.PublishEngineStats(s);
  const std::string out = m.RenderPrometheus();
  for (const char* line :
       {"# TYPE dsv41_spec_decode_num_draft_tokens_total counter\n",
        "dsv41_spec_decode_num_drafts_total 4\n", "dsv41_spec_decode_num_draft_tokens_total 8\n",
        "dsv41_spec_decode_num_accepted_tokens_total 4\n",
        "dsv41_spec_decode_acceptance_rate 0.5\n", "dsv41_spec_decode_mean_accepted_length 2\n",
        "dsv41_spec_decode_num_draft_tokens_per_pos_total{position=\"1\"} 4\n",
        "dsv41_spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 3\n",
        "dsv41_spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 1\n",
        "dsv41_spec_decode_acceptance_rate_per_pos{position=\"0\"} 0.75\n",
        "dsv41_spec_decode_acceptance_rate_per_pos{position=\"1\"} 0.25\n",
        "dsv41_spec_decode_guard_pauses_total 1\n"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << " missing from:\n" << out;
  }
  // Without speculation: the counters at 0, no per-position series.
  ServerMetrics off;
  off.PublishEngineStats(EngineStats{});
  const std::string plain = off.RenderPrometheus();
  EXPECT_NE(plain.find("dsv41_spec_decode_num_draft_tokens_total 0\n"), std::string::npos);
  EXPECT_NE(plain.find("dsv41_spec_decode_acceptance_rate 0\n"), std::string::npos);
  EXPECT_EQ(plain.find("_per_pos"), std::string::npos) << plain;
}

TEST(ServerMetricsTest, EngramOffloadCountersWaitsAndFetchLatency) {
  ServerMetrics m;
  EngineStats s;
  s.engram_fetch.rows_requested = 480;
  s.engram_fetch.rows_deduplicated = 80;
  s.engram_fetch.wait_ms_per_layer = {1500.0, 250.0};
  s.engram_fetch.fetch_latency_counts[0] = 2;  // <= 0.1 ms
  s.engram_fetch.fetch_latency_counts[4] = 1;  // <= 2.5 ms
  s.engram_fetch.fetch_latency_count = 3;
  s.engram_fetch.fetch_latency_sum_ms = 2.5;
  s.engram_store.rows_fetched = 400;
  s.engram_store.cache_hits = 100;
  s.engram_store.rows_read = 300;
  s.engram_store.bytes_read = 4096 * 100;
  s.failed_steps = 1;
  m.PublishEngineStats(s);
  const std::string out = m.RenderPrometheus();
  EXPECT_NE(out.find("dsv41_engram_rows_requested_total 480\n"), std::string::npos) << out;
  EXPECT_NE(out.find("dsv41_engram_rows_deduplicated_total 80\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_rows_cache_hits_total 100\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_rows_read_total 300\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_bytes_read_total 409600\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_cache_hit_rate 0.25\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_failed_steps_total 1\n"), std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_wait_seconds_total{engram_slot=\"0\"} 1.5\n"),
            std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_wait_seconds_total{engram_slot=\"1\"} 0.25\n"),
            std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_fetch_latency_seconds_bucket{le=\"0.0001\"} 2\n"),
            std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_fetch_latency_seconds_bucket{le=\"0.0025\"} 3\n"),
            std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_fetch_latency_seconds_bucket{le=\"+Inf\"} 3\n"),
            std::string::npos);
  EXPECT_NE(out.find("dsv41_engram_fetch_latency_seconds_count 3\n"), std::string::npos);
}

TEST(SseReaderTest, SplitsEventsAcrossPiecesAndSkipsComments) {
  SseReader r;
  const std::string body = ": ping\n\nevent: a\ndata: {\"x\"\ndata: : 1}\n\ndata: [DONE]\n\n";
  for (char c : body) r.Push(std::string_view(&c, 1));
  const std::vector<SseMessage> events = r.Take();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].event, "a");
  EXPECT_EQ(events[0].data, "{\"x\"\n: 1}");
  EXPECT_EQ(events[1].event, "");
  EXPECT_EQ(events[1].data, "[DONE]");
}

TEST(ApiErrorTest, ParamIsTheFieldPathAMessageStartsWith) {
  EXPECT_EQ(ErrorParam("messages[2].content: must be a string"), "messages[2].content");
  EXPECT_EQ(ErrorParam("top_p 1.5 is outside (0, 1]"), "top_p");
  EXPECT_EQ(ErrorParam("temperature: must be a number"), "temperature");
  EXPECT_EQ(ErrorParam("the server is overloaded"), "");
  EXPECT_EQ(ErrorParam("a prompt of 5 tokens"), "");
}

TEST(BenchServeTest, PercentilesInterpolateLinearlyAsNumpy) {
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);  // numpy.percentile([1, 2, 3, 4], 50)
  EXPECT_DOUBLE_EQ(Percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(Percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  std::vector<double> empty;
  EXPECT_EQ(Percentile(empty, 50), 0);
}

}  // namespace
}  // namespace dsv41

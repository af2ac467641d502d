// `dsv41 serve` end to end on the tiny model, as a separate process over loopback: prefix caching
// over HTTP, determinism alone vs inside a busy batch, a soak of mixed traffic (malformed bodies,
// clients hanging up mid-stream, streaming and not, both APIs) after which no block is used and
// free + cached = total, and SIGTERM with requests in flight exiting 0.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/base64.h"
#include "serve_process.h"
#include "server/http_client.h"
#include "server/json_path.h"
#include "text/json_format.h"
#include "tiny/tiny_checkpoint.h"
#include "tiny/tiny_presets.h"
#include "vision/image_testing.h"

namespace dsv41 {
namespace {

// The sanitizer build (Debug, ASan + UBSan) runs the same tests with smaller workloads, so the
// CI's sanitize job stays short; the claims are the same.
#ifdef DSV41_SANITIZED_BUILD
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
constexpr int kSoakRequests = kSanitized ? 40 : 1000;
// A request may wait this long for its first byte (a slow sanitized model under load).
constexpr std::chrono::seconds kClientTimeout(600);

JsonValue Parse(const std::string& body) {
  Result<JsonValue> v = ParseJsonValue(body, "response");
  EXPECT_TRUE(v.ok()) << v.status().ToString() << "\n" << body;
  return v.ok() ? std::move(v).value() : JsonValue();
}

// The value of metric line `name` (no labels) in a Prometheus text, or -1.
double Metric(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1.0 : std::strtod(text.c_str() + at + key.size(), nullptr);
}

class ServeE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "/serve_e2e_" +
                           std::to_string(static_cast<long>(getpid())));
    std::filesystem::remove_all(*dir_);
    Result<TinySpec> spec = TinyPreset("tiny");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    spec->num_shards = 1;
    Result<TinyCheckpointSummary> written = WriteTinyCheckpoint(*spec, *dir_);
    ASSERT_TRUE(written.ok()) << written.status().ToString();
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  void Serve(std::vector<std::string> args = {}) {
    args.insert(args.end(),
                {"--served-model-name", "tiny", "-t", "2", "--log-stats-interval", "1"});
    std::string error;
    static int num_started = 0;
    const std::string log = *dir_ + "/serve_" + std::to_string(++num_started) + ".log";
    server_ = ServeProcess::Start(*dir_, args, log, &error);
    ASSERT_NE(server_, nullptr) << error;
  }

  HttpClient Client() const { return HttpClient("127.0.0.1", server_->port(), kClientTimeout); }

  JsonValue PostOk(const std::string& path, const std::string& body) {
    HttpClient c = Client();
    Result<HttpResponse> r = c.Post(path, body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.ok() ? r->status : 0, 200) << (r.ok() ? r->body : "");
    return r.ok() ? Parse(r->body) : JsonValue();
  }

  std::string Metrics() {
    HttpClient c = Client();
    Result<HttpResponse> r = c.Get("/metrics");
    return r.ok() ? "\n" + r->body : "";
  }

  // Waits until the engine holds no request (the loop publishes stats after each step).
  std::string IdleMetrics() {
    std::string m;
    for (int i = 0; i < 6000; ++i) {
      m = Metrics();
      if (Metric(m, "dsv41_num_requests_running") == 0 &&
          Metric(m, "dsv41_num_requests_waiting") == 0 && Metric(m, "dsv41_kv_blocks_used") == 0) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return m;
  }

  static std::string* dir_;
  std::unique_ptr<ServeProcess> server_;
};

std::string* ServeE2eTest::dir_ = nullptr;

TEST_F(ServeE2eTest, PrefixCachingOverHttpReusesTheConversationAndKeepsTheTokens) {
  const int block = kSanitized ? 16 : 32;
  Serve({"--block-size", std::to_string(block)});
  // An agent-like conversation over several blocks.
  std::string messages = R"([{"role": "system", "content": "You are a careful assistant.")";
  messages += R"(}, {"role": "user", "content": "Here is the file:\n)";
  for (int i = 0; i < (kSanitized ? 3 : 12); ++i)
    messages += "line " + std::to_string(i) + ": let x = x + 1;\\n";
  messages += R"("}, {"role": "assistant", "content": "I read it."}, {"role": "user", "content":
      "Now tell me what it does."}])";
  const std::string body = R"({"model": "tiny", "temperature": 0, "max_tokens": 8, "ignore_eos":
      true, "logprobs": true, "messages": )" +
                           messages + "}";
  const JsonValue first = PostOk("/v1/chat/completions", body);
  const JsonValue second = PostOk("/v1/chat/completions", body);
  const int64_t prompt = JsonInteger(first, "usage.prompt_tokens").value_or(0);
  ASSERT_GT(prompt, 3 * block) << "the conversation must span several blocks";
  EXPECT_EQ(JsonInteger(first, "usage.prompt_tokens_details.cached_tokens"), 0);
  const int64_t cached =
      JsonInteger(second, "usage.prompt_tokens_details.cached_tokens").value_or(0);
  EXPECT_GT(cached, 0);
  EXPECT_EQ(cached % block, 0) << "hits are whole blocks";
  EXPECT_LT(cached, prompt);
  // The same tokens: same text and the same token list with the same logprobs.
  EXPECT_EQ(FormatJson(*JsonAt(first, "choices.0.message")),
            FormatJson(*JsonAt(second, "choices.0.message")));
  EXPECT_EQ(FormatJson(*JsonAt(first, "choices.0.logprobs")),
            FormatJson(*JsonAt(second, "choices.0.logprobs")));
  EXPECT_GT(Metric(Metrics(), "dsv41_prefix_cache_hit_tokens_total"), 0);
}

TEST_F(ServeE2eTest, SameSeedGivesTheSameTokensAloneAndInsideABusyBatch) {
  Serve();
  const std::string probe =
      R"({"model": "tiny", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 1.0,
          "top_p": 0.9, "seed": 1234, "ignore_eos": true, "return_token_ids": true})";
  const JsonValue alone = PostOk("/v1/completions", probe);
  const std::string ids = FormatJson(*JsonAt(alone, "choices.0.token_ids"));
  ASSERT_EQ(JsonAt(alone, "choices.0.token_ids")->array.size(), 12u);
  // Eight other requests of other lengths keep the batch busy while the probe runs.
  std::vector<std::thread> others;
  for (int i = 0; i < (kSanitized ? 3 : 8); ++i) {
    others.emplace_back([this, i] {
      PostOk("/v1/completions",
             R"({"prompt": ")" + std::string(static_cast<size_t>(10 + 7 * i), 'z') +
                 R"(", "max_tokens": )" + std::to_string((kSanitized ? 6 : 20) + i) +
                 R"(, "temperature": 1.0, "ignore_eos": true})");
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const JsonValue busy = PostOk("/v1/completions", probe);
  for (std::thread& t : others) t.join();
  EXPECT_EQ(FormatJson(*JsonAt(busy, "choices.0.token_ids")), ids);
  EXPECT_EQ(JsonText(busy, "choices.0.text"), JsonText(alone, "choices.0.text"));
}

// `dsv41 serve --speculative` changes the speed, never the tokens: greedy (dspark and ngram) and
// seeded sampling (dspark) give the plain server's token ids, and /metrics counts the verified and
// accepted drafts.
TEST_F(ServeE2eTest, SpeculativeServingKeepsTheTokensAndCountsTheDrafts) {
  const std::vector<std::string> probes = {
      R"({"model": "tiny", "prompt": "abc abc abc abc", "max_tokens": 10, "temperature": 0,
          "ignore_eos": true, "return_token_ids": true})",
      R"({"model": "tiny", "prompt": "Once upon a time", "max_tokens": 10, "temperature": 0.9,
          "top_k": 40, "seed": 7, "ignore_eos": true, "return_token_ids": true})"};
  const auto run = [&](std::vector<std::string> args, size_t num_probes) {
    Serve(std::move(args));
    std::vector<std::string> ids;
    for (size_t i = 0; i < num_probes; ++i) {
      ids.push_back(
          FormatJson(*JsonAt(PostOk("/v1/completions", probes[i]), "choices.0.token_ids")));
    }
    return ids;
  };
  const std::vector<std::string> plain = run({}, probes.size());
  const std::vector<std::string> dspark =
      run({"--speculative", "dspark", "--num-speculative-tokens", "3",
           "--speculative-min-acceptance", "0"},
          probes.size());
  EXPECT_EQ(dspark, plain);
  const std::string m = IdleMetrics();
  EXPECT_GT(Metric(m, "dsv41_spec_decode_num_drafts_total"), 0) << m;
  const double drafts = Metric(m, "dsv41_spec_decode_num_draft_tokens_total");
  EXPECT_GE(drafts, Metric(m, "dsv41_spec_decode_num_drafts_total"));
  EXPECT_LE(drafts, Metric(m, "dsv41_spec_decode_num_drafts_total") * 3) << "at most K = 3 each";
  EXPECT_GE(Metric(m, "dsv41_spec_decode_num_accepted_tokens_total"), 0);
  EXPECT_NE(m.find("dsv41_spec_decode_acceptance_rate_per_pos{position=\"2\"}"), std::string::npos);
  const std::vector<std::string> ngram =
      run({"--speculative", "ngram", "--speculative-min-acceptance", "0"}, 1);
  EXPECT_EQ(ngram.front(), plain.front());
}

// One soak client's request, chosen by its number.
struct SoakOutcome {
  std::atomic<int> completed{0};
  std::atomic<int> malformed{0};
  std::atomic<int> malformed_4xx{0};
  std::atomic<int> disconnected{0};
  std::atomic<int> streamed{0};
  std::atomic<int> failures{0};
  std::mutex mu;
  std::vector<std::string> failure_notes;

  void Fail(std::string note) {
    ++failures;
    std::lock_guard<std::mutex> lock(mu);
    if (failure_notes.size() < 10) failure_notes.push_back(std::move(note));
  }
};

void SoakRequest(HttpClient& client, int n, std::mt19937& rng, SoakOutcome& out) {
  static const std::vector<std::pair<std::string, std::string>> kMalformed = {
      {"/v1/chat/completions", R"({"messages": [)"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "n": 3})"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1000000})"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}"},
      {"/v1/completions", R"({"prompt": [1, 2, -5]})"},
      {"/v1/completions", R"({"model": "other", "prompt": "x"})"},
      {"/v1/messages", R"({"messages": [{"role": "user", "content": "x"}]})"},
      {"/v1/messages",
       R"({"max_tokens": 4, "messages": [{"role": "assistant", "content": [{"type":
           "tool_result", "tool_use_id": "a", "content": "r"}]}]})"},
  };
  // Short prompts (the tiny model prefills a few hundred tokens a second on a shared core), one in
  // 50 long.
  std::uniform_int_distribution<int> len(1, 10);
  std::uniform_int_distribution<int> out_tokens(1, kSanitized ? 3 : 8);
  const int kind = n % 10;
  if (kind == 0) {
    ++out.malformed;
    const auto& [path, body] = kMalformed[static_cast<size_t>(n / 10) % kMalformed.size()];
    Result<HttpResponse> r = client.Post(path, body);
    if (r.ok() && r->status >= 400 && r->status < 500) {
      ++out.malformed_4xx;
    } else {
      out.Fail("malformed " + path + " got " +
               (r.ok() ? std::to_string(r->status) : r.status().ToString()));
    }
    return;
  }
  std::string words;
  for (int i = n % 50 == 7 ? 60 : len(rng); i > 0; --i)
    words += "w" + std::to_string(rng() % 50) + " ";
  const int max_tokens = kind == 1 ? 200 : out_tokens(rng);
  const bool stream = kind == 1 || kind % 2 == 0;
  std::string path, body;
  switch (kind % 3) {
    case 0:
      path = "/v1/chat/completions";
      body = R"({"messages": [{"role": "user", "content": ")" + words +
             R"("}], "chat_template_kwargs": {"thinking": false}, "max_tokens": )";
      break;
    case 1:
      path = "/v1/completions";
      body = R"({"prompt": ")" + words + R"(", "max_tokens": )";
      break;
    default:
      path = "/v1/messages";
      body = R"({"messages": [{"role": "user", "content": ")" + words +
             R"("}], "thinking": {"type": "disabled"}, "max_tokens": )";
      break;
  }
  body += std::to_string(max_tokens) + R"(, "ignore_eos": true, "stream": )" +
          (stream ? "true" : "false") + "}";
  if (!stream) {
    Result<HttpResponse> r = client.Post(path, body);
    if (r.ok() && r->status == 200) {
      ++out.completed;
    } else {
      out.Fail(path + " got " +
               (r.ok() ? std::to_string(r->status) + " " + r->body : r.status().ToString()));
    }
    return;
  }
  SseReader reader;
  size_t events = 0;
  bool ended = false;
  Result<HttpResponse> r = client.PostStreaming(path, body, {}, [&](std::string_view piece) {
    reader.Push(piece);
    for (const SseMessage& e : reader.Take()) {
      ++events;
      if (e.data == "[DONE]" || e.event == "message_stop") ended = true;
    }
    return !(kind == 1 && events >= 2);  // kind 1 hangs up after two events
  });
  if (kind == 1) {
    if (r.ok() && r->cancelled) {
      ++out.disconnected;
    } else {
      out.Fail("disconnect " + path + ": " + (r.ok() ? "not cancelled" : r.status().ToString()));
    }
  } else if (r.ok() && r->status == 200 && ended) {
    ++out.completed;
    ++out.streamed;
  } else {
    out.Fail("stream " + path + ": " +
             (r.ok() ? std::to_string(r->status) : r.status().ToString()));
  }
}

TEST_F(ServeE2eTest, SoakOfMixedTrafficLeavesNoUsedBlocks) {
  Serve({"--max-num-seqs", "32", "--block-size", "16"});
  constexpr int kRequests = kSoakRequests;
  constexpr int kConcurrency = 32;
  SoakOutcome out;
  std::atomic<int> next{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kConcurrency; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(static_cast<uint32_t>(c));
      HttpClient client("127.0.0.1", server_->port(), kClientTimeout);
      for (int n = next++; n < kRequests; n = next++) SoakRequest(client, n, rng, out);
    });
  }
  for (std::thread& t : clients) t.join();
  std::printf(
      "soak: %d requests at concurrency %d: %d completed (%d streamed), %d malformed (%d "
      "got 4xx), %d disconnected mid-stream, %d failures\n",
      kRequests, kConcurrency, out.completed.load(), out.streamed.load(), out.malformed.load(),
      out.malformed_4xx.load(), out.disconnected.load(), out.failures.load());
  for (const std::string& note : out.failure_notes) ADD_FAILURE() << note;
  EXPECT_EQ(out.failures.load(), 0);
  EXPECT_EQ(out.completed + out.malformed + out.disconnected, kRequests);
  EXPECT_EQ(out.malformed_4xx.load(), out.malformed.load());
  EXPECT_GE(out.malformed * 10, kRequests);
  EXPECT_GE(out.disconnected * 10, kRequests);
  ASSERT_TRUE(server_->running()) << "the server crashed:\n" << server_->log();
  const std::string m = IdleMetrics();
  const double total = Metric(m, "dsv41_kv_blocks_total");
  EXPECT_GT(total, 0);
  EXPECT_EQ(Metric(m, "dsv41_kv_blocks_used"), 0) << m;
  EXPECT_EQ(Metric(m, "dsv41_kv_blocks_free") + Metric(m, "dsv41_kv_blocks_cached"), total) << m;
  EXPECT_GT(Metric(m, "dsv41_kv_blocks_cached"), 0) << "finished prompts stay cached";
  EXPECT_EQ(server_->Stop(SIGTERM, std::chrono::seconds(60)), 0) << server_->log();
  EXPECT_NE(server_->log().find("stats: "), std::string::npos) << "a stats line every second";
}

// The exit status of `dsv41 serve <args>` (stderr dropped).
int ServeExitCode(const std::string& args) {
  const int status =
      std::system((std::string(DSV41_BINARY) + " serve " + args + " 2>/dev/null").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(ServeE2eTest, BadUsageExitsTwoAndAMissingModelOne) {
  EXPECT_EQ(ServeExitCode(""), 2) << "no model directory";
  EXPECT_EQ(ServeExitCode(*dir_ + " --port 70000"), 2);
  EXPECT_EQ(ServeExitCode(*dir_ + " --max-queue -1"), 2);
  EXPECT_EQ(ServeExitCode(*dir_ + " --kv-profile nope"), 2);
  EXPECT_EQ(ServeExitCode(*dir_ + "/does-not-exist --port 0"), 1);
}

TEST_F(ServeE2eTest, LogprobsOfChatAndOfEchoedCompletionsAreConsistent) {
  Serve();
  // Greedy: every sampled token is the top entry of its own list.
  const JsonValue chat =
      PostOk("/v1/chat/completions",
             R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                                    "temperature": 0, "ignore_eos": true, "logprobs": true,
                                    "top_logprobs": 2})");
  const JsonValue* content = JsonAt(chat, "choices.0.logprobs.content");
  ASSERT_NE(content, nullptr);
  ASSERT_EQ(content->array.size(), 5u);
  for (const JsonValue& entry : content->array) {
    ASSERT_EQ(JsonAt(entry, "top_logprobs")->array.size(), 2u);
    EXPECT_EQ(JsonText(entry, "top_logprobs.0.token"), JsonText(entry, "token"));
    EXPECT_EQ(JsonAt(entry, "top_logprobs.0.logprob")->float_value,
              JsonAt(entry, "logprob")->float_value);
    EXPECT_LE(JsonAt(entry, "logprob")->float_value, 0.0);
    EXPECT_FALSE(JsonAt(entry, "bytes")->array.empty());
  }
  // Echo: the prompt's 4 tokens (the first without a value) and then the 3 generated ones.
  const JsonValue done = PostOk("/v1/completions",
                                R"({"prompt": [40, 41, 42, 43], "max_tokens": 3, "echo": true,
                                    "logprobs": 2, "temperature": 0, "ignore_eos": true})");
  const JsonValue& lp = *JsonAt(done, "choices.0.logprobs");
  ASSERT_EQ(JsonAt(lp, "tokens")->array.size(), 7u) << FormatJson(lp);
  EXPECT_TRUE(JsonAt(lp, "token_logprobs.0")->is_null());
  EXPECT_TRUE(JsonAt(lp, "top_logprobs.0")->is_null());
  int64_t last_offset = -1;
  for (size_t i = 0; i < 7; ++i) {
    const int64_t offset = JsonInteger(lp, "text_offset." + std::to_string(i)).value_or(-1);
    EXPECT_GE(offset, last_offset);
    last_offset = offset;
    if (i == 0) continue;
    const double value = JsonAt(lp, "token_logprobs." + std::to_string(i))->float_value;
    EXPECT_LE(value, 0.0);
    const JsonValue& top = *JsonAt(lp, "top_logprobs." + std::to_string(i));
    ASSERT_FALSE(top.object.empty());
    EXPECT_LE(top.object.size(), 2u);
    double best = -1e30;
    for (const JsonMember& m : top.object) best = std::max(best, m.value.float_value);
    if (i >= 4) {
      EXPECT_NEAR(best, value, 1e-6) << "a greedy token is its position's best";
    } else {
      EXPECT_LE(value, best + 1e-6) << "a prompt token is at most its position's best";
    }
  }
  const JsonValue prompt_text = PostOk("/detokenize", R"({"tokens": [40, 41, 42, 43]})");
  EXPECT_TRUE(JsonText(done, "choices.0.text").starts_with(JsonText(prompt_text, "prompt")));
}

TEST_F(ServeE2eTest, BenchServeReportsEveryConcurrencyLevel) {
  Serve({"--block-size", "16"});
  const std::string command =
      std::string(DSV41_BINARY) + " bench serve --port " + std::to_string(server_->port()) +
      (kSanitized ? " --num-prompts 6 --input-len 8" : " --num-prompts 12 --input-len 20") +
      " --concurrency 1,3 --output-len 4 "
      "--multi-turn-ratio 1 --turns 3 --json";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  ASSERT_EQ(pclose(pipe), 0) << out;
  std::vector<JsonValue> levels;
  for (size_t start = 0, end; (end = out.find('\n', start)) != std::string::npos; start = end + 1) {
    levels.push_back(Parse(out.substr(start, end - start)));
  }
  ASSERT_EQ(levels.size(), 2u) << out;
  for (size_t i = 0; i < levels.size(); ++i) {
    const JsonValue& l = levels[i];
    EXPECT_EQ(JsonInteger(l, "concurrency"), i == 0 ? 1 : 3);
    EXPECT_EQ(JsonInteger(l, "num_requests"), kSanitized ? 6 : 12);
    EXPECT_EQ(JsonInteger(l, "num_failed"), 0);
    ASSERT_NE(JsonAt(l, "mean_output_tokens"), nullptr);
    EXPECT_EQ(JsonAt(l, "mean_output_tokens")->float_value, 4.0);  // ignore_eos: exactly 4
    // Every request is a turn of a 3-turn conversation: turns 2 and 3 re-send the history.
    EXPECT_GT(JsonInteger(l, "cached_prompt_tokens").value_or(0), 0);
    for (const char* key :
         {"ttft_ms.p50", "ttft_ms.p90", "ttft_ms.p99", "tpot_ms.p50", "itl_ms.p99", "e2e_ms.p50",
          "request_throughput", "output_throughput"}) {
      EXPECT_NE(JsonAt(l, key), nullptr) << key;
    }
  }
}

TEST_F(ServeE2eTest, SigtermWithAStreamInFlightAbortsItAndExitsZero) {
  Serve({"--shutdown-timeout", "0.5"});
  std::atomic<bool> first_chunk{false};
  std::string received;
  std::thread streamer([&] {
    HttpClient c = Client();
    Result<HttpResponse> r = c.PostStreaming(
        "/v1/completions",
        R"({"prompt": "go", "max_tokens": 1000, "ignore_eos": true, "stream": true})", {},
        [&](std::string_view piece) {
          received += piece;
          first_chunk = true;
          return true;
        });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
  });
  while (!first_chunk) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(server_->Stop(SIGTERM, std::chrono::seconds(60)), 0) << server_->log();
  streamer.join();
  // The stream was ended by the server: aborted (or, on a fast machine, finished) and closed.
  EXPECT_TRUE(received.find("\"finish_reason\": \"abort\"") != std::string::npos ||
              received.find("\"finish_reason\": \"length\"") != std::string::npos)
      << received.substr(received.size() > 2000 ? received.size() - 2000 : 0);
  EXPECT_NE(received.find("data: [DONE]"), std::string::npos);
  EXPECT_NE(server_->log().find("dsv41 serve: stopped"), std::string::npos);
}

// A prefill of >= 30k tokens streamed over HTTP (issue: coding agents' first prompts): the first
// event (message_start, with the prompt's size) comes at once, pings keep coming while the prompt
// is computed, and a client that hangs up mid-prefill has its request aborted and its blocks freed
// long before the prefill would have ended.
TEST_F(ServeE2eTest, LongPrefillStreamsFromTheFirstSecondAndAHangUpFreesItsBlocks) {
  const int prompt_words = kSanitized ? 2000 : 16000;  // "w3 " is two tokens or more
  Serve({"--max-num-batched-tokens", kSanitized ? "128" : "1024"});
  std::string text;
  for (int i = 0; i < prompt_words; ++i) {
    text += 'w';
    text += std::to_string(i % 97);
    text += ' ';
  }
  const std::string body = R"({"model": "tiny", "max_tokens": 8, "stream": true, "messages":
      [{"role": "user", "content": ")" +
                           text + R"("}]})";
  using Clock = std::chrono::steady_clock;
  const Clock::time_point sent = Clock::now();
  double first_event_s = -1;
  int64_t prompt_tokens = -1;
  int pings = 0;
  std::vector<double> ping_times;
  SseReader reader;
  HttpClient client = Client();
  Result<HttpResponse> r = client.PostStreaming("/v1/messages", body, {}, [&](std::string_view p) {
    reader.Push(p);
    for (const SseMessage& e : reader.Take()) {
      const double t = std::chrono::duration<double>(Clock::now() - sent).count();
      if (first_event_s < 0) first_event_s = t;
      if (e.event == "message_start") {
        prompt_tokens = JsonInteger(Parse(e.data), "message.usage.input_tokens").value_or(-1);
      }
      if (e.event == "ping") {
        ++pings;
        ping_times.push_back(t);
      }
      EXPECT_NE(e.event, "content_block_delta") << "the prefill ended before the hang-up";
    }
    return pings < 3;  // hang up during the prefill
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->cancelled);
  EXPECT_GE(prompt_tokens, kSanitized ? 4000 : 30000);
  EXPECT_GE(first_event_s, 0);
  EXPECT_LT(first_event_s, 1.0) << "message_start must not wait for the prefill";
  ASSERT_EQ(pings, 3);
  for (size_t i = 1; i < ping_times.size(); ++i) {
    EXPECT_LT(ping_times[i] - ping_times[i - 1], 5.0) << "pings every few seconds";
  }
  // The abort frees the blocks after the step in flight; the prompt was not computed to its end.
  const std::string idle = IdleMetrics();
  EXPECT_EQ(Metric(idle, "dsv41_kv_blocks_used"), 0) << idle;
  EXPECT_LT(Metric(idle, "dsv41_prompt_tokens_computed_total"), prompt_tokens) << idle;
}

// A second server on a port in use exits 1 naming the address; the first keeps serving.
TEST_F(ServeE2eTest, ASecondServerOnAPortInUseExitsOneAndTheFirstKeepsServing) {
  Serve();
  const std::string port = std::to_string(server_->port());
  const std::string log = *dir_ + "/port_in_use.log";
  const std::string command = std::string(DSV41_BINARY) + " serve " + *dir_ + " --port " + port +
                              " --served-model-name tiny 2> " + log;
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream in(log);
  const std::string message((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(message.find("address already in use"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.1:" + port), std::string::npos) << message;
  const JsonValue reply =
      PostOk("/v1/completions", R"({"prompt": "go", "max_tokens": 3, "ignore_eos": true})");
  EXPECT_EQ(JsonText(reply, "object"), "text_completion");
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// Issue 21 over HTTP on the tiny preset's tower: an image request is encoded by the engine
// (/metrics counts it and the tower's time), the same image again hits the prefix cache over its
// span and gives the same tokens, another image of the same size does not hit the span's blocks;
// a bad image is a 400 and the server serves on.
TEST_F(ServeE2eTest, ImagesAreEncodedCachedByContentAndCounted) {
  const int block = 16;
  Serve({"--block-size", std::to_string(block)});
  const auto body = [](const std::vector<uint8_t>& png) {
    // Chat mode: the span starts at position 2, in the first block; the text after it is long
    // enough that a prefix hit covers the whole span.
    return R"({"model": "tiny", "temperature": 0, "max_tokens": 6, "ignore_eos": true,)"
           R"( "chat_template_kwargs": {"thinking": false},)"
           R"( "messages": [{"role": "user", "content": [{"type": "image_url", "image_url":)"
           R"( {"url": "data:image/png;base64,)" +
           EncodeBase64(png) +
           R"("}}, {"type": "text", "text": "what is this? describe it in detail, with its)"
           R"( colours, its shapes and everything else you can see in the picture"}]}]})";
  };
  const std::vector<uint8_t> image = SmallPng(100, 60);
  PngSpec other_spec = MakePngSpec(100, 60, 2);
  std::vector<uint8_t> pixels = TestPattern(100, 60, 3, 5);
  pixels[0] ^= 1;  // one pixel of SmallPng's pattern changed
  other_spec.samples.assign(pixels.begin(), pixels.end());
  const std::vector<uint8_t> other = EncodePng(other_spec);

  const JsonValue first = PostOk("/v1/chat/completions", body(image));
  const JsonValue again = PostOk("/v1/chat/completions", body(image));
  const JsonValue changed = PostOk("/v1/chat/completions", body(other));
  const int64_t prompt = JsonInteger(first, "usage.prompt_tokens").value_or(0);
  ASSERT_GT(prompt, 34) << "the span of 34 positions is counted";
  const int64_t cached =
      JsonInteger(again, "usage.prompt_tokens_details.cached_tokens").value_or(0);
  EXPECT_GE(cached, (prompt - 1) / block * block) << "every full block of the prompt hits";
  EXPECT_EQ(FormatJson(*JsonAt(first, "choices.0.message")),
            FormatJson(*JsonAt(again, "choices.0.message")));
  // The span starts a few tokens in, inside the first block: nothing is shared.
  EXPECT_EQ(JsonInteger(changed, "usage.prompt_tokens_details.cached_tokens").value_or(-1), 0);
  const std::string metrics = IdleMetrics();
  EXPECT_EQ(Metric(metrics, "dsv41_images_encoded_total"), 2)
      << "the cached image is not re-encoded";
  EXPECT_GT(Metric(metrics, "dsv41_vision_encode_seconds_total"), 0);
  EXPECT_EQ(Metric(metrics, "dsv41_image_span_tokens_total"), 3 * 34);

  HttpClient c = Client();
  std::vector<uint8_t> truncated(image.begin(), image.begin() + image.size() / 2);
  Result<HttpResponse> bad = c.Post("/v1/chat/completions", body(truncated));
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("PNG: truncated data"), std::string::npos) << bad->body;
  PostOk("/v1/chat/completions", body(image));
}

}  // namespace
}  // namespace dsv41

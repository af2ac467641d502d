// `dsv41 serve MODEL_DIR`: the OpenAI + Anthropic HTTP server (serving.md §11). Start-up prints
// the resolved configuration, the listening address, load progress, the cache plan and a ready
// line; every --log-stats-interval seconds a stats line; SIGINT / SIGTERM stop admitting, let
// requests in flight finish for --shutdown-timeout seconds, abort the rest and exit 0.

#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/mpi_communicator.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/image_flags.h"
#include "cli/job.h"
#include "cli/progress_printer.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "server/api_common.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scripted_backend.h"
#include "text/special_tokens.h"

namespace dsv41 {
namespace {

struct ServeFlags {
  std::string model_dir;
  std::string model_flag;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> served_model_names;
  std::string api_key;
  int32_t max_queue = 256;
  size_t max_request_bytes = size_t{16} << 20;
  size_t responses_store = HttpServerOptions{}.responses_store;
  double shutdown_timeout_s = 10.0;
  double log_stats_interval_s = 10.0;
  std::string scripted_replies;
  int64_t default_max_tokens = 0;
  bool allow_local_image_files = false;
  EngineFlags engine;
  ImageFlags image_flags;
};

// SIGINT / SIGTERM, delivered to one waiting thread (blocked everywhere else, so no handler runs
// on an arbitrary thread).
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    // Before any thread exists, so every thread inherits the mask.
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not a death
    thread_ = std::thread([this] {
      int sig = 0;
      sigwait(&set_, &sig);
      std::lock_guard<std::mutex> lock(mu_);
      signal_ = sig;
      cv_.notify_all();
    });
  }
  ~SignalWaiter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (signal_ == 0) pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait
    }
    thread_.join();
  }
  bool signalled() {
    std::lock_guard<std::mutex> lock(mu_);
    return signal_ != 0;
  }
  // Waits up to `timeout`; true once a signal came.
  bool WaitFor(std::chrono::duration<double> timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return signal_ != 0; });
  }
  int signal_number() {
    std::lock_guard<std::mutex> lock(mu_);
    return signal_;
  }

 private:
  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  int signal_ = 0;
  std::thread thread_;
};

// One stats line (STYLE.md §9): throughput since the last line, requests, KV use, prefix hits.
void PrintStats(const EngineStats& now, const EngineStats& before, double seconds) {
  // Prompt tokens as their chunks are computed, so a long prefill shows its rate as it runs.
  const double prompt =
      static_cast<double>(now.prompt_tokens_computed - before.prompt_tokens_computed) / seconds;
  const double generation =
      static_cast<double>(now.generation_tokens - before.generation_tokens) / seconds;
  const uint32_t used = now.total_blocks - now.free_blocks;
  const uint64_t queried = now.prefix_queried_tokens - before.prefix_queried_tokens;
  const uint64_t hit = now.prefix_hit_tokens - before.prefix_hit_tokens;
  std::fprintf(stderr,
               "stats: prompt %.1f tok/s, generation %.1f tok/s, running %d, waiting %d, kv %u/%u "
               "blocks used (%.1f%%), %u cached, prefix hit %.1f%%\n",
               prompt, generation, now.running, now.waiting, used, now.total_blocks,
               now.total_blocks ? 100.0 * used / now.total_blocks : 0.0, now.cached_blocks,
               queried ? 100.0 * static_cast<double>(hit) / static_cast<double>(queried) : 0.0);
}

// The resolved configuration, the first line `dsv41 serve` prints.
void PrintServeConfig(const ServeFlags& flags, const std::string& dir, const EngineOptions& options,
                      int threads, int http_threads) {
  std::fprintf(stderr,
               "dsv41 serve: model %s, served as '%s', host %s, port %d, api key %s, max-queue "
               "%d, max-request-bytes %zu, %d compute threads, http threads on demand up to %d, "
               "max-num-seqs %d, "
               "max-num-batched-tokens %d, max-model-len %lld\n",
               dir.c_str(), flags.served_model_names.front().c_str(), flags.host.c_str(),
               flags.port, flags.api_key.empty() ? "off" : "on", flags.max_queue,
               flags.max_request_bytes, threads, http_threads, options.max_num_seqs,
               options.max_num_batched_tokens, static_cast<long long>(options.max_model_len));
}

// A stats line every `interval_s` seconds while something happens, until SIGINT / SIGTERM.
void PrintStatsUntilSignalled(SignalWaiter& signals, const ServerMetrics& metrics,
                              double interval_s) {
  EngineStats last = metrics.engine_stats();
  auto last_time = std::chrono::steady_clock::now();
  const double interval = interval_s > 0 ? interval_s : 3600.0;
  while (!signals.WaitFor(std::chrono::duration<double>(interval))) {
    if (interval_s <= 0) continue;
    const auto now_time = std::chrono::steady_clock::now();
    const EngineStats now = metrics.engine_stats();
    const bool idle = now.running == 0 && now.waiting == 0 && now.num_steps == last.num_steps;
    if (idle) continue;  // nothing happened since the last line
    PrintStats(now, last, std::chrono::duration<double>(now_time - last_time).count());
    last = now;
    last_time = now_time;
  }
}

// What the engine loop drives: the engine, or scripted replies (--scripted-replies).
struct ServingBackend {
  std::unique_ptr<Engine> engine;  // null when scripted
  std::unique_ptr<GenerationBackend> backend;
  int64_t max_model_len = 0;
};

// The engine over the loaded model (its weights prefaulted and Engram storage open), on the ranks
// of `comm`.
Result<ServingBackend> StartEngine(LoadedTextModel& model, const EngineOptions& options,
                                   ThreadPool& pool, Communicator& comm) {
  ServingBackend out;
  DSV41_ASSIGN_OR_RETURN(out.engine, Engine::Create(model, options, pool, comm));
  PrintEngineLayout(*out.engine, options);
  out.backend = std::make_unique<EngineBackend>(*out.engine);
  out.max_model_len = out.engine->layout().max_request_tokens;
  return out;
}

// The model's tokenizer and chat format, with replies from a file instead of its forward: a
// client (a coding agent under test) is driven through a scripted session.
Result<ServingBackend> StartScripted(const LoadedTextModel& model, const EngineOptions& options,
                                     const std::string& replies_path) {
  DSV41_ASSIGN_OR_RETURN(std::vector<ScriptedBackend::Reply> replies,
                         ScriptedBackend::LoadReplies(replies_path, *model.tokenizer));
  ServingBackend out;
  out.max_model_len = model.config().max_position_embeddings;
  if (options.max_model_len > 0)
    out.max_model_len = std::min(out.max_model_len, options.max_model_len);
  std::fprintf(stderr,
               "dsv41 serve: scripted replies from %s (%zu replies; the model's weights are not "
               "used), max context %lld tokens\n",
               replies_path.c_str(), replies.size(), static_cast<long long>(out.max_model_len));
  out.backend = std::make_unique<ScriptedBackend>(std::move(replies), *model.tokenizer,
                                                  replies_path, /*num_blocks=*/1024);
  return out;
}

// Binds the listening socket and starts the HTTP threads (/health answers 503 until SetReady).
Result<std::unique_ptr<HttpServer>> StartHttpServer(const ServeFlags& flags, int http_threads,
                                                    ServerMetrics& metrics) {
  HttpServerOptions http{.host = flags.host,
                         .port = flags.port,
                         .api_key = flags.api_key,
                         .max_request_bytes = flags.max_request_bytes,
                         .max_threads = http_threads,
                         .responses_store = flags.responses_store};
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> server, HttpServer::Bind(http, metrics));
  DSV41_RETURN_IF_ERROR(server->Start());
  return server;
}

// What the API layer tells clients about the model: names, context length, vocabulary. Images
// only in one process: under mpirun the other ranks cannot receive a request's image rows yet
// (docs/multinode.md), so the deployment is text-only there.
ServedModel DescribeServedModel(const LoadedTextModel& model, const ServeFlags& flags,
                                int64_t max_model_len, bool distributed) {
  ServedModel served;
  served.tokenizer = model.tokenizer.get();
  served.names = flags.served_model_names;
  served.max_model_len = max_model_len;
  served.default_max_tokens = flags.default_max_tokens;
  served.vocab_size = model.config().vocab_size;
  served.think_close_id = model.tokenizer->IdOf(kThinkClose).value_or(-1);
  served.created = UnixSeconds();
  if (model.vision != nullptr && distributed) {
    std::fprintf(stderr, "dsv41 serve: image input off under mpirun (docs/multinode.md)\n");
  }
  if (model.vision != nullptr && !distributed) {
    served.images.enabled = true;
    served.images.image_token_id = model.config().image_token_id;
    served.images.plan = model.vision->config().plan_params();
    served.images.max_pixels = flags.image_flags.max_image_pixels;
    served.images.allow_local_files = flags.allow_local_image_files;
  }
  return served;
}

// Loads this rank's model (LoadRankModel), drawing its progress on stderr and publishing it on
// /health; a signal cancels the load.
Result<RankModel> LoadServedModel(Job& job, const std::string& dir, const EngineFlags& flags,
                                  const EngineOptions& options, HttpServer& server,
                                  SignalWaiter& signals) {
  ProgressPrinter printer;
  ProgressFn draw = printer.AsFn();
  Result<RankModel> model =
      LoadRankModel(job, "dsv41 serve", dir, flags, options, [&](const Progress& p) {
        server.SetLoadProgress(p);
        return draw(p) && !signals.signalled();
      });
  printer.Done();
  return model;
}

// Ranks other than 0 of `mpirun -np N dsv41 serve`: no HTTP, no signals of their own (SIGINT and
// SIGTERM stay blocked: rank 0 ends them once its requests are done, or mpirun does); they load
// their share of the model and follow rank 0's engine.
int FollowServingRank(Job& job, const std::string& dir, const EngineFlags& flags,
                      const EngineOptions& options) {
  Result<RankModel> rank = LoadRankModel(job, "dsv41 serve", dir, flags, options);
  if (!rank.ok()) return 1;  // the fingerprints differ: rank 0 says so
  return job.Follow("dsv41 serve", rank->model, *rank->pool);
}

// After signal `signal_number`: no new requests, those in flight get `shutdown_timeout_s` to
// finish and are aborted after, then the server stops.
void StopServing(int signal_number, double shutdown_timeout_s, EngineLoop& loop,
                 HttpServer& server) {
  std::fprintf(stderr,
               "dsv41 serve: signal %d: stopping (no new requests; %d in flight get %.0f s to "
               "finish, then are aborted)\n",
               signal_number, loop.num_live(), shutdown_timeout_s);
  server.SetShuttingDown();
  loop.Shutdown(std::chrono::milliseconds(static_cast<int64_t>(shutdown_timeout_s * 1000)));
  // Every request has its last output now; let the HTTP threads write it (bounded, for clients
  // that stopped reading).
  server.WaitIdle(std::chrono::seconds(5));
  server.Stop();
  std::fprintf(stderr, "dsv41 serve: stopped\n");
}

int RunServe(ServeFlags flags) {
  const std::string dir = flags.model_flag.empty() ? flags.model_dir : flags.model_flag;
  if (dir.empty()) {
    std::fprintf(stderr, "dsv41 serve: MODEL_DIR (or --model DIR) is required\n");
    return 2;
  }
  Result<EngineOptions> options = ToEngineOptions(flags.engine);
  if (!options.ok()) {
    std::fprintf(stderr, "dsv41 serve: %s\n", options.status().ToString().c_str());
    return 2;
  }
  if (flags.max_queue < 0 || flags.max_request_bytes == 0 || flags.port < 0 || flags.port > 65535 ||
      flags.default_max_tokens < 0) {
    std::fprintf(stderr,
                 "dsv41 serve: --max-queue, --max-request-bytes, --port or --default-max-tokens "
                 "out of range\n");
    return 2;
  }
  if (flags.served_model_names.empty()) flags.served_model_names.push_back(dir);
  if (LaunchedByMpiLauncher() && !flags.scripted_replies.empty()) {
    std::fprintf(stderr, "dsv41 serve: --scripted-replies runs in one process, not under mpirun\n");
    return 2;
  }
  const int threads = ComputeThreads(flags.engine);
  const int http_threads = HttpServerOptions{}.max_threads;
  // Before any thread starts (MPI's included), so that every thread inherits its signal mask.
  SignalWaiter signals;
  Result<std::unique_ptr<Job>> job = Job::Start(flags.engine);
  if (!job.ok()) {
    std::fprintf(stderr, "dsv41 serve: %s\n", job.status().ToString().c_str());
    return 1;
  }
  if (!(*job)->leads()) return FollowServingRank(**job, dir, flags.engine, *options);
  PrintServeConfig(flags, dir, *options, threads, http_threads);
  if ((*job)->distributed()) {
    std::fprintf(stderr, "dsv41 serve: rank 0 of %d (routed experts and Engram rows split)\n",
                 (*job)->shard().num_ranks);
  }
  ServerMetrics metrics;
  Result<std::unique_ptr<HttpServer>> server = StartHttpServer(flags, http_threads, metrics);
  if (!server.ok()) return (*job)->Fail("dsv41 serve", server.status(), 1);
  const std::string address = StrFormat("http://%s:%d", flags.host.c_str(), (*server)->port());
  std::fprintf(stderr, "dsv41 serve: listening on %s (loading: /health is 503 until ready)\n",
               address.c_str());

  EngineFlags load_flags = flags.engine;
  load_flags.no_prefault |= !flags.scripted_replies.empty();  // scripted replies use no weight
  Result<RankModel> model = LoadServedModel(**job, dir, load_flags, *options, **server, signals);
  if (!model.ok()) {
    if (signals.signalled()) {
      std::fprintf(stderr, "dsv41 serve: stopped while loading\n");
      return 0;
    }
    std::fprintf(stderr, "dsv41 serve: %s\n", model.status().ToString().c_str());
    return 1;
  }
  Result<ServingBackend> backend =
      flags.scripted_replies.empty()
          ? StartEngine(model->model, *options, *model->pool, (*job)->comm())
          : StartScripted(model->model, *options, flags.scripted_replies);
  if (!backend.ok()) {
    std::fprintf(stderr, "dsv41 serve: %s\n", backend.status().ToString().c_str());
    return backend.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }

  const ServedModel served = DescribeServedModel(model->model, flags, backend->max_model_len, (*job)->distributed());
  EngineLoop loop(*backend->backend, metrics,
                  EngineLoopOptions{.max_live_requests = options->max_num_seqs + flags.max_queue});
  loop.Start();
  (*server)->SetReady(served, loop);
  std::fprintf(stderr, "dsv41 serve: ready: serving '%s' on %s (max context %lld tokens)\n",
               served.names.front().c_str(), address.c_str(),
               static_cast<long long>(served.max_model_len));

  PrintStatsUntilSignalled(signals, metrics, flags.log_stats_interval_s);
  StopServing(signals.signal_number(), flags.shutdown_timeout_s, loop, **server);
  return 0;
}

std::function<int()> SetupServe(CLI::App& sub) {
  auto flags = std::make_shared<ServeFlags>();
  sub.add_option("model_dir", flags->model_dir, "model directory");
  sub.add_option("-m,--model", flags->model_flag, "model directory (instead of MODEL_DIR)");
  sub.add_option("--host", flags->host, "address to listen on")->capture_default_str();
  sub.add_option("--port", flags->port, "TCP port (0: any free port)")->capture_default_str();
  sub.add_option("--served-model-name", flags->served_model_names,
                 "model name(s) clients use (default: the model directory)");
  sub.add_option("--api-key", flags->api_key,
                 "require 'Authorization: Bearer KEY' (or x-api-key on /v1/messages)");
  sub.add_option("--max-queue", flags->max_queue,
                 "requests that may wait beyond --max-num-seqs; more get 429 (Anthropic 529)")
      ->capture_default_str();
  sub.add_option("--max-request-bytes", flags->max_request_bytes,
                 "largest request body; larger get 413")
      ->capture_default_str();
  sub.add_option("--responses-store", flags->responses_store,
                 "responses of /v1/responses kept for GET, DELETE and previous_response_id "
                 "(least recently used dropped beyond; 0: none)")
      ->capture_default_str();
  sub.add_option("--default-max-tokens", flags->default_max_tokens,
                 "output tokens of a chat or Responses request that sets no max_tokens / "
                 "max_output_tokens (0: what the context leaves)")
      ->capture_default_str();
  sub.add_option("--scripted-replies", flags->scripted_replies,
                 "answer from this JSON file of replies chosen by what the prompt contains "
                 "({\"replies\": [{\"when_prompt_contains\": [...], \"text\": ...}]}) "
                 "instead of the model's forward: drives a client through a scripted session")
      ->check(CLI::ExistingFile);
  sub.add_option("--shutdown-timeout", flags->shutdown_timeout_s,
                 "seconds requests in flight get to finish after SIGINT/SIGTERM")
      ->capture_default_str();
  sub.add_option("--log-stats-interval", flags->log_stats_interval_s,
                 "seconds between stats lines on stderr (0: none)")
      ->capture_default_str();
  sub.add_flag("--allow-local-image-files", flags->allow_local_image_files,
               "accept file:// image URLs (absolute paths on this machine); http(s) URLs are never "
               "fetched");
  AddEngineFlags(sub, flags->engine);
  AddImageFlags(sub, flags->image_flags);
  return [flags] { return RunServe(*flags); };
}

DSV41_REGISTER_COMMAND(kServeCommand, "serve", "OpenAI + Anthropic HTTP server", SetupServe);

}  // namespace
}  // namespace dsv41

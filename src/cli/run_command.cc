// `dsv41 run`: generates text from a prompt with the built-in forward, one request, greedy or
// seeded sampling, streaming the decoded text to stdout; prefill and decode speed on stderr.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/text_session.h"

namespace dsv41 {
namespace {

struct RunFlags {
  std::string model_dir;
  std::string prompt;
  int32_t max_tokens = 64;
  double temperature = 0.0;
  double top_p = 1.0;
  int32_t top_k = 0;
  uint64_t seed = 0;
  int32_t chunk = 0;
  int threads = 0;
};

// The next token from `logits`: argmax (lowest id on ties) when temperature <= 0; otherwise a draw
// from softmax(logits / temperature) restricted to the top_k ids (0: all) and then to the smallest
// prefix of them, by descending probability, whose mass reaches top_p.
int32_t SampleToken(const std::vector<float>& logits, const RunFlags& flags, std::mt19937_64& rng) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  if (flags.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const int32_t k = flags.top_k > 0 ? std::min(flags.top_k, vocab) : vocab;
  std::vector<double> probs(k);
  const double top = logits[order[0]];
  double total = 0;
  for (int32_t i = 0; i < k; ++i) {
    probs[i] = std::exp((logits[order[i]] - top) / flags.temperature);
    total += probs[i];
  }
  int32_t keep = k;
  if (flags.top_p < 1.0) {
    double mass = 0;
    for (int32_t i = 0; i < k; ++i) {
      mass += probs[i] / total;
      if (mass >= flags.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  std::discrete_distribution<int32_t> pick(probs.begin(), probs.begin() + keep);
  return order[pick(rng)];
}

int RunRun(const RunFlags& flags) {
  if (flags.max_tokens < 0 || flags.top_p <= 0 || flags.top_p > 1 || flags.top_k < 0) {
    std::fprintf(stderr, "dsv41 run: want --max-tokens >= 0, --top-p in (0, 1], --top-k >= 0\n");
    return 2;
  }
  Result<LoadedTextModel> m = LoadedTextModel::Load(flags.model_dir);
  if (!m.ok()) {
    std::fprintf(stderr, "dsv41 run: %s\n", m.status().ToString().c_str());
    return 1;
  }
  Result<std::vector<int32_t>> prompt = m->tokenizer->Encode(flags.prompt);
  if (!prompt.ok()) {
    std::fprintf(stderr, "dsv41 run: %s\n", prompt.status().ToString().c_str());
    return 1;
  }
  if (prompt->empty()) {
    std::fprintf(stderr, "dsv41 run: the prompt encodes to no tokens\n");
    return 2;
  }
  const int32_t eos =
      m->tokenizer->IdOf("<｜end▁of▁sentence｜>").value_or(m->weights->config().eos_token_id);
  ThreadPool pool(flags.threads > 0 ? flags.threads
                                    : std::max(1u, std::thread::hardware_concurrency()));
  std::mt19937_64 rng(flags.seed);
  TextRequest request(*m);
  StreamingDetokenizer detokenizer(*m->tokenizer);
  using Clock = std::chrono::steady_clock;

  const Clock::time_point prefill_start = Clock::now();
  Result<std::vector<float>> logits = request.Feed(*prompt, flags.chunk, false, &pool);
  const double prefill_s = std::chrono::duration<double>(Clock::now() - prefill_start).count();
  if (!logits.ok()) {
    std::fprintf(stderr, "dsv41 run: %s\n", logits.status().ToString().c_str());
    return 1;
  }
  int32_t generated = 0;
  const Clock::time_point decode_start = Clock::now();
  while (generated < flags.max_tokens) {
    const int32_t next = SampleToken(*logits, flags, rng);
    ++generated;
    if (next == eos) break;
    std::fputs(detokenizer.Push(next).c_str(), stdout);
    std::fflush(stdout);
    if (generated == flags.max_tokens) break;
    logits = request.Feed({next}, 0, false, &pool);
    if (!logits.ok()) {
      std::fprintf(stderr, "\ndsv41 run: %s\n", logits.status().ToString().c_str());
      return 1;
    }
  }
  std::fputs(detokenizer.Finish().c_str(), stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);  // the text ends before the stats line on stderr
  const double decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  std::fprintf(stderr,
               "prefill: %zu tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s "
               "(%.1f tok/s)\n",
               prompt->size(), prefill_s, prompt->size() / std::max(prefill_s, 1e-9), generated,
               decode_s, generated / std::max(decode_s, 1e-9));
  return 0;
}

std::function<int()> SetupRun(CLI::App& sub) {
  auto flags = std::make_shared<RunFlags>();
  sub.add_option("-m,--model", flags->model_dir, "model directory")->required();
  sub.add_option("-p,--prompt", flags->prompt, "prompt text (no chat template)")->required();
  sub.add_option("-n,--max-tokens", flags->max_tokens, "tokens to generate at most")
      ->capture_default_str();
  sub.add_option("--temperature", flags->temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  sub.add_option("--top-p", flags->top_p, "nucleus sampling mass")->capture_default_str();
  sub.add_option("--top-k", flags->top_k, "sample among the K most likely tokens (0: all)")
      ->capture_default_str();
  sub.add_option("-s,--seed", flags->seed, "sampling seed")->capture_default_str();
  sub.add_option("--chunk", flags->chunk, "prefill chunk size in tokens (0: one chunk)")
      ->capture_default_str();
  sub.add_option("-t,--threads", flags->threads, "compute threads (0: all cores)")
      ->capture_default_str();
  return [flags] { return RunRun(*flags); };
}

DSV41_REGISTER_COMMAND(kRunCommand, "run", "generate text from a prompt", SetupRun);

}  // namespace
}  // namespace dsv41

// `dsv41 bench`: the baseline speed of the whole text forward on one request — time to first
// token, prefill and decode tokens/s (medians over repetitions) — and the decode step's weight
// read rate against the machine's measured read bandwidth (STYLE.md §12). Figures on stdout.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/machine_limits.h"
#include "cli/command.h"
#include "cli/text_session.h"
#include "model/tensor_inventory.h"
#include "model/weight_summary.h"

namespace dsv41 {
namespace {

struct BenchFlags {
  std::string model_dir;
  int32_t prompt_tokens = 128;
  int32_t decode_tokens = 32;
  int32_t repetitions = 5;
  int threads = 0;
};

// Bytes of weights one decode token reads, by kind. Every tensor of the loaded text model
// (no DSpark) counts whole, except: the embedding (one row), the routed experts (k of each MoE
// layer's n experts: the approximation k × one expert's bytes, since the forward does not report
// its routing) and the Engram tables (n_hash_cols rows of each Engram layer's table).
struct DecodeWeightBytes {
  std::array<uint64_t, kNumWeightKinds> by_kind{};
  uint64_t total = 0;
};

DecodeWeightBytes ComputeDecodeWeightBytes(const ModelConfig& config,
                                           const std::vector<TensorSpec>& tensors) {
  DecodeWeightBytes out;
  uint64_t routed = 0;
  for (const TensorSpec& t : tensors) {
    const WeightKind kind = ClassifyTensor(t.name);
    const uint64_t bytes = TensorBytes(t);
    const uint64_t rows =
        t.shape.empty() ? 1 : static_cast<uint64_t>(std::max<int64_t>(1, t.shape[0]));
    uint64_t read = bytes;
    if (kind == WeightKind::kDspark) {
      read = 0;
    } else if (t.name == "embed.weight") {
      read = bytes / rows;
    } else if (kind == WeightKind::kRoutedExperts) {
      routed += bytes;
      continue;
    } else if (kind == WeightKind::kEngramTables) {
      read = bytes / rows * static_cast<uint64_t>(config.n_hash_cols());
    }
    out.by_kind[static_cast<size_t>(kind)] += read;
  }
  if (config.n_routed_experts > 0) {
    out.by_kind[static_cast<size_t>(WeightKind::kRoutedExperts)] =
        routed / static_cast<uint64_t>(config.n_routed_experts) *
        static_cast<uint64_t>(config.num_experts_per_tok);
  }
  for (uint64_t b : out.by_kind) out.total += b;
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct RepetitionTimes {
  double prefill_s = 0;
  double decode_s = 0;
};

// One request from empty caches: the prompt in one chunk, then greedy decode token by token.
Result<RepetitionTimes> RunOnce(const LoadedTextModel& m, const std::vector<int32_t>& prompt,
                                int32_t decode_tokens, ThreadPool& pool) {
  using Clock = std::chrono::steady_clock;
  RepetitionTimes times;
  TextRequest request(m);
  const Clock::time_point prefill_start = Clock::now();
  DSV41_ASSIGN_OR_RETURN(std::vector<float> logits, request.Feed(prompt, 0, false, &pool));
  int32_t next = Argmax(logits);  // the first token is part of the time to first token
  times.prefill_s = std::chrono::duration<double>(Clock::now() - prefill_start).count();
  const Clock::time_point decode_start = Clock::now();
  for (int32_t i = 0; i < decode_tokens; ++i) {
    DSV41_ASSIGN_OR_RETURN(logits, request.Feed({next}, 0, false, &pool));
    next = Argmax(logits);
  }
  times.decode_s = std::chrono::duration<double>(Clock::now() - decode_start).count();
  return times;
}

int RunBench(const BenchFlags& flags) {
  if (flags.prompt_tokens < 1 || flags.decode_tokens < 1 || flags.repetitions < 1 ||
      flags.threads < 0) {
    std::fprintf(stderr,
                 "dsv41 bench: want --prompt-tokens >= 1, --decode-tokens >= 1, "
                 "--repetitions >= 1, -t >= 0\n");
    return 2;
  }
  Result<LoadedTextModel> m = LoadedTextModel::Load(flags.model_dir);
  if (!m.ok()) {
    std::fprintf(stderr, "dsv41 bench: %s\n", m.status().ToString().c_str());
    return 1;
  }
  const ModelConfig& config = m->weights->config();
  const int64_t positions = int64_t{flags.prompt_tokens} + flags.decode_tokens;
  if (positions > config.max_position_embeddings) {
    std::fprintf(stderr, "dsv41 bench: %lld positions exceed max_position_embeddings %lld\n",
                 static_cast<long long>(positions),
                 static_cast<long long>(config.max_position_embeddings));
    return 2;
  }
  // A fixed synthetic prompt: ids spread over the vocabulary (the speed does not depend on them).
  std::vector<int32_t> prompt(flags.prompt_tokens);
  for (int32_t i = 0; i < flags.prompt_tokens; ++i) {
    prompt[i] = static_cast<int32_t>((int64_t{i} * 7919 + 1000) % config.vocab_size);
  }
  const int threads = flags.threads > 0
                          ? flags.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads);

  std::vector<double> ttft_s;
  std::vector<double> prefill_tps;
  std::vector<double> decode_tps;
  std::vector<double> decode_s_per_token;
  for (int32_t r = 0; r < flags.repetitions; ++r) {
    Result<RepetitionTimes> times = RunOnce(*m, prompt, flags.decode_tokens, pool);
    if (!times.ok()) {
      std::fprintf(stderr, "dsv41 bench: %s\n", times.status().ToString().c_str());
      return 1;
    }
    const double prefill_s = std::max(times->prefill_s, 1e-9);
    const double decode_s = std::max(times->decode_s, 1e-9);
    ttft_s.push_back(prefill_s);
    prefill_tps.push_back(flags.prompt_tokens / prefill_s);
    decode_tps.push_back(flags.decode_tokens / decode_s);
    decode_s_per_token.push_back(decode_s / flags.decode_tokens);
    std::fprintf(stderr, "repetition %d/%d: ttft %.1f ms, decode %.2f tok/s\n", r + 1,
                 flags.repetitions, prefill_s * 1e3, flags.decode_tokens / decode_s);
  }
  const MachineLimits limits = MeasureMachineLimits(pool);
  const DecodeWeightBytes weight = ComputeDecodeWeightBytes(config, m->weights->expected());
  const double s_per_token = Median(decode_s_per_token);
  const double weight_read_bps = static_cast<double>(weight.total) / s_per_token;
  const double ratio =
      limits.read_bytes_per_second > 0 ? weight_read_bps / limits.read_bytes_per_second : 0.0;

  std::printf("dsv41 bench (medians of %d repetitions)\n", flags.repetitions);
  std::printf("  %-32s %s\n", "model", flags.model_dir.c_str());
  std::printf("  %-32s %d\n", "threads", threads);
  std::printf("  %-32s %d\n", "prompt_tokens", flags.prompt_tokens);
  std::printf("  %-32s %d\n", "decode_tokens", flags.decode_tokens);
  std::printf("  %-32s %d\n", "repetitions", flags.repetitions);
  std::printf("  %-32s %.3f\n", "time_to_first_token_ms", Median(ttft_s) * 1e3);
  std::printf("  %-32s %.2f\n", "prefill_tokens_per_s", Median(prefill_tps));
  std::printf("  %-32s %.2f\n", "decode_tokens_per_s", Median(decode_tps));
  std::printf("  %-32s %.3f\n", "decode_ms_per_token", s_per_token * 1e3);
  std::printf("  %-32s %llu (%.2f MiB)\n", "weight_bytes_per_decode_token",
              static_cast<unsigned long long>(weight.total),
              static_cast<double>(weight.total) / (1 << 20));
  for (int k = 0; k < kNumWeightKinds; ++k) {
    if (weight.by_kind[k] == 0) continue;
    const std::string_view name = WeightKindName(static_cast<WeightKind>(k));
    std::printf("    %-30.*s %llu\n", static_cast<int>(name.size()), name.data(),
                static_cast<unsigned long long>(weight.by_kind[k]));
  }
  std::printf("  %-32s %.3f\n", "decode_weight_read_gb_per_s", weight_read_bps / 1e9);
  std::printf("  %-32s %.3f\n", "machine_read_gb_per_s", limits.read_bytes_per_second / 1e9);
  std::printf("  %-32s %.4f\n", "read_bandwidth_ratio", ratio);
  return 0;
}

std::function<int()> SetupBench(CLI::App& sub) {
  auto flags = std::make_shared<BenchFlags>();
  sub.add_option("-m,--model", flags->model_dir, "model directory")->required();
  sub.add_option("--prompt-tokens", flags->prompt_tokens, "prompt length (one prefill chunk)")
      ->capture_default_str();
  sub.add_option("--decode-tokens", flags->decode_tokens, "greedy decode steps after the prompt")
      ->capture_default_str();
  sub.add_option("-r,--repetitions", flags->repetitions, "runs of prompt + decode (medians)")
      ->capture_default_str();
  sub.add_option("-t,--threads", flags->threads, "compute threads (0: all cores)")
      ->capture_default_str();
  return [flags] { return RunBench(*flags); };
}

DSV41_REGISTER_COMMAND(kBenchCommand, "bench",
                       "measure time to first token, prefill and decode speed", SetupBench);

}  // namespace
}  // namespace dsv41

// `dsv41 run`: generates text from a prompt through the engine (paged KV cache, scheduler,
// sampler), greedy or seeded sampling, streaming the decoded text to stdout; prefill and decode
// speed (and with --speculative the draft acceptance) on stderr.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/image_flags.h"
#include "cli/job.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "engine/output_processor.h"

namespace dsv41 {
namespace {

struct RunFlags {
  std::string model_dir;
  std::string prompt;
  SamplingParams params;
  std::vector<std::string> stop;
  int32_t chunk = 0;
  std::vector<std::string> images;
  EngineFlags engine;
  ImageFlags image_flags;
};

int RunRun(RunFlags flags) {
  flags.params.stop = flags.stop;
  if (flags.chunk > 0) flags.engine.max_num_batched_tokens = flags.chunk;
  Result<EngineOptions> options = ToEngineOptions(flags.engine);
  if (!options.ok()) {
    std::fprintf(stderr, "dsv41 run: %s\n", options.status().ToString().c_str());
    return 2;
  }
  Result<std::unique_ptr<Job>> job = Job::Start(flags.engine);
  if (!job.ok()) {
    std::fprintf(stderr, "dsv41 run: %s\n", job.status().ToString().c_str());
    return 1;
  }
  Result<RankModel> rank =
      LoadRankModel(**job, "dsv41 run", flags.model_dir, flags.engine, *options);
  if (!rank.ok()) {
    if ((*job)->leads()) std::fprintf(stderr, "dsv41 run: %s\n", rank.status().ToString().c_str());
    return 1;
  }
  if (!(*job)->leads()) return (*job)->Follow("dsv41 run", rank->model, *rank->pool);
  const LoadedTextModel* m = &rank->model;
  Result<std::vector<int32_t>> prompt = m->tokenizer->Encode(flags.prompt);
  // One <｜deepseek_image｜> of the prompt per --image, in order, expanded to its span.
  Result<ImageFilePrompt> with_images =
      prompt.ok() ? AttachImageFiles(*m, flags.images, {}, flags.image_flags, *prompt)
                  : Result<ImageFilePrompt>(prompt.status());
  if (!with_images.ok()) {
    std::fprintf(stderr, "dsv41 run: %s\n", with_images.status().ToString().c_str());
    return 1;
  }
  prompt = std::move(with_images->expanded.ids);
  Result<std::unique_ptr<Engine>> engine =
      Engine::Create(*m, *options, *rank->pool, (*job)->comm());
  if (!engine.ok()) {
    std::fprintf(stderr, "dsv41 run: %s\n", engine.status().ToString().c_str());
    return 2;
  }
  PrintEngineLayout(**engine, *options);
  const int32_t prompt_tokens = static_cast<int32_t>(prompt->size());
  Result<uint64_t> id =
      (*engine)->AddRequest(std::move(prompt).value(), flags.params,
                            AddRequestOptions{.images = std::move(with_images->images)});
  if (!id.ok()) {
    std::fprintf(stderr, "dsv41 run: %s\n", id.status().ToString().c_str());
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point first_token;
  int32_t generated = 0;
  OutputProcessor processor(TextProcessorOptions(*m->tokenizer, flags.params));
  while ((*engine)->HasUnfinished()) {
    Result<std::vector<RequestOutput>> outputs = (*engine)->Step();
    if (!outputs.ok()) {
      std::fprintf(stderr, "\ndsv41 run: %s\n", outputs.status().ToString().c_str());
      return 1;
    }
    for (const RequestOutput& out : *outputs) {
      if (generated == 0 && !out.new_token_ids.empty()) first_token = Clock::now();
      const ProcessedOutput processed = processor.Push(out);
      generated += static_cast<int32_t>(processed.token_ids.size());
      for (const OutputDelta& delta : processed.deltas) std::fputs(delta.text.c_str(), stdout);
      std::fflush(stdout);
      if (processor.finish() == FinishReason::kError) {
        std::fprintf(stderr, "\ndsv41 run: %s\n", processor.error().c_str());
        return 1;
      }
      if (processor.needs_abort()) {
        const Status aborted = (*engine)->Abort(out.request_id);
        if (!aborted.ok()) std::fprintf(stderr, "\ndsv41 run: %s\n", aborted.ToString().c_str());
      }
    }
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);  // the text ends before the stats line on stderr
  const Clock::time_point end = Clock::now();
  const double prefill_s = std::chrono::duration<double>(first_token - start).count();
  const double decode_s = std::chrono::duration<double>(end - first_token).count();
  std::fprintf(stderr,
               "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s "
               "(%.1f tok/s); finish: %s\n",
               prompt_tokens, prefill_s, prompt_tokens / std::max(prefill_s, 1e-9), generated,
               decode_s, std::max(generated - 1, 0) / std::max(decode_s, 1e-9),
               std::string(FinishReasonName(processor.finish())).c_str());
  if (options->speculative.method != SpeculativeMethod::kOff) {
    const EngineStats stats = (*engine)->stats();
    std::fprintf(stderr,
                 "speculative: %llu verifies, %llu drafts, %llu accepted (rate %.3f), mean "
                 "accepted length %.2f, %llu guard pauses\n",
                 static_cast<unsigned long long>(stats.num_verifies),
                 static_cast<unsigned long long>(stats.num_draft_tokens),
                 static_cast<unsigned long long>(stats.num_accepted_tokens),
                 stats.acceptance_rate(), stats.mean_accepted_length(),
                 static_cast<unsigned long long>(stats.num_guard_pauses));
  }
  return 0;
}

std::function<int()> SetupRun(CLI::App& sub) {
  auto flags = std::make_shared<RunFlags>();
  flags->params.temperature = 0.0f;  // greedy unless asked
  flags->params.max_tokens = 64;
  sub.add_option("-m,--model", flags->model_dir, "model directory")->required();
  sub.add_option("-p,--prompt", flags->prompt, "prompt text (no chat template)")->required();
  sub.add_option(
      "--image", flags->images,
      "a PNG or JPEG for each <｜deepseek_image｜> of the prompt, in order (repeatable)");
  sub.add_option("-n,--max-tokens", flags->params.max_tokens, "tokens to generate at most")
      ->capture_default_str();
  sub.add_option("--temperature", flags->params.temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  sub.add_option("--top-p", flags->params.top_p, "nucleus sampling mass")->capture_default_str();
  sub.add_option("--top-k", flags->params.top_k, "sample among the K most likely tokens (0: all)")
      ->capture_default_str();
  sub.add_option("--min-p", flags->params.min_p, "drop tokens below min-p × the top probability")
      ->capture_default_str();
  sub.add_option("--repetition-penalty", flags->params.repetition_penalty,
                 "divide (multiply) positive (negative) logits of seen tokens")
      ->capture_default_str();
  sub.add_option("--presence-penalty", flags->params.presence_penalty,
                 "subtract from the logits of generated tokens")
      ->capture_default_str();
  sub.add_option("--frequency-penalty", flags->params.frequency_penalty,
                 "subtract per occurrence in the generated tokens")
      ->capture_default_str();
  sub.add_option("--stop", flags->stop, "stop string (repeatable; not printed)");
  sub.add_option("-s,--seed", flags->params.seed, "sampling seed (default: random)");
  sub.add_option("--chunk", flags->chunk,
                 "prefill chunk size in tokens (0: --max-num-batched-tokens)")
      ->capture_default_str();
  AddEngineFlags(sub, flags->engine);
  AddImageFlags(sub, flags->image_flags);
  return [flags] { return RunRun(*flags); };
}

DSV41_REGISTER_COMMAND(kRunCommand, "run", "generate text from a prompt", SetupRun);

}  // namespace
}  // namespace dsv41

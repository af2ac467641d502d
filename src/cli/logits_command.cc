// `dsv41 logits`: the logits of every position of a prompt (token ids or text), as a float32 .npy
// [positions, vocab] and/or the top-k ids and values of each position as JSON lines.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "base/npy.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/image_flags.h"
#include "cli/int_list.h"
#include "cli/job.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "vision/image_span.h"

namespace dsv41 {
namespace {

struct LogitsFlags {
  std::string model_dir;
  std::string ids;
  std::string prompt;
  int32_t chunk = 0;
  std::string out;
  int32_t top_k = 0;
  std::vector<std::string> images;
  std::vector<std::string> image_embeddings;
  std::string ids_out;
  std::string types_out;
  EngineFlags engine;
  ImageFlags image_flags;
};

// The logits of every position of `ids`, one request through the engine: its prefill runs in
// chunks of --max-num-batched-tokens tokens.
Result<std::vector<float>> PromptLogits(const LoadedTextModel& m, const EngineOptions& options,
                                        ThreadPool& pool, Communicator& comm,
                                        std::vector<int32_t> ids,
                                        std::vector<RequestImage> images) {
  DSV41_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(m, options, pool, comm));
  PrintEngineLayout(*engine, options);
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 1;
  DSV41_ASSIGN_OR_RETURN(
      uint64_t id,
      engine->AddRequest(std::move(ids), params,
                         AddRequestOptions{.prompt_logits = true, .images = std::move(images)}));
  std::vector<float> logits;
  while (engine->HasUnfinished()) {
    DSV41_ASSIGN_OR_RETURN(std::vector<RequestOutput> outputs, engine->Step());
    for (RequestOutput& out : outputs) {
      if (out.request_id != id) continue;
      if (out.finish == FinishReason::kError) return InternalError("%s", out.error.c_str());
      logits.insert(logits.end(), out.prompt_logits.begin(), out.prompt_logits.end());
    }
  }
  return logits;
}

// The images the flags give, placed in the expanded `ids` (written to --ids-out / --types-out
// when asked).
Result<std::vector<RequestImage>> PrepareImages(const LogitsFlags& flags, const LoadedTextModel& m,
                                                std::vector<int32_t>& ids) {
  DSV41_ASSIGN_OR_RETURN(
      ImageFilePrompt prompt,
      AttachImageFiles(m, flags.images, flags.image_embeddings, flags.image_flags, ids));
  const int64_t shape[] = {static_cast<int64_t>(prompt.expanded.ids.size())};
  if (!flags.ids_out.empty()) {
    const std::vector<int64_t> values(prompt.expanded.ids.begin(), prompt.expanded.ids.end());
    DSV41_RETURN_IF_ERROR(WriteNpyInt64(flags.ids_out, values, shape));
  }
  if (!flags.types_out.empty()) {
    const std::vector<int64_t> values(prompt.expanded.roles.begin(), prompt.expanded.roles.end());
    DSV41_RETURN_IF_ERROR(WriteNpyInt64(flags.types_out, values, shape));
  }
  ids = std::move(prompt.expanded.ids);
  return std::move(prompt.images);
}

int RunLogits(const LogitsFlags& flags) {
  if (flags.ids.empty() == flags.prompt.empty()) {
    std::fprintf(stderr, "dsv41 logits: give exactly one of --ids and --prompt\n");
    return 2;
  }
  std::vector<int32_t> ids;
  if (!flags.ids.empty()) {
    Result<std::vector<int32_t>> parsed = ParseIntList(flags.ids, "--ids", 0, INT32_MAX);
    if (!parsed.ok()) {
      std::fprintf(stderr, "dsv41 logits: %s\n", parsed.status().ToString().c_str());
      return 2;
    }
    ids = std::move(parsed).value();
  }
  if (flags.out.empty() && flags.top_k <= 0 && flags.ids_out.empty() && flags.types_out.empty()) {
    std::fprintf(stderr, "dsv41 logits: give --out FILE.npy and/or --top-k K\n");
    return 2;
  }
  if (!flags.images.empty() && !flags.image_embeddings.empty()) {
    std::fprintf(stderr, "dsv41 logits: give --image or --image-embeddings, not both\n");
    return 2;
  }
  LogitsFlags engine_flags = flags;
  if (flags.chunk > 0) engine_flags.engine.max_num_batched_tokens = flags.chunk;
  Result<EngineOptions> options = ToEngineOptions(engine_flags.engine);
  if (!options.ok()) {
    std::fprintf(stderr, "dsv41 logits: %s\n", options.status().ToString().c_str());
    return 2;
  }
  // The chunk size must be known on every rank before the engine starts: with --prompt it is
  // the encoded length, which every rank computes alike from the same tokenizer.
  Result<std::unique_ptr<Job>> job = Job::Start(engine_flags.engine);
  if (!job.ok()) {
    std::fprintf(stderr, "dsv41 logits: %s\n", job.status().ToString().c_str());
    return 1;
  }
  Result<RankModel> rank =
      LoadRankModel(**job, "dsv41 logits", flags.model_dir, engine_flags.engine, *options);
  if (!rank.ok()) {
    if ((*job)->leads()) {
      std::fprintf(stderr, "dsv41 logits: %s\n", rank.status().ToString().c_str());
    }
    return 1;
  }
  if (!(*job)->leads()) return (*job)->Follow("dsv41 logits", rank->model, *rank->pool);
  const LoadedTextModel* m = &rank->model;
  if (!flags.prompt.empty()) {
    Result<std::vector<int32_t>> encoded = m->tokenizer->Encode(flags.prompt);
    if (!encoded.ok()) {
      std::fprintf(stderr, "dsv41 logits: %s\n", encoded.status().ToString().c_str());
      return 1;
    }
    ids = std::move(encoded).value();
  }
  Result<std::vector<RequestImage>> images = PrepareImages(flags, *m, ids);
  if (!images.ok()) {
    std::fprintf(stderr, "dsv41 logits: %s\n", images.status().ToString().c_str());
    return 1;
  }
  if (flags.out.empty() && flags.top_k <= 0) return 0;  // only the expanded ids / roles
  if (flags.chunk <= 0) {                               // one chunk: the whole prompt in one step
    options->max_num_batched_tokens = std::max<int32_t>(1, static_cast<int32_t>(ids.size()));
  }
  const int64_t positions = static_cast<int64_t>(ids.size());
  Result<std::vector<float>> logits =
      PromptLogits(*m, *options, *rank->pool, (*job)->comm(), ids, std::move(*images));
  if (!logits.ok()) {
    std::fprintf(stderr, "dsv41 logits: %s\n", logits.status().ToString().c_str());
    return 1;
  }
  const int32_t vocab = m->model->vocab_size();
  if (!flags.out.empty()) {
    const int64_t shape[] = {positions, vocab};
    const Status s = WriteNpyFloat32(flags.out, *logits, shape);
    if (!s.ok()) {
      std::fprintf(stderr, "dsv41 logits: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (flags.top_k > 0) {
    const int32_t k = std::min(flags.top_k, vocab);
    std::vector<int32_t> order(vocab);
    for (int64_t p = 0; p < positions; ++p) {
      const float* row = logits->data() + p * vocab;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int32_t a, int32_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      OrderedJson line;
      line["pos"] = p;
      line["token"] = ids[p];
      line["ids"] = std::vector<int32_t>(order.begin(), order.begin() + k);
      std::vector<float> values;
      for (int32_t i = 0; i < k; ++i) values.push_back(row[order[i]]);
      line["values"] = values;
      std::printf("%s\n", line.dump().c_str());
    }
  }
  return 0;
}

std::function<int()> SetupLogits(CLI::App& sub) {
  auto flags = std::make_shared<LogitsFlags>();
  sub.add_option("-m,--model", flags->model_dir, "model directory")->required();
  sub.add_option("--ids", flags->ids, "comma-separated prompt token ids");
  sub.add_option("--prompt", flags->prompt, "prompt text (tokenized, no chat template)");
  sub.add_option("--chunk", flags->chunk,
                 "prefill chunk size in tokens, through the scheduler's chunked prefill (0: one "
                 "chunk)")
      ->capture_default_str();
  sub.add_option("--out", flags->out, "write the logits [positions, vocab] as float32 .npy");
  sub.add_option("--top-k", flags->top_k, "print the top K ids and values of each position")
      ->capture_default_str();
  sub.add_option("--image", flags->images,
                 "a PNG or JPEG for each image placeholder of the prompt, in order (repeatable)");
  sub.add_option("--image-embeddings", flags->image_embeddings,
                 "instead of --image: float32 [H, W, hidden] .npy aligner rows per placeholder");
  sub.add_option("--ids-out", flags->ids_out, "write the expanded prompt ids as int64 .npy");
  sub.add_option("--types-out", flags->types_out,
                 "write each position's role as int64 .npy (-1 text, 0 start, 1 image, 2 newline, "
                 "3 end)");
  AddEngineFlags(sub, flags->engine);
  AddImageFlags(sub, flags->image_flags);
  return [flags] { return RunLogits(*flags); };
}

DSV41_REGISTER_COMMAND(kLogitsCommand, "logits",
                       "print or save the logits of every prompt position", SetupLogits);

}  // namespace
}  // namespace dsv41

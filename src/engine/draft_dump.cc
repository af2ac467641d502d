#include "engine/draft_dump.h"

#include <algorithm>

#include "engine/engram_prefetch.h"
#include "engine/model_runner.h"
#include "engram/row_ids.h"
#include "kv/cache_plan.h"
#include "kv/kv_layout.h"

namespace dsv41 {

namespace {

// The prompt is non-empty and inside the vocabulary, and prompt + steps fit the positions.
Status CheckDumpInput(const ModelConfig& config, std::span<const int32_t> prompt, int32_t steps) {
  const int64_t num_positions = static_cast<int64_t>(prompt.size()) + steps;
  const int32_t vocab = config.vocab_size;
  if (prompt.empty() || steps < 1) {
    return InvalidArgumentError("--ids needs at least one token and --steps at least 1");
  }
  if (num_positions > config.max_position_embeddings) {
    return InvalidArgumentError("%zu prompt tokens + %d steps exceed max_position_embeddings %lld",
                                prompt.size(), steps,
                                static_cast<long long>(config.max_position_embeddings));
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return InvalidArgumentError("--ids: token %zu is %d, outside [0, %d)", i, prompt[i], vocab);
    }
  }
  return Status();
}

}  // namespace

Result<DraftDump> DumpDrafts(const LoadedTextModel& model, std::span<const int32_t> prompt,
                             int32_t steps, ExecContext& ctx, bool engram_prefetch) {
  if (model.dspark == nullptr) {
    return InvalidArgumentError("the model was loaded without its DSpark stages");
  }
  const TextModel& text = *model.model;
  const DsparkModel& dspark = *model.dspark;
  const ModelConfig& config = text.config();
  const int32_t vocab = config.vocab_size;
  const int32_t block = dspark.block_size();
  const int64_t num_positions = static_cast<int64_t>(prompt.size()) + steps;
  DSV41_RETURN_IF_ERROR(CheckDumpInput(config, prompt, steps));

  // One request's cache, every group's blocks consecutive, with the draft windows.
  CachePlanOptions plan_options;
  plan_options.block_tokens = SmallestBlockTokens(config);
  plan_options.dspark = true;
  DSV41_ASSIGN_OR_RETURN(CachePlan plan, PlanCache(config, text.plan(), plan_options));
  const int64_t blocks_per_group =
      (num_positions + plan_options.block_tokens - 1) / plan_options.block_tokens;
  const std::vector<std::vector<uint32_t>> tables = ContiguousBlockTables(plan, blocks_per_group);
  KvCacheStorage storage(plan, config,
                         static_cast<uint32_t>(blocks_per_group * plan.groups.size()));

  std::vector<int32_t> ids(prompt.begin(), prompt.end());
  std::vector<int32_t> classes(ids.size(), 0);
  if (model.engram.num_layers() > 0) {
    DSV41_RETURN_IF_ERROR(MapTokensToEngramClasses(model.token_map, ids, classes));
  }
  DraftDump dump;
  dump.steps = steps;
  dump.block_size = block;
  dump.vocab_size = vocab;
  const int64_t width = text.MainHiddenWidth();
  // The rows come from the model's Engram storage (the tier the command chose), fetched ahead of
  // each forward as the engine does; the largest forward is the prompt's.
  const std::unique_ptr<EngramPrefetcher> engram =
      model.engram.num_layers() > 0
          ? MakeEngramPrefetcher(*model.engram_storage, model.engram.num_cols(),
                                 std::max<int32_t>(1, static_cast<int32_t>(prompt.size())),
                                 engram_prefetch, Communicator::SingleProcess())
          : nullptr;
  SyncEngramStepRows no_engram({}, 0);  // the rows of no Engram layer
  EngramStepRows& engram_rows =
      engram != nullptr ? static_cast<EngramStepRows&>(*engram) : no_engram;
  // Feeds positions [start, size) of `ids`, seeds the draft windows of every fed position and
  // returns the greedy token after the last.
  auto feed = [&](int32_t start) -> Result<int32_t> {
    const int32_t n = static_cast<int32_t>(ids.size()) - start;
    Batch batch;
    AppendToBatch(model.engram,
                  BatchSlice{.token_ids = ids,
                             .class_ids = classes,
                             .dead = {},
                             .start = start,
                             .num_tokens = n,
                             .block_tables = tables,
                             .logits_from = static_cast<int64_t>(ids.size()) - 1,
                             .main_hidden = true},
                  batch);
    std::vector<float> logits(vocab);
    std::vector<float> main_hidden(static_cast<size_t>(n) * width);
    if (engram != nullptr) engram->StartStep(batch.engram_rows, n);
    const Status forward =
        text.Forward(batch, storage.view(), engram_rows,
                     ForwardOutputs{.logits = logits, .main_hidden = main_hidden}, ctx);
    if (engram != nullptr) engram->FinishStep();
    DSV41_RETURN_IF_ERROR(forward);
    DSV41_RETURN_IF_ERROR(dspark.SeedWindows(main_hidden, batch.requests, storage.view(), ctx));
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                              logits.begin());  // lowest id on ties
    ids.push_back(next);
    int32_t cls = 0;
    if (model.engram.num_layers() > 0) {
      DSV41_RETURN_IF_ERROR(
          MapTokensToEngramClasses(model.token_map, std::span(&next, 1), std::span(&cls, 1)));
    }
    classes.push_back(cls);
    dump.greedy.push_back(next);
    return next;
  };
  DSV41_RETURN_IF_ERROR(feed(0).status());
  for (int32_t k = 1; k <= steps; ++k) {
    const int32_t last_pos = static_cast<int32_t>(ids.size()) - 1;
    DSV41_ASSIGN_OR_RETURN(const int32_t t1, feed(last_pos));
    const DraftRequest request{.token = t1, .last_pos = last_pos, .block_tables = tables};
    DraftResult draft;
    DSV41_RETURN_IF_ERROR(dspark.Draft(std::span(&request, 1), storage.view(), true, draft, ctx));
    dump.ids.push_back(t1);
    dump.ids.insert(dump.ids.end(), draft.tokens.begin(), draft.tokens.end());
    dump.logits.insert(dump.logits.end(), draft.logits.begin(), draft.logits.end());
    dump.confidence.insert(dump.confidence.end(), draft.confidence.begin(), draft.confidence.end());
  }
  return dump;
}

}  // namespace dsv41

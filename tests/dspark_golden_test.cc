// The DSpark draft forward (model.md §11.1–§11.4) against the model goldens' dspark_ids,
// dspark_logits and dspark_confidence on every case, compared as goldens/model/README.md says.
// The dump runs through DumpDrafts, the code behind `dsv41 draft`, over the paged cache with the
// draft windows, once per numerics mode: the reference (exact accumulation) on every step, the
// fast kernels (fp32 accumulation, the freedom stability_gemm32 measures) only where every prompt
// position is stable, since the windows hold the main model's rows of the prompt (tiny-b mix40 and
// long120 are not), and then only on decode steps whose main-model greedy prefix is noise-stable
// (step k consumed the greedy tokens 0..k and drafts from token k + 1, so it needs
// greedy_stable_prefix_gemm32 >= k + 2). Inside a step, row i of the draft is compared (logits
// within 1e-3, the raw confidence within 1e-3 relative to max(1, |c|)) while the draft tokens
// feeding it (o[0..i]) are equal, and the draft token o[i+1] must equal the golden's unless the
// golden's own top-2 margin at row i is within the noise (2e-3), where the comparison of that step
// stops.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/json.h"
#include "base/npy.h"
#include "engine/draft_dump.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "golden_cases.h"
#include "kernels/linear.h"

namespace dsv41 {
namespace {

// Every prompt position of the case is stable (goldens README: stability_gemm32 <= 1e-4), so the
// fast kernels' main rows, and with them the draft windows, are held to the goldens.
bool PromptIsStable(const std::string& case_dir) {
  const std::vector<float> stability = ReadFloats(case_dir + "/stability_gemm32.npy");
  return !stability.empty() &&
         std::all_of(stability.begin(), stability.end(), [](float s) { return s <= 1e-4f; });
}

// The numerics modes a golden test runs: the reference, then the fast kernels of this CPU.
std::vector<std::pair<Numerics, const char*>> NumericsModes() {
  std::vector<std::pair<Numerics, const char*>> modes = {{Numerics::kReference, "reference"},
                                                         {Numerics::kFastFma, "fp32-fma kernel"}};
  if (CpuHasBf16Dot()) modes.emplace_back(Numerics::kFastBf16Dot, "bf16-dot kernel");
  return modes;
}

// Top value minus the runner-up of one logits row.
float TopMargin(const float* row, int32_t n) {
  float first = -INFINITY, second = -INFINITY;
  for (int32_t i = 0; i < n; ++i) {
    if (row[i] > first) {
      second = first;
      first = row[i];
    } else if (row[i] > second) {
      second = row[i];
    }
  }
  return first - second;
}

class DsparkGoldenTest : public ::testing::TestWithParam<GoldenCase> {
 protected:
  void SetUp() override {
#ifndef NDEBUG
    // The sanitizer runs (~20x slower) check the short prompts; release builds every case.
    if (std::string(GetParam().prompt) != "chat5") GTEST_SKIP() << "release builds only";
#endif
  }
};

TEST_P(DsparkGoldenTest, DraftIdsLogitsAndConfidenceMatch) {
  const std::string model_dir = kGoldens + "/checkpoints/" + GetParam().model;
  const std::string case_dir = kGoldens + "/cases/" + GetParam().model + "/" + GetParam().prompt;
  Result<LoadedTextModel> m = LoadedTextModel::Load(model_dir, {}, /*with_dspark=*/true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<int32_t> prompt;
  for (int64_t id : ReadGolden(case_dir + "/input_ids.npy").ToInt64()) {
    prompt.push_back(static_cast<int32_t>(id));
  }
  const NpyArray want_ids = ReadGolden(case_dir + "/dspark_ids.npy");
  const NpyArray want_logits = ReadGolden(case_dir + "/dspark_logits.npy");
  const std::vector<float> want_conf = ReadGolden(case_dir + "/dspark_confidence.npy").ToFloat();
  ASSERT_EQ(want_ids.shape.size(), 2u);
  const int32_t steps = static_cast<int32_t>(want_ids.shape[0]);
  const int32_t block = static_cast<int32_t>(want_ids.shape[1]) - 1;
  const int32_t vocab = m->config().vocab_size;
  ASSERT_EQ(block, m->dspark->block_size());
  ASSERT_EQ(want_logits.shape, (std::vector<int64_t>{steps, block, vocab}));
  const std::vector<int64_t> ids = want_ids.ToInt64();
  const std::vector<float> logits = want_logits.ToFloat();
  Result<Json> diagnostics = ReadJsonFile(case_dir + "/diagnostics.json");
  ASSERT_TRUE(diagnostics.ok()) << diagnostics.status().ToString();
  const int32_t stable_prefix = (*diagnostics)["greedy_stable_prefix_gemm32"].get<int32_t>();

  const bool prompt_stable = PromptIsStable(case_dir);

  for (const auto& [numerics, path] : NumericsModes()) {
    SCOPED_TRACE(path);
    const bool exact = numerics == Numerics::kReference;
    if (!exact && !prompt_stable) {
      std::printf("[ %s/%s ] DSpark, %s: not compared (unstable prompt positions)\n",
                  GetParam().model, GetParam().prompt, path);
      continue;
    }
    OwnedExecContext exec(2, numerics);
    Result<DraftDump> dump = DumpDrafts(*m, prompt, steps, exec.ctx);
    ASSERT_TRUE(dump.ok()) << dump.status().ToString();
    ASSERT_EQ(dump->ids.size(), ids.size());
    ASSERT_EQ(dump->logits.size(), logits.size());
    ASSERT_EQ(dump->confidence.size(), want_conf.size());

    double max_logit_err = 0, max_conf_err = 0;
    int32_t num_steps = 0, num_rows = 0, num_ids = 0, num_ids_equal = 0;
    // Exact accumulation has no noise: every step counts.
    for (int32_t k = 0; k < steps && (exact || k + 2 <= stable_prefix); ++k) {
      SCOPED_TRACE("step " + std::to_string(k));
      ++num_steps;
      const int64_t* want_row = ids.data() + static_cast<size_t>(k) * (block + 1);
      const int64_t* got_row = dump->ids.data() + static_cast<size_t>(k) * (block + 1);
      ASSERT_EQ(got_row[0], want_row[0]) << "t1, the main model's greedy token";
      for (int32_t i = 0; i < block; ++i) {
        ++num_rows;
        const size_t at = (static_cast<size_t>(k) * block + i) * vocab;
        double err = 0;
        for (int32_t v = 0; v < vocab; ++v) {
          err =
              std::max(err, static_cast<double>(std::fabs(dump->logits[at + v] - logits[at + v])));
        }
        max_logit_err = std::max(max_logit_err, err);
        EXPECT_LE(err, 1e-3) << "draft logits of row " << i;
        const size_t c = static_cast<size_t>(k) * block + i;
        const double conf_err = std::fabs(dump->confidence[c] - want_conf[c]) /
                                std::max(1.0, std::fabs(static_cast<double>(want_conf[c])));
        max_conf_err = std::max(max_conf_err, conf_err);
        EXPECT_LE(conf_err, 1e-3) << "confidence of row " << i;
        if (TopMargin(logits.data() + at, vocab) <= 2e-3f) break;  // a near-tie: o[i+1] is noise
        ++num_ids;
        num_ids_equal += got_row[1 + i] == want_row[1 + i];
        ASSERT_EQ(got_row[1 + i], want_row[1 + i]) << "draft token " << i + 1;
      }
    }
    std::printf(
        "[ %s/%s ] DSpark, %s: %d of %d steps compared; max |draft logit - golden| = %.3g over %d "
        "rows, max confidence error %.3g, %d of %d draft ids equal\n",
        GetParam().model, GetParam().prompt, path, num_steps, steps, max_logit_err, num_rows,
        max_conf_err, num_ids_equal, num_ids);
    EXPECT_GT(num_steps, 0) << "no noise-stable step to compare";
  }
}

// The drafts the engine proposes with --speculative dspark (paged G_DRAFT windows seeded by the
// engine's forwards, a prefill in chunks of 7, the smallest block size, verify steps that reject)
// are the goldens' at every step where the engine drafts after the same main position: after
// consuming position T + k it drafts dspark_ids[k]. Compared as above (stable steps, the draft's
// own stable prefix), in reference numerics (every step) and, where the prompt is stable, the fast
// kernels.
TEST_P(DsparkGoldenTest, EngineDraftsAreTheGoldens) {
  const std::string model_dir = kGoldens + "/checkpoints/" + GetParam().model;
  const std::string case_dir = kGoldens + "/cases/" + GetParam().model + "/" + GetParam().prompt;
  Result<LoadedTextModel> m = LoadedTextModel::Load(model_dir, {}, /*with_dspark=*/true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<int32_t> prompt;
  for (int64_t id : ReadInts(case_dir + "/input_ids.npy"))
    prompt.push_back(static_cast<int32_t>(id));
  const NpyArray want_ids = ReadGolden(case_dir + "/dspark_ids.npy");
  const std::vector<int64_t> ids = want_ids.ToInt64();
  const std::vector<float> logits = ReadFloats(case_dir + "/dspark_logits.npy");
  const int32_t steps = static_cast<int32_t>(want_ids.shape[0]);
  const int32_t block = static_cast<int32_t>(want_ids.shape[1]) - 1;
  const int32_t vocab = m->config().vocab_size;
  Result<Json> diagnostics = ReadJsonFile(case_dir + "/diagnostics.json");
  ASSERT_TRUE(diagnostics.ok()) << diagnostics.status().ToString();
  const int32_t stable_prefix = (*diagnostics)["greedy_stable_prefix_gemm32"].get<int32_t>();

  const bool prompt_stable = PromptIsStable(case_dir);
  for (const auto& [numerics, path] : NumericsModes()) {
    if (numerics != Numerics::kReference && !prompt_stable) continue;
    SCOPED_TRACE(path);
    OwnedExecContext exec(2);
    EngineOptions options;
    options.numerics = numerics;
    options.block_tokens = SmallestBlockTokens(m->config());
    options.num_blocks = 4096;
    options.max_num_batched_tokens = 7;
    options.speculative.method = SpeculativeMethod::kDspark;
    options.speculative.num_speculative_tokens = block;
    options.speculative.min_acceptance = 0.0;
    Result<std::unique_ptr<Engine>> engine = Engine::Create(*m, options, exec.pool);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = steps + 2;
    params.ignore_eos = true;
    Result<uint64_t> id = (*engine)->AddRequest(prompt, params);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    const int64_t num_prompt = static_cast<int64_t>(prompt.size());
    int32_t compared = 0;
    while ((*engine)->HasUnfinished()) {
      ASSERT_TRUE((*engine)->Step().ok());
      Result<RequestState> state = (*engine)->InspectRequest(*id);
      if (!state.ok() || state->draft_tokens.empty()) continue;
      const int64_t k = state->num_computed - 1 - num_prompt;  // consumed position T + k
      if (k < 0 || k >= steps || (numerics != Numerics::kReference && k + 2 > stable_prefix)) {
        continue;
      }
      SCOPED_TRACE("step " + std::to_string(k));
      const int64_t* want_row = ids.data() + k * (block + 1);
      ASSERT_EQ(state->token_ids.back(), want_row[0]) << "t1";
      for (size_t i = 0; i < state->draft_tokens.size(); ++i) {
        EXPECT_EQ(state->draft_tokens[i], want_row[1 + i]) << "draft token " << i + 1;
        if (TopMargin(logits.data() + (k * block + i) * vocab, vocab) <= 2e-3f) break;
      }
      ++compared;
    }
    std::printf("[ %s/%s ] engine drafts, %s: compared at %d steps\n", GetParam().model,
                GetParam().prompt, path, compared);
    EXPECT_GT(compared, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllCases, DsparkGoldenTest, ::testing::ValuesIn(AllGoldenCases()),
                         GoldenCaseName);

}  // namespace
}  // namespace dsv41

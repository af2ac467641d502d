// Image spans in the text model against the vision goldens (goldens/vision/README.md rules 3
// and 4) and the span equivalences (vision.md §10–§12):
// - the text model with the golden aligner rows injected: logits within 1e-3 wherever
//   stability_gemm32_text <= 1e-4, Engram row ids (span positions DEAD, the look-back stopping at
//   the span) and routed experts (bias_vl at span positions) identical, the merged rows = h_merged;
// - chunked prefill with cuts inside spans = one-shot, bit for bit;
// - the whole pipeline through the engine (its own tower): logits where stability_gemm32 <= 1e-4
//   and the greedy ids over greedy_stable_prefix_gemm32 tokens; a batch of requests with images =
//   each alone; the prefix cache hits with the same image and misses with another image of the
//   same size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/engine.h"
#include "engine/loaded_model.h"
#include "engine/model_runner.h"
#include "engram/row_ids.h"
#include "kv/kv_layout.h"
#include "model/forward.h"
#include "vision/image_input.h"
#include "vision/image_span.h"
#include "vision/vision_goldens_testing.h"

namespace dsv41 {
namespace {

struct VisionCase {
  std::string name;
  std::string dir;
  Json json;
  ImagePlan plan;
  std::vector<int32_t> ids;    // expanded
  std::vector<int8_t> roles;   // types
  std::vector<float> aligner;  // the golden aligner rows [H·W, dim]
  RequestImage image;          // span_start, plan, golden rows as embeddings
};

// Every backbone MoE call's selections, in call order: [layers, T, top_k] for one forward.
struct ExpertTrace final : ForwardObserver {
  std::vector<int32_t> experts;
  void OnMoeRouting(std::string_view, int32_t, std::span<const int32_t> e,
                    std::span<const float>) override {
    experts.insert(experts.end(), e.begin(), e.end());
  }
};

std::vector<int32_t> ToInt32(const std::vector<int64_t>& v) {
  return std::vector<int32_t>(v.begin(), v.end());
}

class VisionGoldenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<LoadedTextModel> m = LoadedTextModel::Load(kVisionCheckpoint);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = new LoadedTextModel(std::move(m).value());
    ASSERT_NE(model_->vision, nullptr);
    for (const std::string& name : VisionGoldenCases()) cases_.push_back(ReadCase(name));
  }
  static void TearDownTestSuite() {
    delete model_;
    cases_.clear();
  }

 public:
  static VisionCase ReadCaseForTest(const std::string& name) { return ReadCase(name); }

 protected:
  static VisionCase ReadCase(const std::string& name) {
    VisionCase c;
    c.name = name;
    c.dir = VisionCaseDir(name);
    c.json = ReadGoldenJson(c.dir + "/case.json");
    const Json& plan = c.json["images"][0]["plan"];
    c.plan = *PlanImage(plan["input_w"].get<int64_t>(), plan["input_h"].get<int64_t>(),
                        TinyVPlanParams());
    c.ids = ToInt32(ReadVisionArray(c.dir + "/input_ids.npy").ToInt64());
    for (int64_t role : ReadVisionArray(c.dir + "/types.npy").ToInt64()) {
      c.roles.push_back(static_cast<int8_t>(role));
    }
    c.aligner = ReadVisionArray(c.dir + "/image0_aligner_out.npy").ToFloat();
    c.image.span_start = c.json["span_starts"][0].get<int32_t>();
    c.image.plan = c.plan;
    c.image.embeddings = std::make_shared<const std::vector<float>>(c.aligner);
    c.image.content_key = 1;
    return c;
  }

  // The case's prompt through the text model in chunks of `chunk` positions (0: one shot) with
  // the golden rows injected; logits [T, vocab]. `rows` receives the Engram row ids, `trace`
  // watches the forwards.
  static std::vector<float> RunTextModel(const VisionCase& c, int32_t chunk, Numerics numerics,
                                         std::vector<int64_t>& rows, ForwardObserver& trace) {
    const TextModel& model = *model_->model;
    Result<ContiguousKvCache> cache = ContiguousKvCache::Create(model.config(), model.plan(), 256);
    EXPECT_TRUE(cache.ok());
    OwnedExecContext exec(2, numerics);
    ScopedForwardObserver watch(exec.ctx, trace);
    std::vector<int32_t> classes(c.ids.size());
    EXPECT_TRUE(MapTokensToEngramClasses(model_->token_map, c.ids, classes).ok());
    std::vector<uint8_t> dead(c.ids.size());
    for (size_t t = 0; t < dead.size(); ++t) dead[t] = c.roles[t] >= 0;
    const float* image_rows[] = {c.aligner.data()};
    const VisionTower& tower = *model_->vision;
    const int32_t total = static_cast<int32_t>(c.ids.size());
    const int32_t step = chunk > 0 ? chunk : total;
    std::vector<float> logits;
    for (int32_t start = 0; start < total; start += step) {
      const int32_t n = std::min(step, total - start);
      Batch batch;
      AppendToBatch(
          model_->engram,
          BatchSlice{.token_ids = c.ids,
                     .class_ids = classes,
                     .dead = dead,
                     .start = start,
                     .num_tokens = n,
                     .block_tables = cache->block_tables(),
                     .logits_from = start,
                     .images = std::span<const RequestImage>(&c.image, 1),
                     .image_rows = image_rows,
                     .delimiters = {tower.image_start(), tower.image_newline(), tower.image_end()}},
          batch);
      rows.insert(rows.end(), batch.engram_rows.begin(), batch.engram_rows.end());
      std::vector<float> out(static_cast<size_t>(n) * model.vocab_size());
      SyncEngramStepRows engram = model.MappedEngramRows();
      engram.StartStep(batch.engram_rows, batch.num_tokens());
      const Status s =
          model.Forward(batch, cache->view(), engram, ForwardOutputs{.logits = out}, exec.ctx);
      EXPECT_TRUE(s.ok()) << s.ToString();
      logits.insert(logits.end(), out.begin(), out.end());
    }
    return logits;
  }

  static LoadedTextModel* model_;
  static std::vector<VisionCase> cases_;
};
LoadedTextModel* VisionGoldenTest::model_ = nullptr;
std::vector<VisionCase> VisionGoldenTest::cases_;

// Largest |got − want| over the positions whose stability is at most 1e-4, and their count.
std::pair<double, int> StableError(const std::vector<float>& got, const std::vector<float>& want,
                                   const std::vector<float>& stability, int32_t vocab) {
  double max_err = 0;
  int stable = 0;
  for (size_t p = 0; p < stability.size(); ++p) {
    if (stability[p] > 1e-4f) continue;
    ++stable;
    for (int32_t v = 0; v < vocab; ++v) {
      const size_t i = p * vocab + v;
      max_err = std::max(max_err, static_cast<double>(std::fabs(got[i] - want[i])));
    }
  }
  return {max_err, stable};
}

// README rule 3: the golden rows injected; every position is stable in every public case.
TEST_F(VisionGoldenTest, TextModelWithGoldenRowsMatchesTheGoldens) {
  const int32_t vocab = model_->model->vocab_size();
  std::vector<std::pair<Numerics, const char*>> modes = {{Numerics::kReference, "reference"},
                                                         {Numerics::kFastFma, "fma"}};
  if (CpuHasBf16Dot()) modes.emplace_back(Numerics::kFastBf16Dot, "bf16-dot");
  for (const VisionCase& c : cases_) {
    for (const auto& [numerics, mode] : modes) {
      SCOPED_TRACE(c.name + " " + mode);
      std::vector<int64_t> rows;
      ExpertTrace trace;
      const std::vector<float> logits = RunTextModel(c, 0, numerics, rows, trace);
      const std::vector<float> stability =
          ReadVisionArray(c.dir + "/stability_gemm32_text.npy").ToFloat();
      const auto [err, stable] =
          StableError(logits, ReadVisionArray(c.dir + "/logits.npy").ToFloat(), stability, vocab);
      EXPECT_EQ(stable, static_cast<int>(c.ids.size()));
      EXPECT_LE(err, 1e-3);
      std::printf("%-10s %-9s max |logit - golden| %.3g over %d positions\n", c.name.c_str(), mode,
                  err, stable);
      EXPECT_EQ(rows, ReadVisionArray(c.dir + "/engram_hash.npy").ToInt64()) << "Engram rows";
      EXPECT_EQ(trace.experts, ToInt32(ReadVisionArray(c.dir + "/moe_experts.npy").ToInt64()))
          << "routed experts";
    }
  }
}

// The merge (§10): each span row of h is the golden h_merged row — START / NEWLINE / END the
// learned vectors, IMAGE row k the k-th aligner row — which AppendToBatch points at.
TEST_F(VisionGoldenTest, SpanRowsAreTheGoldenMergedRows) {
  const int64_t dim = model_->config().hidden_size;
  const VisionTower& tower = *model_->vision;
  for (const VisionCase& c : cases_) {
    const std::vector<float> merged = ReadVisionArray(c.dir + "/h_merged.npy").ToFloat();
    const float* image_rows[] = {c.aligner.data()};
    Batch batch;
    AppendToBatch(
        EngramHashConstants{},
        BatchSlice{.token_ids = c.ids,
                   .class_ids = {},
                   .dead = {},
                   .start = 0,
                   .num_tokens = static_cast<int32_t>(c.ids.size()),
                   .block_tables = {},
                   .images = std::span<const RequestImage>(&c.image, 1),
                   .image_rows = image_rows,
                   .delimiters = {tower.image_start(), tower.image_newline(), tower.image_end()}},
        batch);
    ASSERT_EQ(batch.span_roles.size(), c.ids.size());
    for (size_t t = 0; t < c.ids.size(); ++t) {
      ASSERT_EQ(batch.span_roles[t], c.roles[t]) << c.name << " position " << t;
      if (c.roles[t] < 0) continue;
      ASSERT_EQ(std::memcmp(batch.span_rows[t], merged.data() + t * dim, dim * sizeof(float)), 0)
          << c.name << " position " << t;
    }
  }
}

// §10: chunked prefill may cut through a span; token by token and chunks of 5 and 13 give the
// one-shot logits bit for bit.
TEST_F(VisionGoldenTest, ChunkedPrefillThroughSpansEqualsOneShot) {
  for (const VisionCase& c : cases_) {
    std::vector<int64_t> rows;
    ExpertTrace trace;
    const std::vector<float> one_shot = RunTextModel(c, 0, Numerics::kFast, rows, trace);
    for (int32_t chunk : {1, 5, 13}) {
      std::vector<int64_t> chunk_rows;
      const std::vector<float> chunked = RunTextModel(c, chunk, Numerics::kFast, chunk_rows, trace);
      ASSERT_EQ(chunked.size(), one_shot.size());
      EXPECT_EQ(std::memcmp(chunked.data(), one_shot.data(), chunked.size() * sizeof(float)), 0)
          << c.name << " in chunks of " << chunk;
      EXPECT_EQ(chunk_rows, rows) << c.name << " in chunks of " << chunk;
    }
  }
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

struct ImageRequest {
  std::vector<int32_t> ids;
  std::vector<RequestImage> images;
};

struct EngineResult {
  std::vector<int32_t> tokens;
  std::vector<float> prompt_logits;
  int64_t cached_tokens = 0;
};

// The requests through one engine, added one step apart from `first_step` on (all at once when
// `stagger` is false); greedy, `max_tokens` each.
std::vector<EngineResult> RunEngine(const LoadedTextModel& m, const EngineOptions& options,
                                    const std::vector<ImageRequest>& requests, bool prompt_logits,
                                    int32_t max_tokens, bool stagger = false) {
  ThreadPool pool(2);
  Result<std::unique_ptr<Engine>> engine = Engine::Create(m, options, pool);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return {};
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  std::vector<EngineResult> out(requests.size());
  std::map<uint64_t, size_t> index_of;
  size_t added = 0;
  while (added < requests.size() || (*engine)->HasUnfinished()) {
    while (added < requests.size()) {
      Result<uint64_t> id = (*engine)->AddRequest(
          requests[added].ids, params,
          AddRequestOptions{.prompt_logits = prompt_logits, .images = requests[added].images});
      EXPECT_TRUE(id.ok()) << id.status().ToString();
      if (!id.ok()) return {};
      index_of[*id] = added++;
      if (stagger) break;
    }
    Result<std::vector<RequestOutput>> outputs = (*engine)->Step();
    EXPECT_TRUE(outputs.ok()) << outputs.status().ToString();
    if (!outputs.ok()) return {};
    for (const RequestOutput& o : *outputs) {
      EngineResult& r = out[index_of[o.request_id]];
      EXPECT_NE(o.finish, FinishReason::kError) << o.error;
      r.tokens.insert(r.tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      r.prompt_logits.insert(r.prompt_logits.end(), o.prompt_logits.begin(), o.prompt_logits.end());
      r.cached_tokens = std::max(r.cached_tokens, o.num_cached_prompt_tokens);
    }
  }
  EXPECT_TRUE((*engine)->CheckConsistency().ok());
  return out;
}

// The golden image of a case through the engine's own decode, letterbox and tower.
RequestImage OwnImage(const VisionCase& c, const RgbImage* decoded = nullptr) {
  const std::string file = c.json["images"][0]["file"].get<std::string>();
  Result<PreparedImage> prepared =
      decoded != nullptr ? PrepareDecodedImage(*decoded, TinyVPlanParams())
                         : PrepareImage(ReadGoldenBytes(kVisionGoldens + "/images/" + file),
                                        TinyVPlanParams(), ImageDecodeOptions{});
  EXPECT_TRUE(prepared.ok()) << prepared.status().ToString();
  RequestImage image;
  image.span_start = c.image.span_start;
  image.plan = prepared->plan;
  image.content_key = ImageSpanKey(prepared->content_sha256, prepared->plan);
  image.canvas = std::make_shared<const std::vector<uint8_t>>(std::move(prepared->canvas));
  return image;
}

EngineOptions SmallBlocks() {
  EngineOptions options;
  options.block_tokens = 16;
  options.num_blocks = 256;
  return options;
}

// README rule 4: the engine's decode, letterbox and tower feed the text model. Under the
// reference numerics the tower follows §13.2's recipe to the bit (vision_tower_test), so every
// position's logits and all 8 greedy ids match. The fast kernels accumulate the tower's products
// in another fp32 order than the goldens' gemm32 probe, so the probe's stable positions inside a
// span are not stable for them (c2_shapes moves by 12.8 at position 3): there the positions
// before the first span, which no image touches, must match.
TEST_F(VisionGoldenTest, WholePipelineAtStablePositions) {
  const int32_t vocab = model_->model->vocab_size();
  for (const VisionCase& c : cases_) {
    SCOPED_TRACE(c.name);
    const std::vector<float> want = ReadVisionArray(c.dir + "/logits.npy").ToFloat();
    EngineOptions reference;
    reference.numerics = Numerics::kReference;
    const std::vector<EngineResult> exact =
        RunEngine(*model_, reference, {{c.ids, {OwnImage(c)}}}, true, 8);
    ASSERT_EQ(exact.size(), 1u);
    const std::vector<float> every(c.ids.size(), 0.0f);
    EXPECT_LE(StableError(exact[0].prompt_logits, want, every, vocab).first, 1e-3);
    EXPECT_EQ(exact[0].tokens, ToInt32(ReadVisionArray(c.dir + "/greedy_ids.npy").ToInt64()));

    const std::vector<EngineResult> fast =
        RunEngine(*model_, EngineOptions{}, {{c.ids, {OwnImage(c)}}}, true, 8);
    ASSERT_EQ(fast.size(), 1u);
    std::vector<float> before_span(c.ids.size(), 1.0f);
    std::fill_n(before_span.begin(), c.image.span_start, 0.0f);
    const auto [err, stable] = StableError(fast[0].prompt_logits, want, before_span, vocab);
    EXPECT_EQ(stable, c.image.span_start);
    EXPECT_LE(err, 1e-3);
  }
}

// The four cases in one engine, their images encoded in the same steps: each request's tokens and
// logits equal its run alone, also through prefill chunks of 7 (cuts inside spans).
TEST_F(VisionGoldenTest, BatchedRequestsWithImagesEqualEachAlone) {
  std::vector<ImageRequest> requests;
  for (const VisionCase& c : cases_) requests.push_back({c.ids, {OwnImage(c)}});
  EngineOptions chunked;
  chunked.max_num_batched_tokens = 7;
  const std::vector<EngineResult> together = RunEngine(*model_, EngineOptions{}, requests, true, 6);
  const std::vector<EngineResult> in_chunks = RunEngine(*model_, chunked, requests, true, 6);
  ASSERT_EQ(together.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<EngineResult> alone =
        RunEngine(*model_, EngineOptions{}, {requests[i]}, true, 6);
    EXPECT_EQ(together[i].tokens, alone[0].tokens) << cases_[i].name;
    EXPECT_TRUE(together[i].prompt_logits == alone[0].prompt_logits) << cases_[i].name;
    EXPECT_EQ(in_chunks[i].tokens, alone[0].tokens) << cases_[i].name;
    EXPECT_TRUE(in_chunks[i].prompt_logits == alone[0].prompt_logits) << cases_[i].name;
  }
}

// vision.md §12 through the engine: a second request with the same image reuses the blocks of the
// first (span included) and generates the same tokens; one with another image of the same size
// (one pixel changed: the same plan, ids and span) reuses none of the blocks its span touches.
TEST_F(VisionGoldenTest, PrefixCacheKeysSpansByImageContent) {
  const VisionCase& c = cases_[0];
  const NpyArray decoded_array = ReadVisionArray(c.dir + "/image0_decoded.npy");
  RgbImage decoded;
  decoded.height = static_cast<int32_t>(decoded_array.shape[0]);
  decoded.width = static_cast<int32_t>(decoded_array.shape[1]);
  decoded.pixels.assign(
      reinterpret_cast<const uint8_t*>(decoded_array.data.data()),
      reinterpret_cast<const uint8_t*>(decoded_array.data.data()) + decoded_array.data.size());
  RgbImage changed = decoded;
  changed.pixels[3 * (30 * changed.width + 50)] ^= 0x40;
  const RequestImage same = OwnImage(c, &decoded);
  const RequestImage other = OwnImage(c, &changed);
  ASSERT_EQ(other.plan.span_length, same.plan.span_length);
  ASSERT_NE(other.content_key, same.content_key);

  const EngineOptions options = SmallBlocks();
  const int32_t block = options.block_tokens;
  const int64_t span_end = same.span_start + same.plan.span_length;
  const std::vector<EngineResult> alone = RunEngine(*model_, options, {{c.ids, {same}}}, false, 5);
  const std::vector<EngineResult> hit =
      RunEngine(*model_, options, {{c.ids, {same}}, {c.ids, {same}}}, false, 5, true);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0].cached_tokens, 0);
  EXPECT_GE(hit[1].cached_tokens, span_end / block * block) << "the span's blocks are reused";
  EXPECT_EQ(hit[1].tokens, alone[0].tokens);
  const std::vector<EngineResult> miss =
      RunEngine(*model_, options, {{c.ids, {same}}, {c.ids, {other}}}, false, 5, true);
  ASSERT_EQ(miss.size(), 2u);
  EXPECT_LE(miss[1].cached_tokens, same.span_start / block * block)
      << "no block the span touches is reused";
  const std::vector<EngineResult> other_alone =
      RunEngine(*model_, options, {{c.ids, {other}}}, false, 5);
  EXPECT_EQ(miss[1].tokens, other_alone[0].tokens);
}

// Engine admission refuses images that do not fit the prompt, naming the fault.
TEST_F(VisionGoldenTest, BadImageRequestsAreRefused) {
  const VisionCase& c = cases_[0];
  ThreadPool pool(1);
  Result<std::unique_ptr<Engine>> engine = Engine::Create(*model_, EngineOptions{}, pool);
  ASSERT_TRUE(engine.ok());
  SamplingParams params;
  params.max_tokens = 1;
  RequestImage moved = OwnImage(c);
  moved.span_start += 1;  // the span's last position then holds text
  RequestImage no_canvas = OwnImage(c);
  no_canvas.canvas = nullptr;
  for (const auto& [image, want] : {std::pair{moved, "not the image token"},
                                    std::pair{no_canvas, "does not fit the vision tower"}}) {
    Result<uint64_t> id =
        (*engine)->AddRequest(c.ids, params, AddRequestOptions{.images = {image}});
    ASSERT_FALSE(id.ok());
    EXPECT_NE(id.status().message().find(want), std::string::npos) << id.status().message();
  }
}

}  // namespace
}  // namespace dsv41

namespace dsv41 {
namespace {

// vision.md §11: DSpark never uses bias_vl and its windows are seeded from the main rows as for
// text, so speculative decoding (drafting on every step) gives the plain run's tokens after an
// image, for every case.
TEST(VisionSpeculativeTest, DsparkAfterAnImageKeepsTheTokens) {
  Result<LoadedTextModel> m = LoadedTextModel::Load(kVisionCheckpoint, {}, /*with_dspark=*/true);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EngineOptions speculative;
  speculative.speculative.method = SpeculativeMethod::kDspark;
  speculative.speculative.min_acceptance = 0;
  speculative.speculative.num_speculative_tokens = 3;
  for (const std::string& name : VisionGoldenCases()) {
    SCOPED_TRACE(name);
    const VisionCase c = VisionGoldenTest::ReadCaseForTest(name);
    const std::vector<ImageRequest> request = {{c.ids, {c.image}}};
    const std::vector<EngineResult> plain = RunEngine(*m, EngineOptions{}, request, false, 12);
    const std::vector<EngineResult> drafted = RunEngine(*m, speculative, request, false, 12);
    ASSERT_EQ(plain.size(), 1u);
    ASSERT_EQ(drafted.size(), 1u);
    EXPECT_EQ(drafted[0].tokens, plain[0].tokens);
    EXPECT_EQ(plain[0].tokens.size(), 12u);
  }
}

}  // namespace
}  // namespace dsv41

// The vision tower (model/vision_tower.h) against the vision goldens (goldens/vision/README.md
// rule 2): on every case, vit_out from the golden patches and aligner_out from the engine's own
// vit_out, per element |d| <= 0.125 + 2^-6 |golden| and row cosine >= 0.9995 against the bf16
// goldens, row cosine >= 0.999 against the all-fp32 tower; under every numerics mode (the
// reference's exact accumulation and each fast kernel); the reference, which follows §13.2's
// recipe, gives the goldens' bf16 tower bit for bit. Then the equivalences: a batch of images =
// each alone, 1 thread = 2 threads, bit for bit.
#include "model/vision_tower.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "model/weights.h"
#include "vision/vision_goldens_testing.h"

namespace dsv41 {
namespace {

struct TowerCase {
  std::string name;
  ImagePlan plan;
  std::vector<float> patches;
};

class VisionTowerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<ModelWeights> weights = ModelWeights::Load(kVisionCheckpoint);
    ASSERT_TRUE(weights.ok()) << weights.status().ToString();
    weights_ = new ModelWeights(std::move(weights).value());
    Result<std::unique_ptr<VisionTower>> tower = VisionTower::Load(*weights_);
    ASSERT_TRUE(tower.ok()) << tower.status().ToString();
    tower_ = tower->release();
  }
  static void TearDownTestSuite() {
    delete tower_;
    delete weights_;
  }

  static std::vector<TowerCase> Cases() {
    std::vector<TowerCase> cases;
    for (const std::string& name : VisionGoldenCases()) {
      const Json plan_json = ReadGoldenJson(VisionCaseDir(name) + "/image0_plan.json");
      Result<ImagePlan> plan = PlanImage(plan_json["input_w"].get<int64_t>(),
                                         plan_json["input_h"].get<int64_t>(), TinyVPlanParams());
      EXPECT_TRUE(plan.ok());
      cases.push_back(
          {name, *plan, ReadVisionArray(VisionCaseDir(name) + "/image0_patches.npy").ToFloat()});
    }
    return cases;
  }

  static ModelWeights* weights_;
  static VisionTower* tower_;
};
ModelWeights* VisionTowerTest::weights_ = nullptr;
VisionTower* VisionTowerTest::tower_ = nullptr;

TEST_F(VisionTowerTest, GoldenVitAndAlignerWithinTheTowerTolerance) {
  const int64_t d = tower_->config().hidden_size;
  const int64_t dim = tower_->output_dim();
  std::vector<std::pair<Numerics, const char*>> modes = {{Numerics::kReference, "reference"},
                                                         {Numerics::kFastFma, "fma"}};
  if (CpuHasBf16Dot()) modes.emplace_back(Numerics::kFastBf16Dot, "bf16-dot");
  ThreadPool pool(2);
  for (const auto& [numerics, mode] : modes) {
    StepArena arena;
    ExecContext ctx{pool, arena};
    ctx.numerics = numerics;
    for (const TowerCase& c : Cases()) {
      const std::string what = c.name + " (" + mode + ")";
      const std::string dir = VisionCaseDir(c.name);
      std::vector<float> vit(static_cast<size_t>(c.plan.num_patches() * d));
      tower_->ForwardVit(c.patches, std::span<const ImagePlan>(&c.plan, 1), vit, ctx);
      const double vit_diff =
          ExpectWithinTowerTolerance(vit, ReadVisionArray(dir + "/image0_vit_out.npy").ToFloat(), d,
                                     0.9995, true, what + " vit_out");
      std::vector<float> rows(static_cast<size_t>(c.plan.num_image_tokens() * dim));
      tower_->ForwardAligner(vit, std::span<const ImagePlan>(&c.plan, 1), rows, ctx);
      const double aligner_diff = ExpectWithinTowerTolerance(
          rows, ReadVisionArray(dir + "/image0_aligner_out.npy").ToFloat(), dim, 0.9995, true,
          what + " aligner_out");
      ExpectWithinTowerTolerance(rows,
                                 ReadVisionArray(dir + "/image0_aligner_out_fp32.npy").ToFloat(),
                                 dim, 0.999, false, what + " aligner_out vs fp32");
      std::printf("%-24s max |d| vit_out %.4g, aligner_out %.4g\n", what.c_str(), vit_diff,
                  aligner_diff);
      if (numerics == Numerics::kReference) {
        // §13.2's recipe to the bit: the oracle's bf16 tower exactly.
        EXPECT_EQ(vit_diff, 0.0) << what;
        EXPECT_EQ(aligner_diff, 0.0) << what;
      }
    }
  }
}

// Weight products over all images at once, attention per image: a batch of the four golden
// images gives each image's rows bit for bit; so do 1 and 2 threads.
TEST_F(VisionTowerTest, BatchEqualsAloneAndThreadsChangeNoBit) {
  const std::vector<TowerCase> cases = Cases();
  const int64_t dim = tower_->output_dim();
  std::vector<ImagePlan> plans;
  std::vector<float> patches;
  for (const TowerCase& c : cases) {
    plans.push_back(c.plan);
    patches.insert(patches.end(), c.patches.begin(), c.patches.end());
  }
  int64_t num_tokens = 0;
  for (const ImagePlan& plan : plans) num_tokens += plan.num_image_tokens();
  ThreadPool one(1), two(2);
  StepArena arena;
  ExecContext ctx{two, arena};
  std::vector<float> batched(static_cast<size_t>(num_tokens * dim));
  tower_->Encode(patches, plans, batched, ctx);
  ExecContext single{one, arena};
  std::vector<float> alone;
  for (const TowerCase& c : cases) {
    std::vector<float> rows(static_cast<size_t>(c.plan.num_image_tokens() * dim));
    tower_->Encode(c.patches, std::span<const ImagePlan>(&c.plan, 1), rows, single);
    alone.insert(alone.end(), rows.begin(), rows.end());
  }
  ASSERT_EQ(batched.size(), alone.size());
  EXPECT_EQ(std::memcmp(batched.data(), alone.data(), batched.size() * sizeof(float)), 0);
}

// The span rows are the checkpoint's bf16 vectors.
TEST_F(VisionTowerTest, SpanRowsAreTheLearnedVectors) {
  for (const auto& [name, row] : {std::pair{"image_start", tower_->image_start()},
                                  std::pair{"image_end", tower_->image_end()},
                                  std::pair{"image_newline", tower_->image_newline()}}) {
    Result<TensorView> view = weights_->Get(name);
    ASSERT_TRUE(view.ok());
    ASSERT_EQ(row.size() * 2, view->bytes.size()) << name;
    for (size_t i = 0; i < row.size(); ++i) {
      uint32_t bits = 0;
      std::memcpy(reinterpret_cast<char*>(&bits) + 2, view->bytes.data() + 2 * i, 2);
      float want;
      std::memcpy(&want, &bits, 4);
      ASSERT_EQ(row[i], want) << name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace dsv41

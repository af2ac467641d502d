#include "kernels/simd_cap.h"

#include <string>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "kernels/linear.h"

namespace dsv41 {
namespace {

class SimdCapTest : public ::testing::Test {
 protected:
  // The cap the run started with (DSV41_SIMD may have set one) is back after each test.
  void SetUp() override { cap_at_start_ = CurrentSimdCap(); }
  void TearDown() override { ASSERT_TRUE(ApplySimdCap(cap_at_start_).ok()); }
  SimdCap cap_at_start_ = SimdCap::kBest;
};

TEST_F(SimdCapTest, ParsesTheNamesAndRefusesOthers) {
  for (const SimdCap cap : {SimdCap::kBest, SimdCap::kAvx2, SimdCap::kScalar}) {
    Result<SimdCap> parsed = ParseSimdCap(SimdCapName(cap));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, cap);
  }
  Result<SimdCap> bad = ParseSimdCap("avx9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--simd avx9"), std::string::npos);
}

TEST_F(SimdCapTest, ScalarCapDispatchesToThePortableCode) {
  ASSERT_TRUE(ApplySimdCap(SimdCap::kBest).ok());
  const std::string best = ActiveSimdTargetName();
  ASSERT_TRUE(ApplySimdCap(SimdCap::kScalar).ok());
  const std::string scalar = ActiveSimdTargetName();
  EXPECT_TRUE(scalar == "SCALAR" || scalar == "EMU128") << scalar;
  EXPECT_FALSE(CpuHasBf16Dot()) << "the AVX-512 bf16 kernel runs only uncapped";
  EXPECT_EQ(CurrentSimdCap(), SimdCap::kScalar);
  ASSERT_TRUE(ApplySimdCap(SimdCap::kBest).ok());
  EXPECT_EQ(ActiveSimdTargetName(), best);
}

#if HWY_ARCH_X86
TEST_F(SimdCapTest, Avx2CapStopsAtAvx2) {
  if ((hwy::SupportedTargets() & HWY_AVX2) == 0) GTEST_SKIP() << "no AVX2 here";
  ASSERT_TRUE(ApplySimdCap(SimdCap::kAvx2).ok());
  EXPECT_EQ(ActiveSimdTargetName(), "AVX2");
  EXPECT_FALSE(CpuHasBf16Dot());
}
#endif

}  // namespace
}  // namespace dsv41

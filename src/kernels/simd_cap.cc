#include "kernels/simd_cap.h"

#include <atomic>
#include <cstdlib>

#include "hwy/targets.h"

namespace dsv41 {
namespace {

std::atomic<SimdCap> g_cap{SimdCap::kBest};

// Highway orders targets by bit: a lower bit is a better target of the same architecture.
int64_t TargetsBetterThan(int64_t target) { return target - 1; }

}  // namespace

Result<SimdCap> ParseSimdCap(std::string_view name) {
  if (name == "best") return SimdCap::kBest;
  if (name == "avx2") return SimdCap::kAvx2;
  if (name == "scalar") return SimdCap::kScalar;
  return InvalidArgumentError("--simd %.*s: want best, avx2 or scalar",
                              static_cast<int>(name.size()), name.data());
}

const char* SimdCapName(SimdCap cap) {
  switch (cap) {
    case SimdCap::kBest:
      return "best";
    case SimdCap::kAvx2:
      return "avx2";
    case SimdCap::kScalar:
      return "scalar";
  }
  return "?";
}

Status ApplySimdCap(SimdCap cap) {
  int64_t disabled = 0;
  switch (cap) {
    case SimdCap::kBest:
      break;
    case SimdCap::kAvx2:
#if HWY_ARCH_X86
      disabled = TargetsBetterThan(HWY_AVX2);
#else
      return UnimplementedError("--simd avx2: this CPU is not x86");
#endif
      break;
    case SimdCap::kScalar:
      // Only the portable fallbacks stay (whichever of them the build compiled).
      disabled = TargetsBetterThan(HWY_EMU128);
      break;
  }
  hwy::DisableTargets(disabled);
  g_cap.store(cap);
  return Status();
}

SimdCap CurrentSimdCap() { return g_cap.load(); }

Status ApplySimdCapFromEnvironment() {
  const char* value = std::getenv("DSV41_SIMD");
  if (value == nullptr || *value == '\0') return Status();
  Result<SimdCap> cap = ParseSimdCap(value);
  if (!cap.ok()) {
    return InvalidArgumentError("DSV41_SIMD=%s: want best, avx2 or scalar", value);
  }
  return ApplySimdCap(*cap);
}

std::string ActiveSimdTargetName() {
  // The best target both supported here (after the cap) and compiled into the kernels.
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(targets & -targets);
}

}  // namespace dsv41

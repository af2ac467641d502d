#pragma once

// A cap on the instruction sets the kernels dispatch to (--simd; DSV41_SIMD in the test
// binaries): the best the CPU runs, or at most AVX2, or the portable scalar code. The Highway
// kernels follow Highway's dispatch, which the cap narrows; the hand-written bf16 dot-product
// kernel (AVX-512) runs only without a cap. For tests (every model test once per target) and for
// comparisons; results are bit-identical across targets where the order is defined.
//
// Process-wide rather than in ExecContext: Highway's dispatch, which the cap narrows, is itself
// process-wide (hwy::DisableTargets), and the kernel choice it feeds (CpuHasBf16Dot) is also made
// without a context (SelectGemmKernel at load, the kernel tests).

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace dsv41 {

enum class SimdCap { kBest, kAvx2, kScalar };

// "best", "avx2" or "scalar"; InvalidArgument naming the value otherwise.
Result<SimdCap> ParseSimdCap(std::string_view name);
const char* SimdCapName(SimdCap cap);

// Applies `cap` process-wide, before or between kernel calls (not while kernels run). kAvx2 on a
// CPU without AVX2 leaves the best it has below it; on a non-x86 CPU it is Unimplemented.
Status ApplySimdCap(SimdCap cap);
// The cap last applied (kBest at start).
SimdCap CurrentSimdCap();

// Applies the cap named by the environment variable DSV41_SIMD when it is set (the test
// binaries' main calls this); InvalidArgument naming the variable for a bad value.
Status ApplySimdCapFromEnvironment();

// The Highway target the dispatched kernels use now, e.g. "AVX3", "AVX2", "SCALAR".
std::string ActiveSimdTargetName();

}  // namespace dsv41

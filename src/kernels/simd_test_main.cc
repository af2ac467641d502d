// main() of the test binaries that run once per SIMD cap: `--simd best|avx2|scalar` (after the
// GoogleTest flags; default: the environment's DSV41_SIMD, else best) is applied before any test
// (kernels/simd_cap.h); the binary says which target the kernels dispatch to, then runs the tests.

#include <cstdio>
#include <cstring>

#include "gtest/gtest.h"
#include "kernels/simd_cap.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  dsv41::Status applied = dsv41::ApplySimdCapFromEnvironment();
  for (int i = 1; applied.ok() && i < argc; ++i) {
    if (std::strcmp(argv[i], "--simd") != 0 || i + 1 == argc) {
      std::fprintf(stderr, "unknown argument %s (want --simd best|avx2|scalar)\n", argv[i]);
      return 2;
    }
    dsv41::Result<dsv41::SimdCap> cap = dsv41::ParseSimdCap(argv[++i]);
    applied = cap.ok() ? dsv41::ApplySimdCap(*cap) : cap.status();
  }
  if (!applied.ok()) {
    std::fprintf(stderr, "%s\n", applied.ToString().c_str());
    return 2;
  }
  std::fprintf(stderr, "kernels dispatch to %s (cap %s)\n", dsv41::ActiveSimdTargetName().c_str(),
               dsv41::SimdCapName(dsv41::CurrentSimdCap()));
  return RUN_ALL_TESTS();
}

// main() of every test binary: the kernel dispatch settings a run asks for are applied before any
// test — the SIMD cap (kernels/simd_cap.h; DSV41_SIMD, or `--simd best|avx2|scalar` after the
// GoogleTest flags) and then the fast kernel (kernels/linear.h; DSV41_FAST_KERNEL, or
// `--fast-kernel auto|fma|bf16-dot|amx`). The binary says what the kernels dispatch to, then runs
// the tests. A kernel this CPU lacks exits with kSkipped, which ctest reports as skipped.
// DSV41_POISON_MEMORY=1 fills fresh arena and KV cache memory with 0xFF (base/poison.h), so a read
// of memory nobody wrote fails the tests (the sanitizer job runs so).
// Every test process gets its own scratch folder as testing::TempDir() (TEST_TMPDIR), removed when
// it ends: ctest -j runs the tests of one binary, and one test under several kernels, as parallel
// processes that write the same file names. The ranks of one mpirun job share theirs.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "base/poison.h"
#include "gtest/gtest.h"
#include "kernels/linear.h"
#include "kernels/simd_cap.h"

namespace {

constexpr int kSkipped = 77;  // SKIP_RETURN_CODE of the tests registered per fast kernel
constexpr int kBadArguments = 2;

// The folder under the system's temporary one (gtest's TempDir() before TEST_TMPDIR is set) named
// by this process, or by its mpirun job for every rank of it; created empty.
std::string MakeScratchDir(bool* owner) {
  const char* mpi_job = std::getenv("OMPI_MCA_ess_base_jobid");
  const char* mpi_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const std::string key = mpi_job != nullptr ? std::string("mpi") + mpi_job
                                             : std::to_string(static_cast<long>(getpid()));
  *owner = mpi_job == nullptr || mpi_rank == nullptr || std::strcmp(mpi_rank, "0") == 0;
  const std::string dir = ::testing::TempDir() + "dsv41_test_" + key + "/";
  std::error_code error;
  if (mpi_job == nullptr) std::filesystem::remove_all(dir, error);  // a dead process's pid
  std::filesystem::create_directories(dir, error);
  if (error) {
    std::fprintf(stderr, "cannot create the test scratch folder %s: %s\n", dir.c_str(),
                 error.message().c_str());
    std::exit(kBadArguments);
  }
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* simd_arg = nullptr;
  const char* kernel_arg = nullptr;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (has_value && std::strcmp(argv[i], "--simd") == 0) {
      simd_arg = argv[++i];
    } else if (has_value && std::strcmp(argv[i], "--fast-kernel") == 0) {
      kernel_arg = argv[++i];
    } else {
      std::fprintf(stderr,
                   "unknown argument %s (want --simd best|avx2|scalar, --fast-kernel "
                   "auto|fma|bf16-dot|amx)\n",
                   argv[i]);
      return kBadArguments;
    }
  }
  if (const char* poison = std::getenv("DSV41_POISON_MEMORY"); poison != nullptr) {
    dsv41::SetPoisonFreshMemory(std::strcmp(poison, "1") == 0);
  }
  dsv41::Status applied = dsv41::ApplySimdCapFromEnvironment();
  if (applied.ok() && simd_arg != nullptr) {
    dsv41::Result<dsv41::SimdCap> cap = dsv41::ParseSimdCap(simd_arg);
    applied = cap.ok() ? dsv41::ApplySimdCap(*cap) : cap.status();
  }
  if (applied.ok()) applied = dsv41::ApplyFastKernelFromEnvironment();
  if (applied.ok() && kernel_arg != nullptr) {
    dsv41::Result<dsv41::FastKernel> kernel = dsv41::ParseFastKernel(kernel_arg);
    if (!kernel.ok()) {
      applied = kernel.status();
    } else if (*kernel == dsv41::FastKernel::kBf16Dot && !dsv41::CpuHasBf16Dot()) {
      std::printf(
          "skipped: --fast-kernel bf16-dot needs AVX512-BF16, which this CPU (or the "
          "SIMD cap) lacks\n");
      return kSkipped;
    } else {
      applied = dsv41::ApplyFastKernel(*kernel);
    }
  }
  if (!applied.ok()) {
    std::fprintf(stderr, "%s\n", applied.ToString().c_str());
    return kBadArguments;
  }
  const bool emulated_tiles =
      dsv41::CurrentFastKernel() == dsv41::FastKernel::kAmx && !dsv41::CpuHasAmxTiles();
  std::fprintf(stderr, "kernels dispatch to %s (cap %s, fast kernel %s%s)\n",
               dsv41::ActiveSimdTargetName().c_str(), dsv41::SimdCapName(dsv41::CurrentSimdCap()),
               dsv41::FastKernelName(dsv41::CurrentFastKernel()),
               emulated_tiles ? ", AMX tiles emulated: this CPU has none" : "");
  bool owns_scratch = false;
  const std::string scratch = MakeScratchDir(&owns_scratch);
  setenv("TEST_TMPDIR", scratch.c_str(), /*overwrite=*/1);
  const int result = RUN_ALL_TESTS();
  std::error_code error;
  if (owns_scratch) std::filesystem::remove_all(scratch, error);
  return result;
}

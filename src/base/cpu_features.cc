#include "base/cpu_features.h"

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace dsv41 {
namespace {

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl code (asm/prctl.h)
constexpr long kXfeatureXtiledata = 18;     // the AMX tile data state component

bool AmxTilesGranted() {
  static const bool granted = __builtin_cpu_supports("amx-tile") &&
                              syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
}
#else
bool AmxTilesGranted() { return false; }
#endif

}  // namespace

bool CpuHasAvx512Fp16() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("avx512fp16");
#else
  return false;
#endif
}

bool CpuHasAmxBf16() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("amx-bf16") && AmxTilesGranted();
#else
  return false;
#endif
}

bool CpuHasAmxInt8() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return __builtin_cpu_supports("amx-int8") && AmxTilesGranted();
#else
  return false;
#endif
}

}  // namespace dsv41

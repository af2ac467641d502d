#pragma once

// The x86 units beyond AVX-512 that kernels and benchmarks dispatch on at run time: AVX512-FP16,
// and the AMX tiles (AMX-BF16, AMX-INT8). Linux hands out the AMX tile state only to a process
// that asks (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); CpuHasAmx* ask once.

#include <cstdint>

namespace dsv41 {

bool CpuHasAvx512Fp16();
// The CPU has AMX-TILE and AMX-BF16 (AMX-INT8) and the kernel granted this process the tile state.
bool CpuHasAmxBf16();
bool CpuHasAmxInt8();

// The AMX tile configuration (LDTILECFG's 64-byte operand) every dsv41 tile loop uses: palette 1,
// tiles 0..7 of 16 rows × 64 bytes.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};
static_assert(sizeof(AmxTileConfig) == 64);

}  // namespace dsv41

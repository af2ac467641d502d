#pragma once

// The x86 units beyond AVX-512 that kernels and benchmarks dispatch on at run time: AVX512-FP16,
// and the AMX tiles (AMX-BF16, AMX-INT8). Linux hands out the AMX tile state only to a process
// that asks (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); CpuHasAmx* ask once.

namespace dsv41 {

bool CpuHasAvx512Fp16();
// The CPU has AMX-TILE and AMX-BF16 (AMX-INT8) and the kernel granted this process the tile state.
bool CpuHasAmxBf16();
bool CpuHasAmxInt8();

}  // namespace dsv41

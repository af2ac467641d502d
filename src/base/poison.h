#pragma once

// A debug switch for tests (real-weight-traps.md R7): memory the engine hands out uninitialised —
// StepArena allocations and KV cache pages — is filled with 0xFF bytes (NaN in fp32 and bf16, a
// NaN e4m3 code) instead of whatever the allocator left, so a read of padding or of a row nobody
// wrote changes the results. Off by default; process-wide, set before the arenas and caches are
// made (DSV41_POISON_MEMORY=1 in the test binaries' environment sets it at start).

#include <cstddef>

namespace dsv41 {

inline constexpr unsigned char kPoisonByte = 0xFF;

void SetPoisonFreshMemory(bool on);
bool PoisonFreshMemory();
// Fills [p, p + bytes) with kPoisonByte when the switch is on.
void PoisonIfAsked(void* p, size_t bytes);

}  // namespace dsv41

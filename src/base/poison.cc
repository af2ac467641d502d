#include "base/poison.h"

#include <atomic>
#include <cstring>

namespace dsv41 {
namespace {
std::atomic<bool> g_poison{false};
}  // namespace

void SetPoisonFreshMemory(bool on) { g_poison.store(on, std::memory_order_relaxed); }

bool PoisonFreshMemory() { return g_poison.load(std::memory_order_relaxed); }

void PoisonIfAsked(void* p, size_t bytes) {
  if (PoisonFreshMemory()) std::memset(p, kPoisonByte, bytes);
}

}  // namespace dsv41

#include "base/exec_context.h"

#include <unistd.h>

#include <algorithm>

#include "base/check.h"
#include "base/poison.h"

namespace dsv41 {
namespace {

constexpr size_t kAlign = 64;
// Growth steps: whole huge pages, and at least doubling, so a first step reaches its size in a
// few calls.
constexpr size_t kGrowthBytes = size_t{2} << 20;

size_t AlignUp(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// The address space an arena reserves: the machine's memory (a step that needs more cannot run).
size_t ReservedBytes(size_t initial_bytes) {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_bytes = ::sysconf(_SC_PAGESIZE);
  const size_t machine = pages > 0 && page_bytes > 0
                             ? static_cast<size_t>(pages) * static_cast<size_t>(page_bytes)
                             : size_t{64} << 30;
  return AlignUp(std::max(machine, initial_bytes), kGrowthBytes);
}

}  // namespace

StepArena::StepArena(size_t initial_bytes) {
  Result<AnonymousMemory> memory =
      AnonymousMemory::Reserve(ReservedBytes(initial_bytes), "step arena");
  DSV41_CHECK(memory.ok(), "%s", memory.status().ToString().c_str());
  memory_ = std::move(memory).value();
  if (initial_bytes > 0) {
    const Status grown = memory_.Grow(AlignUp(initial_bytes, kAlign));
    DSV41_CHECK(grown.ok(), "%s", grown.ToString().c_str());
  }
}

void* StepArena::AllocBytes(size_t bytes) {
  bytes = AlignUp(std::max<size_t>(bytes, 1), kAlign);
  const size_t end = top_ + bytes;
  if (end > capacity_bytes()) {
    DSV41_CHECK(end <= memory_.capacity(),
                "step arena: a step needs %zu bytes of scratch, more than the %zu reserved (the "
                "machine's memory)",
                end, memory_.capacity());
    const size_t grown_to =
        std::min(std::max(AlignUp(end, kGrowthBytes), 2 * capacity_bytes()), memory_.capacity());
    const Status grown = memory_.Grow(grown_to);
    DSV41_CHECK(grown.ok(), "%s", grown.ToString().c_str());
    ++num_growths_;
  }
  void* p = memory_.bytes().data() + top_;  // the range is page-aligned
  top_ = end;
  PoisonIfAsked(p, bytes);
  high_water_ = std::max(high_water_, top_);
  return p;
}

}  // namespace dsv41

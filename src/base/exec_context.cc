#include "base/exec_context.h"

#include <algorithm>

#include "base/check.h"
#include "base/poison.h"

namespace dsv41 {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMinBlockBytes = size_t{1} << 20;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A fresh block: mapped from the OS's zero pages and faulted in by its first step, in huge pages
// where the kernel grants them (a 512-token prefill's scratch is ~100 MiB).
AnonymousMemory NewBlock(size_t bytes) {
  Result<AnonymousMemory> memory = AnonymousMemory::Allocate(bytes, "step arena block");
  DSV41_CHECK(memory.ok(), "%s", memory.status().ToString().c_str());
  return std::move(memory).value();
}

}  // namespace

StepArena::StepArena(size_t initial_bytes) {
  if (initial_bytes > 0) {
    blocks_.push_back(NewBlock(AlignUp(initial_bytes)));
  }
}

void* StepArena::AllocBytes(size_t bytes) {
  bytes = AlignUp(std::max<size_t>(bytes, 1));
  while (top_.block < blocks_.size()) {
    Block& b = blocks_[top_.block];
    if (top_.offset + bytes <= b.bytes().size()) break;
    ++top_.block;  // the rest of this block stays unused until the scope ends
    top_.offset = 0;
  }
  if (top_.block == blocks_.size()) {
    const size_t size = std::max(bytes, kMinBlockBytes);
    blocks_.push_back(NewBlock(size));
    ++num_growths_;
  }
  Block& b = blocks_[top_.block];
  void* p = b.bytes().data() + top_.offset;  // blocks are page-aligned
  top_.offset += bytes;
  top_.used += bytes;
  PoisonIfAsked(p, bytes);
  high_water_ = std::max(high_water_, top_.used);
  return p;
}

void StepArena::Reset() {
  top_ = Mark{};
  if (blocks_.size() > 1) {  // merge into one block of the high-water size
    blocks_.clear();
    blocks_.push_back(NewBlock(high_water_));
  }
}

size_t StepArena::capacity_bytes() const {
  size_t total = 0;
  for (const Block& b : blocks_) total += b.bytes().size();
  return total;
}

}  // namespace dsv41

#pragma once

// The execution context passed down the forward (DESIGN.md "One execution context"): the compute
// thread pool, the per-step scratch arena, the numerics mode, the work counters, the observer
// of the forward's intermediates and the communicator of a multi-process run. One per engine, made
// where the engine is; modules take it by reference instead of a nullable pool, stats or debug
// pointer, and draw their temporaries from the arena instead of allocating per call.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "base/communicator.h"
#include "base/forward_observer.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"

namespace dsv41 {

// Scratch memory of one step: a stack of 64-byte-aligned spans in one reserved address range.
// A module opens an ArenaScope, takes what it needs, and the scope's end gives it back, so a
// step needs the deepest nesting of one layer, not the sum of all layers. The range is reserved
// once (the machine's memory; address space only) and made usable as far as steps reach, in
// place: what was handed out never moves, a steady workload stops growing after its first steps,
// and the memory is one mapping on 2 MiB boundaries, so the first step faults it in huge pages
// (it had grown 1 MiB blocks at first, each faulted 4 KiB at a time: ~56 000 faults in an
// 8-stream bench's first prefill). Engine thread only (never from inside a ParallelFor body).
class StepArena {
 public:
  explicit StepArena(size_t initial_bytes = 0);
  StepArena(const StepArena&) = delete;
  StepArena& operator=(const StepArena&) = delete;

  // `n` uninitialised elements of a trivial type T, 64-byte aligned, valid until the enclosing
  // ArenaScope ends (or Reset).
  template <typename T>
  std::span<T> Alloc(size_t n) {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
    return std::span<T>(static_cast<T*>(AllocBytes(n * sizeof(T))), n);
  }
  // The same, zero-filled.
  template <typename T>
  std::span<T> AllocZeroed(size_t n) {
    std::span<T> s = Alloc<T>(n);
    std::fill(s.begin(), s.end(), T{});
    return s;
  }

  // Everything handed out is dead (between steps).
  void Reset() { top_ = 0; }

  // Bytes usable without growing, and the most any step has held.
  size_t capacity_bytes() const { return memory_.bytes().size(); }
  size_t high_water_bytes() const { return high_water_; }
  uint64_t num_growths() const { return num_growths_; }
  // The start of the range: every span lies in [base, base + capacity_bytes()).
  const std::byte* base() const { return memory_.bytes().data(); }

 private:
  friend class ArenaScope;
  void* AllocBytes(size_t bytes);

  AnonymousMemory memory_;
  size_t top_ = 0;  // bytes handed out
  size_t high_water_ = 0;
  uint64_t num_growths_ = 0;
};

// Gives back, at its end, everything taken from the arena since its start.
class ArenaScope {
 public:
  explicit ArenaScope(StepArena& arena) : arena_(arena), mark_(arena.top_) {}
  ~ArenaScope() { arena_.top_ = mark_; }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  StepArena& arena_;
  size_t mark_;
};

// How weight products accumulate (model.md §12.8 item 1; `--numerics`). Everything else is
// canonical arithmetic in every mode.
enum class Numerics : uint8_t {
  kFast,         // the fastest kernel of this CPU: exact products, fp32 accumulation, fixed order
  kReference,    // exact products accumulated in double, rounded once (the slow comparison path)
  kFastFma,      // the fp32-FMA kernel even where the bf16 dot product is faster (tests, benches)
  kFastBf16Dot,  // the bf16 dot-product kernel where the CPU has one (tests, benches)
  kFastAmx,      // the AMX-BF16 tile kernel; its scalar model where the CPU has no tiles (tests)
  // Exact products summed in plain fp32, in index order: the goldens' noise probe
  // (stability_gemm32). A legal order too; the distance of its logits from kReference's says
  // which positions the accumulation-order freedom can move (tests: noise-stable positions).
  kPlainFp32,
};

// Work counters of the forward, for benchmarks: what the weight products and lookups read and
// computed. Engine thread only (updated outside parallel regions).
struct ExecStats {
  uint64_t weight_bytes = 0;  // stored weight bytes read: each matrix once per product call
  uint64_t weight_macs = 0;   // multiply-adds of the weight products (out · in · rows)
  // Σ over the weight products of max(flops / peak, weight bytes / read bandwidth) at the rates
  // of ExecContext::roofline (0 when unset): the time the products need at the machine's roofs.
  double roofline_seconds = 0;
  // Multi-process runs (counted only there): routed (token, expert) rows of every MoE call, and
  // of each call the most any one rank computed; busiest × ranks / rows is the imbalance.
  uint64_t routed_rows = 0;
  uint64_t routed_rows_busiest_rank = 0;
};

// The machine's roofs a benchmark judges weight products by (ExecStats::roofline_seconds): the
// matrix unit's peak and the read bandwidth; zero: not counted.
struct RooflineRates {
  double peak_flops_per_second = 0;
  double read_bytes_per_second = 0;
};

// What every forward function receives. The pool runs one ParallelFor at a time; the arena is
// the engine thread's.
struct ExecContext {
  ThreadPool& pool;
  StepArena& arena;
  Numerics numerics = Numerics::kFast;
  // `--official-index-key-slot`: reproduce the official reference's single "published index
  // keys" slot (model.md §7.5 "Which keys an index source scores against"; model/index_key_slot.h)
  // instead of the clean rule. Off by default; for comparisons with the official code only.
  bool official_index_key_slot = false;
  // The most a request's indexer score matrix may take in the arena: longer contexts score their
  // new tokens in passes (model/indexer_sizing.h), with the same results.
  size_t indexer_score_budget_bytes = size_t{64} << 20;
  ExecStats stats = {};  // what the forwards run on this context read and computed, cumulative
  RooflineRates roofline = {};  // benchmarks: the rates stats.roofline_seconds is counted at
  // What tests and tools watch of the forwards; the no-op observer unless one is installed
  // (ScopedForwardObserver).
  std::reference_wrapper<ForwardObserver> observer = ForwardObserver::None();
  // The ranks of a multi-process run (DESIGN.md "Beyond one machine"); the single-process
  // communicator otherwise. Its rank and size must be those the model was loaded for
  // (LoadOptions::shard).
  std::reference_wrapper<Communicator> comm = Communicator::SingleProcess();
};

// Installs `observer` on `ctx` for the scope's lifetime, then puts the previous one back.
class ScopedForwardObserver {
 public:
  ScopedForwardObserver(ExecContext& ctx, ForwardObserver& observer)
      : ctx_(ctx), previous_(ctx.observer) {
    ctx.observer = observer;
  }
  ~ScopedForwardObserver() { ctx_.observer = previous_; }
  ScopedForwardObserver(const ScopedForwardObserver&) = delete;
  ScopedForwardObserver& operator=(const ScopedForwardObserver&) = delete;

 private:
  ExecContext& ctx_;
  std::reference_wrapper<ForwardObserver> previous_;
};

// A pool and an arena of their own, for tests and one-off callers.
struct OwnedExecContext {
  explicit OwnedExecContext(int num_threads = 1, Numerics numerics = Numerics::kFast)
      : pool(num_threads), ctx{pool, arena, numerics} {}
  ThreadPool pool;
  StepArena arena;
  ExecContext ctx;
};

}  // namespace dsv41

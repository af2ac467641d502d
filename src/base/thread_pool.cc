#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "base/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSV41_CPU_RELAX() _mm_pause()
#else
#define DSV41_CPU_RELAX() std::this_thread::yield()
#endif

namespace dsv41 {
namespace {

// Spins until pred() holds or `spin` passes; returns pred(). Every 64 pauses it yields the CPU,
// so that on an oversubscribed machine (more runnable threads than cores) a spinning thread
// does not hold up the thread it waits for until the scheduler's next tick.
template <typename Pred>
bool SpinUntil(const Pred& pred, std::chrono::microseconds spin) {
  if (spin.count() <= 0) return pred();
  const auto start = std::chrono::steady_clock::now();
  for (uint32_t i = 1;; ++i) {
    if (pred()) return true;
    DSV41_CPU_RELAX();
    if ((i & 63) == 0) {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() - start > spin) return pred();
    }
  }
}

}  // namespace

void ThreadPool::ChunkOf(int64_t n, int64_t grain, int threads, int t, int64_t* begin,
                         int64_t* end) {
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / threads;
  const int64_t extra = units % threads;
  const int64_t first = t * per + std::min<int64_t>(t, extra);
  const int64_t count = per + (t < extra ? 1 : 0);
  *begin = std::min(n, first * grain);
  *end = std::min(n, (first + count) * grain);
}

ThreadPool::ThreadPool(int num_threads, std::chrono::microseconds spin)
    : num_threads_(std::max(1, num_threads)), spin_(spin) {
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::RunChunk(int thread_idx) {
  int64_t begin, end;
  ChunkOf(task_.n, task_.grain, num_threads_, thread_idx, &begin, &end);
  if (begin < end) task_.call(task_.fn, begin, end, thread_idx);
}

void ThreadPool::WorkerLoop(int thread_idx) {
  uint32_t seen = 0;
  while (true) {
    const auto changed = [&] { return generation_.load(std::memory_order_acquire) != seen; };
    if (!SpinUntil(changed, spin_)) {
      // Sleep until the generation moves. Announcing the sleep before re-checking the generation
      // (both sequentially consistent, as Run's bump and check) means Run either sees the
      // sleeper and wakes it, or the sleeper sees the new generation.
      sleeping_workers_.fetch_add(1);
      while (generation_.load() == seen) generation_.wait(seen);
      sleeping_workers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    RunChunk(thread_idx);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) pending_.notify_one();
  }
}

void ThreadPool::Run(int64_t n, int64_t grain, ChunkFn call, const void* fn) {
  DSV41_CHECK(grain >= 1, "grain %lld", static_cast<long long>(grain));
  if (n <= 0) return;
  if (num_threads_ == 1 || n <= grain) {
    call(fn, 0, n, 0);
    return;
  }
  task_ = Task{call, fn, n, grain};
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);
  if (sleeping_workers_.load() > 0) generation_.notify_all();
  RunChunk(0);
  const auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(done, spin_)) {
    caller_sleeping_.store(true);
    for (int32_t left = pending_.load(); left != 0; left = pending_.load()) pending_.wait(left);
    caller_sleeping_.store(false);
  }
}

}  // namespace dsv41

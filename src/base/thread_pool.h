#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace dsv41 {

// A fixed set of worker threads for the compute parallel-for (STYLE.md §6): one per engine, made in
// main and passed by reference. ParallelFor splits [0, n) into contiguous chunks by a rule that
// depends only on n, the grain and the thread count, so work assignment is deterministic; a
// reduction must still never depend on the split (1 and N threads give equal bits).
//
// A low-latency fork-join: a call publishes a plain function pointer and a generation number,
// workers spin on that number for a while (a decode step forks a few hundred times, microseconds
// apart) before they sleep on it, and the caller spins on an atomic count of unfinished chunks.
// No allocation, lock or std::function per call. Engine thread only: one ParallelFor at a time,
// never from inside a body.
class ThreadPool {
 public:
  // How long a waiting thread spins before it sleeps by default: longer than the gap between the
  // parallel regions of one step, short enough that an idle engine costs nothing.
  static constexpr std::chrono::microseconds kDefaultSpin{500};

  // `num_threads` >= 1 counts the calling thread: num_threads − 1 workers are started. `spin`:
  // how long workers (for new work) and the caller (for the last chunk) spin before sleeping.
  explicit ThreadPool(int num_threads, std::chrono::microseconds spin = kDefaultSpin);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_idx) on disjoint chunks covering [0, n), at most one chunk per
  // thread, chunk boundaries multiples of `grain` (except the end); returns when all are done.
  // Thread t gets the t-th chunk of ChunkOf. fn must not throw.
  template <typename Fn>
  void ParallelFor(int64_t n, int64_t grain, const Fn& fn) {
    static_assert(std::is_invocable_v<const Fn&, int64_t, int64_t, int>);
    Run(n, grain, &CallChunk<Fn>, &fn);
  }

  // The chunk [*begin, *end) of thread `t` among `threads` over [0, n) in units of `grain`:
  // equal numbers of units, the first `units % threads` threads one more.
  static void ChunkOf(int64_t n, int64_t grain, int threads, int t, int64_t* begin, int64_t* end);

 private:
  using ChunkFn = void (*)(const void* fn, int64_t begin, int64_t end, int thread_idx);
  template <typename Fn>
  static void CallChunk(const void* fn, int64_t begin, int64_t end, int thread_idx) {
    (*static_cast<const Fn*>(fn))(begin, end, thread_idx);
  }
  void Run(int64_t n, int64_t grain, ChunkFn call, const void* fn);
  void WorkerLoop(int thread_idx);
  void RunChunk(int thread_idx);

  // Published by Run before the generation is bumped (release), read by workers after they see
  // the new generation (acquire).
  struct Task {
    ChunkFn call = nullptr;
    const void* fn = nullptr;
    int64_t n = 0;
    int64_t grain = 1;
  };

  int num_threads_;
  std::chrono::microseconds spin_;
  Task task_;
  // Each on its own cache line: the engine thread writes generation_, workers write pending_.
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int32_t> pending_{0};
  alignas(64) std::atomic<int32_t> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace dsv41

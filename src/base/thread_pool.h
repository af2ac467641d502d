#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv41 {

// A fixed set of worker threads for the compute parallel-for (STYLE.md §6): one per engine, made in
// main and passed by reference. ParallelFor splits [0, n) into contiguous chunks by a rule that
// depends only on n and the thread count, so work assignment is deterministic; a reduction must
// still never depend on the split (1 and N threads give equal bits). Engine thread only: one
// ParallelFor at a time.
class ThreadPool {
 public:
  // `num_threads` >= 1 counts the calling thread: num_threads − 1 workers are started.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end, thread_idx) on disjoint chunks covering [0, n), at most one chunk per
  // thread, chunk boundaries multiples of `grain` (except the end); returns when all are done.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end, int thread_idx)>& fn);

 private:
  void WorkerLoop(int thread_idx);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;  // guards the fields below
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int64_t, int64_t, int)>* task_ = nullptr;
  int64_t task_n_ = 0;
  int64_t task_grain_ = 1;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace dsv41

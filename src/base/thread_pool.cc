#include "base/thread_pool.h"

#include <algorithm>

#include "base/check.h"

namespace dsv41 {
namespace {
// The chunk of thread `t` out of `threads` over [0, n) in units of `grain`.
void ChunkOf(int64_t n, int64_t grain, int threads, int t, int64_t* begin, int64_t* end) {
  const int64_t units = (n + grain - 1) / grain;
  const int64_t per = units / threads;
  const int64_t extra = units % threads;
  const int64_t first = t * per + std::min<int64_t>(t, extra);
  const int64_t count = per + (t < extra ? 1 : 0);
  *begin = std::min(n, first * grain);
  *end = std::min(n, (first + count) * grain);
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this, t] { WorkerLoop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void ThreadPool::WorkerLoop(int thread_idx) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int64_t, int64_t, int)>* task;
    int64_t n, grain;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
      n = task_n_;
      grain = task_grain_;
    }
    int64_t begin, end;
    ChunkOf(n, grain, num_threads_, thread_idx, &begin, &end);
    if (begin < end) (*task)(begin, end, thread_idx);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) work_done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t, int)>& fn) {
  DSV41_CHECK(grain >= 1, "grain %lld", static_cast<long long>(grain));
  if (n <= 0) return;
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &fn;
    task_n_ = n;
    task_grain_ = grain;
    pending_ = num_threads_ - 1;
    ++generation_;
  }
  work_ready_.notify_all();
  int64_t begin, end;
  ChunkOf(n, grain, num_threads_, 0, &begin, &end);
  if (begin < end) fn(begin, end, 0);
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [&] { return pending_ == 0; });
  task_ = nullptr;
}

}  // namespace dsv41

// Threads that run a communicator's asynchronous operations, in submission order. Threads are
// started on demand up to a maximum; tasks beyond that wait in FIFO order. Because every rank
// submits its collectives in the same order, and a collective only waits for the collective of
// the same sequence number on other ranks, FIFO order with any thread count cannot deadlock.
#ifndef CHORUS_COLLECTIVES_ENGINE_WORKER_POOL_H_
#define CHORUS_COLLECTIVES_ENGINE_WORKER_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace chorus {

// Thread-safe.
class WorkerPool {
 public:
  WorkerPool(int max_threads, int log_rank);
  // Runs every task already submitted, then joins the threads.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Submit(std::function<void()> task);

 private:
  void Loop();

  const int max_threads_;
  const int log_rank_;
  std::mutex mu_;
  std::condition_variable ready_cv_;  // a task was queued or the pool is stopping
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace chorus

#endif  // CHORUS_COLLECTIVES_ENGINE_WORKER_POOL_H_

#include "chorus/collectives/engine/worker_pool.h"

#include <utility>

#include "chorus/core/logging.h"

namespace chorus {

WorkerPool::WorkerPool(int max_threads, int log_rank)
    : max_threads_(max_threads < 1 ? 1 : max_threads), log_rank_(log_rank) {}

WorkerPool::~WorkerPool() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    threads = std::move(threads_);
  }
  ready_cv_.notify_all();
  for (std::thread& thread : threads) thread.join();
}

void WorkerPool::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    if (idle_ == 0 && static_cast<int>(threads_.size()) < max_threads_) {
      threads_.emplace_back([this] { Loop(); });
    }
  }
  ready_cv_.notify_one();
}

void WorkerPool::Loop() {
  SetThreadLogRank(log_rank_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ++idle_;
    ready_cv_.wait(lock, [this] { return !tasks_.empty() || stopping_; });
    --idle_;
    if (tasks_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace chorus

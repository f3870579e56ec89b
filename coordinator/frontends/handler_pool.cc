#include "coordinator/frontends/handler_pool.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <utility>

namespace mxserve::frontends {

HandlerPool::HandlerPool(int num_threads) {
  for (int i = 0; i < std::max(1, num_threads); ++i) threads_.emplace_back([this] { Loop(); });
}

HandlerPool::~HandlerPool() { Stop(); }

bool HandlerPool::Post(std::function<void()> task) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.Signal();
  return true;
}

void HandlerPool::Stop() {
  std::deque<std::function<void()>> dropped;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
    dropped.swap(tasks_);
  }
  cv_.SignalAll();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  dropped.clear();  // outside the lock: a task's captures may run destructors that post
}

size_t HandlerPool::queued() const {
  absl::MutexLock lock(&mu_);
  return tasks_.size();
}

void HandlerPool::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && tasks_.empty()) cv_.Wait(&mu_);
      if (stopping_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {
      // A task answers its own errors; one that throws must not end the process.
      fprintf(stderr, "mxserve http: exception in a request handler: %s\n", e.what());
    }
  }
}

}  // namespace mxserve::frontends

// A fixed pool of threads for data-parallel loops in the CPU kernels and the dense runner.
#pragma once

#include <cstdint>
#include <functional>

namespace mxserve {

class ThreadPool {
 public:
  // num_threads <= 0: std::thread::hardware_concurrency(). The pool starts num_threads - 1
  // workers; the thread calling ParallelFor is the last one.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Calls fn(i) for i in [0, n), spread over the pool (the caller thread works too); returns
  // when all are done. Safe to call from several threads at once (calls are serialised). A
  // ParallelFor on this pool from inside fn runs inline on the calling thread (no deadlock).
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace mxserve

// ThreadPool: size()-1 worker threads plus the calling thread share each ParallelFor.
#include "core/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace mxserve {

namespace {
// The pool whose ParallelFor this thread is running inside (worker or caller). A nested
// ParallelFor on the same pool runs inline rather than deadlocking on the serialising lock.
thread_local const void* tls_inside_pool = nullptr;
}  // namespace

struct ThreadPool::Impl {
  int size = 1;
  std::vector<std::thread> threads;
  absl::Mutex call_mu;  // serialises ParallelFor calls from different threads
  absl::Mutex mu;
  bool stop ABSL_GUARDED_BY(mu) = false;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;  // bumps once per job
  bool open ABSL_GUARDED_BY(mu) = false;        // workers may still join the current job
  int active ABSL_GUARDED_BY(mu) = 0;           // workers inside the current job
  const std::function<void(int64_t)>* fn ABSL_GUARDED_BY(mu) = nullptr;
  int64_t n ABSL_GUARDED_BY(mu) = 0;
  std::atomic<int64_t> next{0};

  void RunItems(const std::function<void(int64_t)>& f, int64_t count) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      f(i);
    }
  }

  struct WaitArg {
    Impl* impl;
    uint64_t seen;
  };
  static bool JobReady(WaitArg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a->impl->stop || (a->impl->open && a->impl->generation != a->seen);
  }
  static bool Idle(Impl* i) ABSL_NO_THREAD_SAFETY_ANALYSIS { return i->active == 0; }

  void WorkerLoop() {
    tls_inside_pool = this;
    WaitArg arg{this, 0};
    uint64_t& seen = arg.seen;
    for (;;) {
      const std::function<void(int64_t)>* f;
      int64_t count;
      {
        absl::MutexLock lock(&mu);
        mu.Await(absl::Condition(&JobReady, &arg));
        if (stop) return;
        seen = generation;
        f = fn;
        count = n;
        ++active;
      }
      RunItems(*f, count);
      absl::MutexLock lock(&mu);
      --active;
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : impl_(new Impl) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (num_threads <= 0) num_threads = 1;
  impl_->size = num_threads;
  for (int i = 1; i < num_threads; ++i) {
    impl_->threads.emplace_back([this] { impl_->WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stop = true;
  }
  for (auto& t : impl_->threads) t.join();
  delete impl_;
}

int ThreadPool::size() const { return impl_->size; }

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || impl_->threads.empty() || tls_inside_pool == impl_) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  absl::MutexLock call_lock(&impl_->call_mu);
  const void* outer = tls_inside_pool;
  tls_inside_pool = impl_;
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->fn = &fn;
    impl_->n = n;
    impl_->next.store(0, std::memory_order_relaxed);
    ++impl_->generation;
    impl_->open = true;
  }
  impl_->RunItems(fn, n);
  {
    // Every index has been claimed; close the job to late joiners and wait for the workers
    // still finishing their last item.
    absl::MutexLock lock(&impl_->mu);
    impl_->open = false;
    impl_->mu.Await(absl::Condition(&Impl::Idle, impl_));
    impl_->fn = nullptr;
  }
  tls_inside_pool = outer;
}

}  // namespace mxserve

// A fixed set of threads that run the HTTP front door's heavy handlers (JSON parsing, chat
// rendering, tokenizing), so that the I/O threads only move bytes and answer the probes.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace mxserve::frontends {

class HandlerPool {
 public:
  // num_threads >= 1.
  explicit HandlerPool(int num_threads);
  ~HandlerPool();  // Stop()
  HandlerPool(const HandlerPool&) = delete;
  HandlerPool& operator=(const HandlerPool&) = delete;

  // Runs `task` on a pool thread, in submission order among free threads. False (and `task`
  // is dropped) once Stop has begun. The queue needs no bound of its own: the HTTP server
  // hands over at most one request per connection at a time, and connections are capped.
  bool Post(std::function<void()> task);
  // Drops what has not started, waits for the running tasks and joins. Idempotent.
  void Stop();
  // Tasks queued and not yet started (for tests).
  size_t queued() const;

 private:
  void Loop();
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace mxserve::frontends

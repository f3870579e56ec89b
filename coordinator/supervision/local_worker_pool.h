// Starts N mxserve-worker processes on this machine (--local-workers N), each holding a
// contiguous range of experts, waits until each listens and reports SERVING, and stops them
// (SIGTERM, then SIGKILL after a grace period) and reaps them when destroyed. Children are
// killed by the kernel if the thread that started them dies (PR_SET_PDEATHSIG), so call
// Start from a thread that lives as long as the pool (the main thread).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace mxserve {

struct LocalWorkerPoolOptions {
  std::string worker_binary;      // path of mxserve-worker
  std::string model_dir;
  int num_workers = 1;
  int num_experts = 0;            // in the model; split contiguously (ContiguousRange)
  int threads_per_worker = 1;
  std::string host = "127.0.0.1";
  absl::Duration startup_timeout = absl::Minutes(5);  // port file + SERVING, all workers
  absl::Duration stop_grace = absl::Seconds(5);       // SIGTERM -> SIGKILL
};

class LocalWorkerPool {
 public:
  struct Worker {
    pid_t pid = -1;
    int first_expert = 0, end_expert = 0;  // [first, end)
    int port = 0;
    std::string address;                   // host:port once known
  };

  // Spawns the workers and waits (bounded by startup_timeout) for every one to be SERVING.
  // If one exits meanwhile, the error names it and its exit status; all are stopped then.
  static absl::StatusOr<std::unique_ptr<LocalWorkerPool>> Start(LocalWorkerPoolOptions options);
  ~LocalWorkerPool();  // Stop()
  LocalWorkerPool(const LocalWorkerPool&) = delete;
  LocalWorkerPool& operator=(const LocalWorkerPool&) = delete;

  const std::vector<Worker>& workers() const { return workers_; }
  std::vector<std::string> addresses() const;  // in expert order (worker 0 first)
  // SIGTERM all, wait up to stop_grace, SIGKILL the rest, reap all. Idempotent.
  void Stop();

 private:
  explicit LocalWorkerPool(LocalWorkerPoolOptions options) : options_(std::move(options)) {}
  absl::Status Spawn(int i);
  absl::Status WaitAllServing();

  LocalWorkerPoolOptions options_;
  std::string temp_dir_;
  std::vector<Worker> workers_;
};

}  // namespace mxserve

// Keeps local workers (--local-workers) alive: a thread that reaps a worker process that
// exited (any status or signal) and starts it again after an exponential backoff, SIGKILLs a
// worker the router reports hung (no answer to a health check: SIGSTOP, deadlock) so that it
// is restarted too, and points the router at the new process's address; the router re-admits
// it once it says SERVING. A crash loop (more than max_restarts in restart_window) or an exit
// with status 78 (EX_CONFIG: restarting cannot help) leaves the worker down. Every change is one
// stderr line and a counter in Stats().
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/router_stats.h"
#include "coordinator/supervision/local_worker_pool.h"

namespace mxserve {

struct SupervisorOptions {
  bool restart = true;                                // false: --no-restart / --max-restarts 0
  int max_restarts = 10;                              // per worker within restart_window
  absl::Duration restart_window = absl::Seconds(60);
  absl::Duration backoff_initial = absl::Milliseconds(100);  // doubles per failed start
  absl::Duration backoff_max = absl::Seconds(10);
  // A live worker the router cannot reach or get an answer from for this long is hung: SIGKILL.
  absl::Duration hang_grace = absl::Seconds(1);
  absl::Duration startup_timeout = absl::Minutes(5);  // a restarted worker must be SERVING by then
  absl::Duration poll = absl::Milliseconds(20);       // how often processes are checked
};

class Supervisor {
 public:
  // pool and router must outlive the supervisor; worker i is router backend i.
  Supervisor(LocalWorkerPool* pool, ExpertRouter* router, SupervisorOptions options);
  ~Supervisor();  // stops watching; the processes keep running (the pool stops them)
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  SupervisorStats Stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class Phase { kRunning, kKilling, kBackoff, kStarting, kFailed };
  struct Worker {
    Phase phase = Phase::kRunning;
    absl::Time restart_at, started;
    bool reconnected = false;
    int failed_starts = 0;              // exits before SERVING since the last SERVING
    std::deque<absl::Time> restarts;    // within restart_window
    SupervisedWorkerStats stats;
  };
  void Loop();
  void Tick(int i, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnExit(int i, int wstatus, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static const char* PhaseName(Phase p);

  LocalWorkerPool* const pool_;
  ExpertRouter* const router_;
  const SupervisorOptions options_;
  mutable absl::Mutex mu_;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace mxserve

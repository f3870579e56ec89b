// Starts N mxserve-worker processes on this machine (--local-workers N), each holding a
// contiguous range of experts (and with replicas > 1 the next replicas-1 ranges too, wrapping:
// Placement::Replicated), waits until each listens and reports SERVING, and stops them
// (SIGTERM, then SIGKILL after a grace period) and reaps them when destroyed. Children are
// killed by the kernel if the thread that started them dies (PR_SET_PDEATHSIG), so call
// Start from a thread that lives as long as the pool (the main thread).
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "wire/worker_auth.h"

namespace mxserve {

struct LocalWorkerPoolOptions {
  std::string worker_binary;      // path of mxserve-worker
  std::string model_dir;
  int num_workers = 1;
  int num_experts = 0;            // in the model; split contiguously (ContiguousRange)
  int replicas = 1;               // copies of each expert (1..num_workers)
  int threads_per_worker = 1;
  std::string host = "127.0.0.1";
  absl::Duration startup_timeout = absl::Minutes(5);  // port file + SERVING, all workers
  absl::Duration stop_grace = absl::Seconds(5);       // SIGTERM -> SIGKILL
  std::vector<std::string> extra_args;                // appended to every worker's flags
  // Worker i runs with --device=devices[i] ("cpu", "cuda:N") on every start, restarts too
  // (worker_devices.h assigns them). Empty: no --device flag (the worker's default, cpu).
  std::vector<std::string> devices;
  // The coordinator's worker token and TLS files, given to every worker: the token through
  // the child's environment (MXSERVE_WORKER_TOKEN; never on its command line, which every
  // local user can read in /proc), the TLS files (paths, no secret) as --tls-* flags. The
  // worker presents tls_cert/tls_key as its server certificate: one certificate for both
  // ends, valid for `host` or tls_server_name. Also used for the readiness checks.
  WorkerAuthOptions auth;
};

class LocalWorkerPool {
 public:
  struct Worker {
    pid_t pid = -1;
    int first_expert = 0, end_expert = 0;  // [first, end): its own range
    std::string experts;                   // --experts value ("0-3,4-7" with replicas)
    std::string device;                    // --device value; "" when none is passed
    int port = 0;
    std::string address;                   // host:port once known
  };

  // Spawns the workers and waits (bounded by startup_timeout) for every one to be SERVING.
  // If one exits meanwhile, the error names it and its exit status; all are stopped then.
  static absl::StatusOr<std::unique_ptr<LocalWorkerPool>> Start(LocalWorkerPoolOptions options);
  // "killed by signal 9 (Killed)", "exited with status 1": a waitpid status in words.
  static std::string DescribeExit(int wstatus);
  ~LocalWorkerPool();  // Stop()
  LocalWorkerPool(const LocalWorkerPool&) = delete;
  LocalWorkerPool& operator=(const LocalWorkerPool&) = delete;

  const std::vector<Worker>& workers() const { return workers_; }
  std::vector<std::string> addresses() const;  // in expert order (worker 0 first)
  // SIGTERM all, wait up to stop_grace, SIGKILL the rest, reap all. Idempotent.
  void Stop();

  // For the Supervisor (one thread; not safe against concurrent Stop):
  // Starts worker i again (its previous process must be reaped); its port becomes known later.
  // The new process dies with the calling thread (PR_SET_PDEATHSIG), i.e. the supervisor's.
  absl::Status Respawn(int i);
  // If worker i's process has ended: reaps it and returns its wait status.
  std::optional<int> Reap(int i);
  // Reads worker i's port file once written; returns its address ("" until then).
  std::string PollAddress(int i);
  // Sends sig to worker i's process if it runs.
  void Signal(int i, int sig);
  const LocalWorkerPoolOptions& options() const { return options_; }

  // The command line of worker i (argv[0] first) with the given --experts value and port file.
  static std::vector<std::string> WorkerArgs(const LocalWorkerPoolOptions& options, int i,
                                             const std::string& experts,
                                             const std::string& port_file);

 private:
  explicit LocalWorkerPool(LocalWorkerPoolOptions options) : options_(std::move(options)) {}
  absl::Status Spawn(int i);
  absl::Status WaitAllServing();

  LocalWorkerPoolOptions options_;
  std::string temp_dir_;
  std::vector<Worker> workers_;
};

}  // namespace mxserve

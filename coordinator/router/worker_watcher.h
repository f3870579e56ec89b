// Keeps a grpc.health.v1 Watch stream open to every worker (one thread each) and reports each
// change to a HealthSink (the ExpertRouter). Before each stream a Check with a short deadline
// makes sure the worker answers. A crash ends the stream at once; a hang (SIGSTOP: the socket
// stays open) is caught by the channel's keepalive (WorkerClientOptions), and a restarted or
// reconnected worker by the next Check. Streams are re-opened with backoff.
#pragma once

#include <memory>
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/router/worker_client.h"
#include "grpcpp/client_context.h"

namespace mxserve {

class HealthSink {
 public:
  virtual ~HealthSink() = default;
  // up: the worker said SERVING. unresponsive: down because it cannot be reached or did not
  // answer (crashed, hung, keepalive failed), as opposed to saying NOT_SERVING itself.
  virtual void OnWorkerHealth(int index, bool up, bool unresponsive, const std::string& reason) = 0;
};

struct WorkerWatcherOptions {
  absl::Duration probe_timeout = absl::Seconds(1);  // deadline of the Check before a stream
  absl::Duration backoff_initial = absl::Milliseconds(50);
  absl::Duration backoff_max = absl::Seconds(1);
};

class WorkerWatcher {
 public:
  // workers[i] is reported as index i; they and sink must outlive the watcher.
  WorkerWatcher(std::vector<WorkerClient*> workers, HealthSink* sink,
                WorkerWatcherOptions options = {});
  ~WorkerWatcher();  // cancels every stream and joins the threads
  WorkerWatcher(const WorkerWatcher&) = delete;
  WorkerWatcher& operator=(const WorkerWatcher&) = delete;

  // Something went wrong with worker i (a call failed, its address changed): drop its stream
  // and probe again now. The sink hears "up" again only from a fresh SERVING.
  void Poke(int i);

 private:
  struct Slot {
    WorkerClient* client = nullptr;
    grpc::ClientContext* ctx = nullptr;  // the call in progress, for TryCancel
    bool poked = false;
    std::thread thread;
  };
  void Loop(int i);
  // Sleeps up to d; false if stopping.
  bool Sleep(absl::Duration d);

  HealthSink* const sink_;
  const WorkerWatcherOptions options_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Slot> slots_;  // fixed after construction; each Slot's ctx and poked under mu_
};

}  // namespace mxserve

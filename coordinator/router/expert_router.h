// The MoeExecutor the model calls at each MoE layer: splits the layer's batch by expert group
// (Placement), sends each group's compact slice to one healthy host of the group, all groups in
// parallel, each call with a deadline, and adds the partial sums in a fixed group order. A call
// that fails with UNAVAILABLE or DEADLINE_EXCEEDED marks its backend down and is re-issued on
// another healthy replica (our retry, not gRPC's); a group with no healthy host waits up to
// RouterOptions::down_wait for one to come back, then fails with UNAVAILABLE. A group's slice
// does not depend on which replica serves it, so the result is the same bit for bit.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/models/moe_executor.h"
#include "coordinator/router/expert_backend.h"
#include "coordinator/router/placement.h"
#include "coordinator/router/router_stats.h"
#include "coordinator/router/worker_watcher.h"

namespace mxserve {

struct RouterOptions {
  absl::Duration call_timeout = absl::Seconds(5);  // deadline of a call (doubled per late retry, <= 8x)
  absl::Duration down_wait = absl::Seconds(30);    // bound on waiting for a group with no host up
  bool log_state_changes = true;                   // one stderr line per backend up/down change
};

class ExpertRouter final : public MoeExecutor, public HealthSink {
 public:
  // backends[b] is backend b of `placement`. Sizes must agree. All start up.
  static absl::StatusOr<std::unique_ptr<ExpertRouter>> Create(
      std::vector<std::unique_ptr<ExpertBackend>> backends, Placement placement,
      RouterOptions options = {});
  ~ExpertRouter() override;

  // MoeExecutor. Calls are serialised (one layer at a time, as the model runs them).
  absl::Status Run(const ExpertBatch& batch, float* out) override ABSL_LOCKS_EXCLUDED(mu_);

  // HealthSink: the watcher's (or a test's) view of backend `index`.
  void OnWorkerHealth(int index, bool up, bool unresponsive, const std::string& reason) override
      ABSL_LOCKS_EXCLUDED(health_mu_);
  // Takes ownership; it reports here and is poked when a call fails. Destroyed first.
  void AttachWatcher(std::unique_ptr<WorkerWatcher> watcher);
  // Backend b now listens at `address` (a restarted local worker): reconnects, marks it down
  // until it says SERVING there.
  absl::Status ReconnectBackend(int b, const std::string& address);
  // The process is stopping: calls waiting for a down group, and retries, end now with
  // UNAVAILABLE instead of holding the engine (and shutdown) for up to down_wait.
  void Shutdown() ABSL_LOCKS_EXCLUDED(health_mu_);
  // Marks b down (the supervisor saw its process exit), with a reason for the log.
  void MarkDown(int b, const std::string& reason) { OnWorkerHealth(b, false, false, reason); }

  bool IsUp(int b) const ABSL_LOCKS_EXCLUDED(health_mu_);
  // Since when b has been down for not answering or being unreachable (not for saying
  // NOT_SERVING, nor while a restarted process starts), if it is.
  std::optional<absl::Time> UnresponsiveSince(int b) const ABSL_LOCKS_EXCLUDED(health_mu_);
  // True if every expert has at least one backend up.
  bool AllExpertsServed() const ABSL_LOCKS_EXCLUDED(health_mu_);

  RouterStats Stats() const ABSL_LOCKS_EXCLUDED(health_mu_);
  // Admin view (GET /v1/workers): workers with state, address, experts and counters, the expert
  // groups with their hosts, router counters; `supervisor` adds pid/restarts per worker.
  std::string PlacementJson(const SupervisorStats* supervisor = nullptr) const;

  const Placement& placement() const { return placement_; }
  const RouterOptions& options() const { return options_; }
  int num_backends() const { return static_cast<int>(backends_.size()); }
  ExpertBackend& backend(int b) { return *backends_[b]; }

 private:
  class Fanout;
  // One group's compact slice of a layer's batch (buffers reused across calls).
  struct Slice {
    std::vector<int> tokens;      // positions in the full batch
    std::vector<float> x;         // [n, H]
    std::vector<int32_t> ids;     // [n, k], -1 where the slot is in another group
    std::vector<float> weights;   // [n, k]
    std::vector<float> out;       // [n, H]
    std::vector<int> row_of;      // [T]: the token's row here, or -1
    absl::Status status;
  };
  struct Health {
    BackendState state = BackendState::kUp;
    std::string reason = "SERVING";
    absl::Time since;
    bool unresponsive = false;      // down without having said NOT_SERVING itself
    absl::Time unresponsive_since;
    uint64_t changes = 0, calls = 0, failures = 0;
    LatencyHistogram latency;
  };

  ExpertRouter(std::vector<std::unique_ptr<ExpertBackend>> backends, Placement placement,
               RouterOptions options);
  // Runs group g's call on a healthy host, failing over / waiting as needed.
  absl::Status RunGroup(int g, const ExpertBatch& call, float* out) ABSL_LOCKS_EXCLUDED(health_mu_);
  // The first up host of g in the order used for `layer` (rotated per layer to spread load).
  int PickHost(int g, int layer) const ABSL_SHARED_LOCKS_REQUIRED(health_mu_);
  void Record(int b, const absl::Status& s, absl::Duration latency) ABSL_LOCKS_EXCLUDED(health_mu_);
  std::string GroupName(int g) const;

  std::vector<std::unique_ptr<ExpertBackend>> backends_;
  const Placement placement_;
  const RouterOptions options_;
  absl::Mutex mu_;
  std::vector<Slice> slices_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Fanout> fanout_;

  mutable absl::Mutex health_mu_;
  std::vector<Health> health_ ABSL_GUARDED_BY(health_mu_);
  uint64_t retries_ ABSL_GUARDED_BY(health_mu_) = 0;
  uint64_t failovers_ ABSL_GUARDED_BY(health_mu_) = 0;
  uint64_t waits_ ABSL_GUARDED_BY(health_mu_) = 0;
  uint64_t failed_calls_ ABSL_GUARDED_BY(health_mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(health_mu_) = false;
  std::unique_ptr<WorkerWatcher> watcher_;  // set once, before serving
};

// "0-3,8,10-11" for sorted ids.
std::string IdRanges(const std::vector<int>& ids);

}  // namespace mxserve

// How the coordinator builds its MoeExecutor for each deployment mode:
//   --local-workers 0      MakeInProcessRouter (experts loaded into this process)
//   --local-workers N      LocalWorkerPool::Start, then ConnectToWorkers(pool->addresses())
//   --workers h:p,h:p,...  ParseWorkerAddresses, then ConnectToWorkers
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/worker_client.h"
#include "coordinator/router/worker_watcher.h"
#include "core/model_config.h"
#include "core/safetensors.h"

namespace mxserve {

class ThreadPool;

// All experts of every layer loaded from ckpt into this process, one in-process backend.
absl::StatusOr<std::unique_ptr<ExpertRouter>> MakeInProcessRouter(
    const Checkpoint& ckpt, const ModelConfig& config, std::shared_ptr<ThreadPool> pool,
    RouterOptions options = {});

struct RemoteWorkersOptions {
  WorkerClientOptions client;  // name is set per worker ("worker I")
  RouterOptions router;
  absl::Duration ready_timeout = absl::Minutes(10);  // for all workers to report SERVING
  // Watch every worker (WorkerWatcher attached to the router): down/up tracking, re-admission.
  bool watch = true;
  WorkerWatcherOptions watcher;
  // If set (local workers, --expert-replicas): worker i must hold exactly ExpertsOf(i), and
  // this placement (with its groups) is used instead of one built from the answers.
  std::optional<Placement> placement;
};

// Waits until every worker is SERVING, asks each (Describe) which experts it holds, checks it
// serves this model (layers, experts, hidden and intermediate sizes), and builds the placement
// from the answers: an expert held by several workers gets them all (first = primary). Every
// expert must be held somewhere (FAILED_PRECONDITION names the first one that is not).
absl::StatusOr<std::unique_ptr<ExpertRouter>> ConnectToWorkers(
    const std::vector<std::string>& addresses, const ModelConfig& config,
    const RemoteWorkersOptions& options = {});

// "h1:p1,h2:p2" -> {"h1:p1", "h2:p2"}; an empty entry or one without a port is an error.
absl::StatusOr<std::vector<std::string>> ParseWorkerAddresses(std::string_view spec);

}  // namespace mxserve

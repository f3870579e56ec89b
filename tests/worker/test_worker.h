// Test support: an ExpertService on a real gRPC server (127.0.0.1, port 0) over a shard of a
// test checkpoint, in this process.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/router/expert_backend.h"
#include "core/model_config.h"
#include "experts/expert_shard.h"
#include "worker/expert_service.h"
#include "worker/worker_server.h"

namespace mxserve::testing {

struct RunningWorker {
  ModelConfig config;
  std::shared_ptr<const ExpertShard> shard;
  std::shared_ptr<ExpertService> service;
  std::unique_ptr<WorkerServer> server;
  // Loads the shard, hands it to the service and flips health to SERVING.
  absl::Status MakeReady();
};

// Listens (NOT_SERVING); the shard is loaded but not yet handed to the service unless `ready`.
absl::StatusOr<std::unique_ptr<RunningWorker>> StartWorker(const std::string& model_dir,
                                                           std::vector<int> experts,
                                                           bool ready = true,
                                                           bool allow_shared_memory = false);

WorkerModelInfo InfoFor(const ModelConfig& config, std::vector<int> experts);

// One expert call's data: T random tokens of width H, k slots each over `experts` (seeded).
struct CallData {
  int T, k, H;
  std::vector<float> x, w, out;
  std::vector<int32_t> ids;
  ExpertBatch call(int layer) const { return ExpertBatch{{T, k, x.data(), ids.data(), w.data()}, layer, H}; }
};
CallData MakeCall(int T, int k, int H, const std::vector<int>& experts, uint32_t seed);

}  // namespace mxserve::testing

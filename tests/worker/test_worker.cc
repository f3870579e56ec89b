#include "tests/worker/test_worker.h"

#include "core/safetensors.h"
#include "core/status.h"
#include "experts/expert_executor.h"
#include "tests/experts/test_checkpoint.h"

namespace mxserve::testing {

WorkerModelInfo InfoFor(const ModelConfig& config, std::vector<int> experts) {
  WorkerModelInfo info;
  info.model_type = config.model_type;
  info.num_layers = config.num_hidden_layers;
  info.num_experts = config.num_local_experts;
  info.hidden_size = config.hidden_size;
  info.intermediate_size = config.intermediate_size;
  info.experts = std::move(experts);
  return info;
}

absl::Status RunningWorker::MakeReady() {
  service->SetReady(std::make_shared<ShardExecutor>(shard, nullptr));
  server->SetServing(true);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RunningWorker>> StartWorker(const std::string& model_dir,
                                                           std::vector<int> experts, bool ready,
                                                           bool allow_shared_memory) {
  auto w = std::make_unique<RunningWorker>();
  ASSIGN_OR_RETURN(w->config, ModelConfig::Load(model_dir));
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(model_dir));
  ASSIGN_OR_RETURN(auto shard, ExpertShard::Load(*ckpt, w->config, experts));
  w->shard = std::move(shard);
  w->service = std::make_shared<ExpertService>(InfoFor(w->config, w->shard->experts()), allow_shared_memory);
  ASSIGN_OR_RETURN(w->server, WorkerServer::Start(WorkerServerOptions{}, w->service));
  if (ready) RETURN_IF_ERROR(w->MakeReady());
  return w;
}

CallData MakeCall(int T, int k, int H, const std::vector<int>& experts, uint32_t seed) {
  CallData c{T, k, H, RandomFloats(size_t(T) * H, seed), {}, std::vector<float>(size_t(T) * H), {}};
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < k; ++j) {
      c.ids.push_back(experts[(t + 3 * j + seed) % experts.size()]);
      c.w.push_back(0.25f * (j + 1));
    }
  }
  return c;
}

}  // namespace mxserve::testing

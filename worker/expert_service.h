// The gRPC mxserve.v1.ExpertWorker service: validates each RunExperts request against the
// model and this worker's expert set, runs it on an ExpertExecutor, answers in the request's
// dtype. Before SetReady it answers UNAVAILABLE (weights still loading).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "experts/expert_executor.h"
#include "mxserve/v1/expert_worker.grpc.pb.h"
#include "wire/shared_memory.h"

namespace mxserve {

// What the worker serves, known from config.json and --experts before any weight is loaded.
struct WorkerModelInfo {
  std::string model_type;
  int num_layers = 0;
  int num_experts = 0;     // in the model
  int hidden_size = 0;
  int intermediate_size = 0;
  std::vector<int> experts;  // global ids held here (sorted, unique)
  std::string device = "cpu";
  std::string activation = "swiglu_clamped";  // MoeActivationName of the held experts
};

class ExpertService final : public v1::ExpertWorker::Service {
 public:
  // allow_shared_memory: answer calls whose tensors are in a shared-memory object
  // (RunExpertsRequest.shm_*, wire/shared_memory.h); otherwise such calls fail
  // FAILED_PRECONDITION and the client goes back to bytes.
  explicit ExpertService(WorkerModelInfo info, bool allow_shared_memory = false);

  // Weights are resident: start answering RunExperts with this executor.
  void SetReady(std::shared_ptr<ExpertExecutor> executor) ABSL_LOCKS_EXCLUDED(mu_);
  bool ready() const ABSL_LOCKS_EXCLUDED(mu_);
  const WorkerModelInfo& info() const { return info_; }
  // RunExperts calls (unary, or one message of a stream) being handled now; used to drain before
  // shutting the server down.
  int in_flight() const { return in_flight_.load(); }

  grpc::Status RunExperts(grpc::ServerContext* ctx, const v1::RunExpertsRequest* req,
                          v1::RunExpertsResponse* resp) override;
  grpc::Status RunExpertsStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::ExpertStreamResponse, v1::ExpertStreamRequest>* stream) override;
  grpc::Status Describe(grpc::ServerContext* ctx, const v1::DescribeRequest* req,
                        v1::DescribeResponse* resp) override;

  // The whole handler minus gRPC: validation, decode, run, encode (also used by tests).
  absl::Status Handle(const v1::RunExpertsRequest& req, v1::RunExpertsResponse* resp);
  // Checks every field of the request; errors are INVALID_ARGUMENT naming the field.
  absl::Status Validate(const v1::RunExpertsRequest& req) const;

 private:
  // The mapping of a validated request's shared-memory object, its two ranges checked to fit
  // (`bytes` each) and not to overlap.
  absl::StatusOr<std::shared_ptr<const SharedMappings::Mapping>> MapShared(const v1::RunExpertsRequest& req,
                                                                           size_t bytes);

  const WorkerModelInfo info_;
  const bool allow_shared_memory_;
  SharedMappings shm_;
  std::vector<bool> held_;  // by global expert id
  std::atomic<int> in_flight_{0};
  mutable absl::Mutex mu_;
  std::shared_ptr<ExpertExecutor> executor_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mxserve

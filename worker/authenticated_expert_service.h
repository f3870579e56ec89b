// The worker's ExpertWorker as callers see it: each call must pass the checks of its
// WorkerAuthOptions (wire/worker_auth.h) before it reaches the ExpertService.
#pragma once

#include <memory>

#include "mxserve/v1/expert_worker.grpc.pb.h"
#include "wire/worker_auth.h"
#include "worker/expert_service.h"

namespace mxserve {

// ExpertWorker in front of an ExpertService: each call must carry the token (when one is set)
// and, with TLS on, arrive over a connection whose client certificate was verified (so the
// plaintext health port cannot reach the experts). Otherwise UNAUTHENTICATED.
class AuthenticatedExpertService final : public v1::ExpertWorker::Service {
 public:
  AuthenticatedExpertService(std::shared_ptr<ExpertService> inner, WorkerAuthOptions auth);
  grpc::Status RunExperts(grpc::ServerContext* ctx, const v1::RunExpertsRequest* req,
                          v1::RunExpertsResponse* resp) override;
  grpc::Status RunExpertsStream(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::ExpertStreamResponse, v1::ExpertStreamRequest>* stream) override;
  grpc::Status Describe(grpc::ServerContext* ctx, const v1::DescribeRequest* req,
                        v1::DescribeResponse* resp) override;
  // OK or UNAUTHENTICATED for one call.
  grpc::Status Check(const grpc::ServerContext& ctx) const;

 private:
  std::shared_ptr<ExpertService> inner_;
  WorkerAuthOptions auth_;
};

}  // namespace mxserve

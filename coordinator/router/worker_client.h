// An ExpertBackend reached over gRPC (mxserve.v1.ExpertWorker on host:port): explicit message
// sizes, keepalive, a deadline on every call, F32 activations on the wire by default (exact;
// BF16 halves the bytes). Also the readiness wait (grpc.health.v1 Check) and Describe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/router/expert_backend.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "mxserve/v1/expert_worker.grpc.pb.h"

namespace mxserve {

struct WorkerClientOptions {
  std::string name;                                  // for errors/logs; default "worker@ADDR"
  v1::TensorDType wire_dtype = v1::TENSOR_DTYPE_F32; // F32 or BF16
  int max_message_bytes = 256 << 20;                 // both directions (worker uses the same)
  absl::Duration keepalive_time = absl::Seconds(10); // a dead idle worker shows within ~20 s
  absl::Duration keepalive_timeout = absl::Seconds(10);
};

class WorkerClient final : public ExpertBackend {
 public:
  // Makes the channel (connects lazily; no I/O here). address is "host:port".
  static absl::StatusOr<std::unique_ptr<WorkerClient>> Create(const std::string& address,
                                                              WorkerClientOptions options = {});

  absl::Status RunExperts(const ExpertCall& call, float* out, absl::Time deadline) override;
  std::string name() const override { return name_; }
  const std::string& address() const { return address_; }

  // Polls grpc.health.v1 Check("mxserve.v1.ExpertWorker") until SERVING or `deadline`
  // (DEADLINE_EXCEEDED then, with the last answer seen).
  absl::Status WaitReady(absl::Time deadline);
  // One health Check: true if SERVING.
  absl::StatusOr<bool> IsServing(absl::Time deadline);
  absl::StatusOr<v1::DescribeResponse> Describe(absl::Time deadline);

 private:
  WorkerClient() = default;
  absl::Status Annotate(const absl::Status& s) const;

  std::string address_, name_;
  WorkerClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExpertWorker::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

}  // namespace mxserve

// The expert worker's gRPC server: ExpertService + grpc.health.v1 (NOT_SERVING until the
// weights are resident) + server reflection, with explicit message-size and keepalive limits.
// Used by mxserve-worker, by tests and by the RPC benchmark.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "wire/worker_auth.h"
#include "worker/expert_service.h"

namespace mxserve {

struct WorkerServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                               // 0 = let the kernel pick
  int max_message_bytes = 256 << 20;          // both directions
  // Accept client keepalive pings this often (the coordinator pings every 1 s by default, so
  // that a hung worker is noticed within ~2 s; see WorkerClientOptions).
  absl::Duration min_recv_ping_interval = absl::Milliseconds(500);
  // Who may call ExpertWorker (mutual TLS and/or a token; wire/worker_auth.h). Off = anyone.
  WorkerAuthOptions auth;
  // With TLS on: also listen in plaintext on this port (0 = pick) for Kubernetes gRPC health
  // probes, which cannot speak TLS; the experts refuse calls arriving there. -1 = no such port.
  int plaintext_health_port = -1;
  // gRPC server reflection: off unless asked for (it answers without the token or a client
  // certificate).
  bool reflection = false;
};

class WorkerServer {
 public:
  // Builds and starts the server with `service` registered, then sets health NOT_SERVING for
  // "" and "mxserve.v1.ExpertWorker" (gRPC's default service says SERVING at start).
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerServerOptions& options,
                                                             std::shared_ptr<ExpertService> service);
  ~WorkerServer();

  int port() const { return port_; }
  int plaintext_health_port() const { return health_port_; }  // 0 when there is none
  std::string address() const;  // host:port
  ExpertService& service() { return *service_; }
  // Flips grpc.health.v1 for "" and the ExpertWorker service.
  void SetServing(bool serving);
  // Stops accepting calls; in-flight calls get until `grace` to finish.
  void Shutdown(absl::Duration grace = absl::Seconds(5));
  void Wait();

 private:
  WorkerServer() = default;
  std::string host_;
  int port_ = 0;
  std::shared_ptr<ExpertService> service_;
  std::unique_ptr<grpc::Service> auth_service_;  // registered instead of service_ when auth is on
  int health_port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::atomic<bool> shut_down_{false};
};

}  // namespace mxserve

// The gRPC front door: mxserve.v1.Inference (Generate streaming, ListModels, Tokenize) on the
// callback API, with grpc.health.v1 (SERVING once the engine is ready) and server reflection.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/frontends/serving_context.h"

namespace mxserve::frontends {

struct GrpcServerOptions {
  std::string host = "0.0.0.0";
  int port = 50051;                        // 0 = pick a free port (see GrpcFrontend::port())
  int max_receive_message_bytes = 16 << 20;  // explicit, both ways (gRPC's default receive limit is 4 MB)
  int max_send_message_bytes = 16 << 20;
  // How often the health service re-reads ServingContext::ready.
  std::chrono::milliseconds health_poll{500};
  // gRPC server reflection (grpcurl without .proto files). Off unless asked for: it answers
  // without the API key (a plugin outside the services' key check), and the schema is in
  // proto/ for any client that needs it.
  bool reflection = false;
};

class GrpcFrontend {
 public:
  // Builds and starts a grpc::Server on host:port. The pointers in `ctx` must outlive it.
  static absl::StatusOr<std::unique_ptr<GrpcFrontend>> Start(ServingContext ctx,
                                                             GrpcServerOptions options);
  ~GrpcFrontend();
  int port() const;
  // Health goes NOT_SERVING, then the server stops; in-flight calls are cancelled through
  // ctx.engine, so shut the front doors down before the engine goes away.
  void Shutdown();
  // Re-reads readiness now and updates the health service (also done every health_poll).
  void RefreshHealth();

  struct Impl;

 private:
  explicit GrpcFrontend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxserve::frontends

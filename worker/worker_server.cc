#include "worker/worker_server.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/grpc_reflection.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "worker/authenticated_expert_service.h"

namespace mxserve {

namespace {
constexpr char kServiceName[] = "mxserve.v1.ExpertWorker";
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerServerOptions& options, std::shared_ptr<ExpertService> service) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port: ", options.port, " not in [0, 65535]"));
  }
  if (options.host.empty()) return absl::InvalidArgumentError("host: empty");
  // Both are process-wide switches; they must be set before the builder is made.
  grpc::EnableDefaultHealthCheckService(true);

  auto server = std::unique_ptr<WorkerServer>(new WorkerServer());
  server->host_ = options.host;
  server->service_ = std::move(service);
  grpc::ServerBuilder builder;
  ConfigureReflection(builder, options.reflection);
  const std::string host = options.host.find(':') != std::string::npos
                               ? absl::StrCat("[", options.host, "]")  // IPv6 literal
                               : options.host;
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      WorkerServerCredentials(options.auth);
  if (!creds.ok()) return creds.status();
  builder.AddListeningPort(absl::StrCat(host, ":", options.port), *creds, &server->port_);
  if (options.auth.tls() && options.plaintext_health_port >= 0) {
    builder.AddListeningPort(absl::StrCat(host, ":", options.plaintext_health_port),
                             grpc::InsecureServerCredentials(), &server->health_port_);
  }
  if (options.auth.enabled()) {
    server->auth_service_ =
        std::make_unique<AuthenticatedExpertService>(server->service_, options.auth);
    builder.RegisterService(server->auth_service_.get());
  } else {
    builder.RegisterService(server->service_.get());
  }
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Let the coordinator's keepalive pings through (the server default is one per 5 min and a
  // GOAWAY "too_many_pings" otherwise), also while no call is in flight.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(options.min_recv_ping_interval)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);  // 0 = unlimited
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("could not listen on ", host, ":", options.port, " (in use or bad host?)"));
  }
  server->SetServing(false);
  return server;
}

WorkerServer::~WorkerServer() { Shutdown(absl::ZeroDuration()); }

std::string WorkerServer::address() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return v6 ? absl::StrCat("[", host_, "]:", port_) : absl::StrCat(host_, ":", port_);
}

void WorkerServer::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving);
  health->SetServingStatus(kServiceName, serving);
}

void WorkerServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr || shut_down_.exchange(true)) return;
  // gRPC 1.51's Shutdown(deadline) waits for clients to drop idle connections, i.e. the whole
  // grace period while a coordinator is attached. So: go NOT_SERVING (the router stops
  // sending), let in-flight RunExperts finish (bounded by grace), then shut down at once.
  SetServing(false);
  const absl::Time deadline = absl::Now() + grace;
  while (service_->in_flight() > 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
  server_->Shutdown(absl::ToChronoTime(absl::Now()));
}

void WorkerServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace mxserve

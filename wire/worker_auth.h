// Who may call a worker: only the coordinator. Two mechanisms, usable together:
//  * mutual TLS (gRPC SSL credentials; CA, certificate and key are PEM files, e.g. a Kubernetes
//    secret mounted read-only): the worker requires and verifies a client certificate signed
//    by the CA, and the coordinator verifies the worker's;
//  * a shared token sent as "authorization: Bearer <token>" call metadata, compared in constant
//    time (the simpler option, e.g. inside one host or one VPC).
// grpc.health.v1 stays open (Kubernetes gRPC probes carry neither TLS nor metadata); with TLS
// on, a plaintext health-only port can be opened for them (WorkerServerOptions).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace mxserve {

struct WorkerAuthOptions {
  std::string token;     // shared secret; empty = no token
  std::string tls_ca;    // PEM file: the CA both sides' certificates chain to
  std::string tls_cert;  // PEM file: this side's certificate
  std::string tls_key;   // PEM file: this side's private key
  // Client only: the name the worker's certificate must carry, when it differs from the host in
  // the address (e.g. one certificate "mxserve-worker" for every pod of a StatefulSet).
  std::string tls_server_name;

  bool tls() const { return !tls_ca.empty() || !tls_cert.empty() || !tls_key.empty(); }
  bool enabled() const { return tls() || !token.empty(); }
  // Empty fields are taken from MXSERVE_WORKER_TOKEN, MXSERVE_TLS_CA, MXSERVE_TLS_CERT,
  // MXSERVE_TLS_KEY and MXSERVE_TLS_SERVER_NAME (local workers inherit the coordinator's).
  void FillFromEnv();
};

// Mutual-TLS server credentials (client certificate required and verified) when TLS is set,
// else insecure. InvalidArgument naming the flag for a missing or unreadable file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> WorkerServerCredentials(
    const WorkerAuthOptions& auth);
// TLS channel credentials presenting our certificate when TLS is set, else insecure.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> WorkerChannelCredentials(
    const WorkerAuthOptions& auth);
// Adds the token to one call's metadata (no-op without a token).
void AddWorkerToken(const WorkerAuthOptions& auth, grpc::ClientContext* ctx);

}  // namespace mxserve

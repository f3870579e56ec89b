#include "wire/worker_auth.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/channel_arguments.h"

namespace mxserve {
namespace {

void FillOne(std::string* field, const char* env) {
  if (!field->empty()) return;
  if (const char* v = std::getenv(env)) *field = v;
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": required with mutual TLS (--tls-ca, --tls-cert and --tls-key)"));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream s;
  s << f.rdbuf();
  std::string pem = s.str();
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return pem;
}

struct Pems {
  std::string ca, cert, key;
};

absl::StatusOr<Pems> ReadAll(const WorkerAuthOptions& auth) {
  Pems p;
  auto ca = ReadPem(auth.tls_ca, "--tls-ca");
  if (!ca.ok()) return ca.status();
  auto cert = ReadPem(auth.tls_cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  auto key = ReadPem(auth.tls_key, "--tls-key");
  if (!key.ok()) return key.status();
  p.ca = *std::move(ca);
  p.cert = *std::move(cert);
  p.key = *std::move(key);
  return p;
}

}  // namespace

void WorkerAuthOptions::FillFromEnv() {
  FillOne(&token, "MXSERVE_WORKER_TOKEN");
  FillOne(&tls_ca, "MXSERVE_TLS_CA");
  FillOne(&tls_cert, "MXSERVE_TLS_CERT");
  FillOne(&tls_key, "MXSERVE_TLS_KEY");
  FillOne(&tls_server_name, "MXSERVE_TLS_SERVER_NAME");
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> WorkerServerCredentials(
    const WorkerAuthOptions& auth) {
  if (!auth.tls()) return grpc::InsecureServerCredentials();
  absl::StatusOr<Pems> p = ReadAll(auth);
  if (!p.ok()) return p.status();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = p->ca;
  o.pem_key_cert_pairs.push_back({p->key, p->cert});
  return grpc::SslServerCredentials(o);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> WorkerChannelCredentials(
    const WorkerAuthOptions& auth) {
  if (!auth.tls()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<Pems> p = ReadAll(auth);
  if (!p.ok()) return p.status();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = p->ca;
  o.pem_private_key = p->key;
  o.pem_cert_chain = p->cert;
  return grpc::SslCredentials(o);
}

void AddWorkerToken(const WorkerAuthOptions& auth, grpc::ClientContext* ctx) {
  if (!auth.token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", auth.token));
}

}  // namespace mxserve

#include "worker/authenticated_expert_service.h"

#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"
#include "wire/constant_time.h"

namespace mxserve {

AuthenticatedExpertService::AuthenticatedExpertService(std::shared_ptr<ExpertService> inner,
                                                       WorkerAuthOptions auth)
    : inner_(std::move(inner)), auth_(std::move(auth)) {}

grpc::Status AuthenticatedExpertService::Check(const grpc::ServerContext& ctx) const {
  if (auth_.tls()) {
    std::shared_ptr<const grpc::AuthContext> ac = ctx.auth_context();
    if (!ac || !ac->IsPeerAuthenticated()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the expert service needs a verified client certificate (mutual TLS)");
    }
  }
  if (!auth_.token.empty()) {
    const auto& md = ctx.client_metadata();
    auto it = md.find("authorization");
    std::string_view token;
    if (it != md.end()) {
      absl::string_view v(it->second.data(), it->second.size());
      v = absl::StripAsciiWhitespace(v);
      if (absl::StartsWithIgnoreCase(v, "bearer ")) {
        absl::string_view t = absl::StripAsciiWhitespace(v.substr(7));
        token = std::string_view(t.data(), t.size());
      }
    }
    if (token.empty() || !ConstantTimeEquals(token, auth_.token)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          token.empty() ? "missing worker token" : "wrong worker token");
    }
  }
  return grpc::Status::OK;
}

grpc::Status AuthenticatedExpertService::RunExperts(grpc::ServerContext* ctx,
                                                    const v1::RunExpertsRequest* req,
                                                    v1::RunExpertsResponse* resp) {
  if (grpc::Status s = Check(*ctx); !s.ok()) return s;
  return inner_->RunExperts(ctx, req, resp);
}

grpc::Status AuthenticatedExpertService::RunExpertsStream(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::ExpertStreamResponse, v1::ExpertStreamRequest>* stream) {
  if (grpc::Status s = Check(*ctx); !s.ok()) return s;
  return inner_->RunExpertsStream(ctx, stream);
}

grpc::Status AuthenticatedExpertService::Describe(grpc::ServerContext* ctx,
                                                  const v1::DescribeRequest* req,
                                                  v1::DescribeResponse* resp) {
  if (grpc::Status s = Check(*ctx); !s.ok()) return s;
  return inner_->Describe(ctx, req, resp);
}

}  // namespace mxserve

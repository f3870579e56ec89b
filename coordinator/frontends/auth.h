// API-key authentication for the public front doors: HTTP "Authorization: Bearer <key>" and
// gRPC metadata "authorization" on mxserve.v1.Inference. Keys compare in constant time. The
// probe and scrape endpoints (/health*, /v2/health/*, /v2/models/<id>/ready, /ping, /metrics,
// grpc.health.v1) stay open so that load balancers and Kubernetes probes need no secret.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <grpcpp/support/string_ref.h>

#include "absl/status/status.h"

namespace mxserve::frontends {

// The token of "Bearer <token>" (scheme case-insensitive, surrounding blanks ignored), or
// nullopt for any other shape.
std::optional<std::string_view> BearerToken(std::string_view authorization);

// OK when `api_key` is empty (auth off) or `authorization` is "Bearer <api_key>"; otherwise
// Unauthenticated (HTTP 401, gRPC UNAUTHENTICATED) carrying the OpenAI code "invalid_api_key".
absl::Status CheckApiKey(std::string_view api_key, std::string_view authorization);

// The same for a gRPC call's client metadata.
absl::Status CheckApiKey(std::string_view api_key,
                         const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

// Paths the HTTP door answers without a key: liveness/readiness probes (KServe v2's
// /v2/models/<id>/ready included) and /metrics.
bool IsOpenPath(std::string_view path);

// --api-key if given, else the MXSERVE_API_KEY environment variable (preferred: a flag shows
// in `ps`), else "" (auth off).
std::string ApiKeyFromFlagOrEnv(const std::string& flag_value);

}  // namespace mxserve::frontends

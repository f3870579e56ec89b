// The one place that maps absl::Status to gRPC statuses, HTTP status codes and OpenAI error
// types. Codes by retry meaning: UNAVAILABLE = retry elsewhere, RESOURCE_EXHAUSTED =
// backpressure (retry later), FAILED_PRECONDITION = do not retry.
#pragma once

#include <string_view>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace mxserve {

grpc::Status ToGrpcStatus(const absl::Status& s);
absl::Status FromGrpcStatus(const grpc::Status& s);

// InvalidArgument/OutOfRange/FailedPrecondition -> 400, Unauthenticated -> 401,
// PermissionDenied -> 403, NotFound -> 404, ResourceExhausted -> 429, Unavailable -> 503,
// DeadlineExceeded -> 504, OK -> 200, everything else -> 500.
int HttpStatusFor(const absl::Status& s);

// The OpenAI error "type" for the body {"error": {"message", "type", "param", "code"}}:
// invalid_request_error, authentication_error, permission_error, not_found_error,
// rate_limit_error, server_error.
std::string_view OpenAiErrorType(const absl::Status& s);

}  // namespace mxserve

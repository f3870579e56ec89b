#include "core/status_map.h"

#include <string>

namespace mxserve {

// absl::StatusCode and grpc::StatusCode share the canonical numbering (0..16).
grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  const int code = static_cast<int>(s.error_code());
  if (code < 0 || code > 16) return absl::UnknownError(s.error_message());
  return absl::Status(static_cast<absl::StatusCode>(code), s.error_message());
}

int HttpStatusFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string_view OpenAiErrorType(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return "invalid_request_error";
    case absl::StatusCode::kUnauthenticated: return "authentication_error";
    case absl::StatusCode::kPermissionDenied: return "permission_error";
    case absl::StatusCode::kNotFound: return "not_found_error";
    case absl::StatusCode::kResourceExhausted: return "rate_limit_error";
    default: return "server_error";
  }
}

}  // namespace mxserve

#include "core/status_map.h"

#include <gtest/gtest.h>

namespace mxserve {
namespace {

TEST(StatusMap, GrpcRoundTripKeepsCodeAndMessage) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status s(static_cast<absl::StatusCode>(code), code == 0 ? "" : "msg " + std::to_string(code));
    const grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    if (code != 0) {
      EXPECT_EQ(g.error_message(), "msg " + std::to_string(code));
    }
    EXPECT_EQ(FromGrpcStatus(g), s);
  }
  EXPECT_EQ(ToGrpcStatus(absl::UnavailableError("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "busy")).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(StatusMap, Http) {
  EXPECT_EQ(HttpStatusFor(absl::OkStatus()), 200);
  EXPECT_EQ(HttpStatusFor(absl::InvalidArgumentError("")), 400);
  EXPECT_EQ(HttpStatusFor(absl::OutOfRangeError("")), 400);
  EXPECT_EQ(HttpStatusFor(absl::FailedPreconditionError("")), 400);
  EXPECT_EQ(HttpStatusFor(absl::UnauthenticatedError("")), 401);
  EXPECT_EQ(HttpStatusFor(absl::PermissionDeniedError("")), 403);
  EXPECT_EQ(HttpStatusFor(absl::NotFoundError("")), 404);
  EXPECT_EQ(HttpStatusFor(absl::ResourceExhaustedError("")), 429);
  EXPECT_EQ(HttpStatusFor(absl::UnavailableError("")), 503);
  EXPECT_EQ(HttpStatusFor(absl::DeadlineExceededError("")), 504);
  EXPECT_EQ(HttpStatusFor(absl::InternalError("")), 500);
  EXPECT_EQ(HttpStatusFor(absl::DataLossError("")), 500);
}

TEST(StatusMap, OpenAiType) {
  EXPECT_EQ(OpenAiErrorType(absl::InvalidArgumentError("")), "invalid_request_error");
  EXPECT_EQ(OpenAiErrorType(absl::NotFoundError("")), "not_found_error");
  EXPECT_EQ(OpenAiErrorType(absl::ResourceExhaustedError("")), "rate_limit_error");
  EXPECT_EQ(OpenAiErrorType(absl::UnauthenticatedError("")), "authentication_error");
  EXPECT_EQ(OpenAiErrorType(absl::PermissionDeniedError("")), "permission_error");
  EXPECT_EQ(OpenAiErrorType(absl::InternalError("")), "server_error");
  EXPECT_EQ(OpenAiErrorType(absl::UnavailableError("")), "server_error");
}

}  // namespace
}  // namespace mxserve

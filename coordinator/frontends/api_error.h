// Request-validation errors shared by the HTTP and gRPC front doors: an absl::Status that also
// carries the offending request field ("param") and an OpenAI error code as payloads, so one
// validator serves both doors (HTTP shows them in the error body, gRPC names the field).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace mxserve::frontends {

inline constexpr absl::string_view kParamPayload = "mxserve.param";
inline constexpr absl::string_view kCodePayload = "mxserve.code";

inline absl::Status WithParam(absl::Status status, absl::string_view param,
                              absl::string_view code = "") {
  if (!param.empty()) status.SetPayload(kParamPayload, absl::Cord(param));
  if (!code.empty()) status.SetPayload(kCodePayload, absl::Cord(code));
  return status;
}

// InvalidArgument naming `param`.
inline absl::Status InvalidParam(absl::string_view param, absl::string_view message,
                                 absl::string_view code = "invalid_value") {
  return WithParam(absl::InvalidArgumentError(message), param, code);
}

inline std::optional<std::string> ParamOf(const absl::Status& status) {
  auto p = status.GetPayload(kParamPayload);
  if (!p) return std::nullopt;
  return std::string(*p);
}

inline std::optional<std::string> CodeOf(const absl::Status& status) {
  auto p = status.GetPayload(kCodePayload);
  if (!p) return std::nullopt;
  return std::string(*p);
}

}  // namespace mxserve::frontends

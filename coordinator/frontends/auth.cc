#include "coordinator/frontends/auth.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "coordinator/frontends/api_error.h"
#include "wire/constant_time.h"

namespace mxserve::frontends {
namespace {

// std::string_view helpers (Debian's abseil has its own string_view type).
std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(s[i])) !=
        absl::ascii_tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  }
  return true;
}

}  // namespace

std::optional<std::string_view> BearerToken(std::string_view authorization) {
  std::string_view v = Trim(authorization);
  constexpr std::string_view kScheme = "bearer";
  if (v.size() <= kScheme.size() || !StartsWithIgnoreCase(v, kScheme) ||
      (v[kScheme.size()] != ' ' && v[kScheme.size()] != '\t')) {
    return std::nullopt;
  }
  std::string_view token = Trim(v.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

absl::Status CheckApiKey(std::string_view api_key, std::string_view authorization) {
  if (api_key.empty()) return absl::OkStatus();
  if (authorization.empty()) {
    return WithParam(absl::UnauthenticatedError(
                         "You didn't provide an API key. Send it in the Authorization header "
                         "(Authorization: Bearer YOUR_KEY)."),
                     "", "invalid_api_key");
  }
  std::optional<std::string_view> token = BearerToken(authorization);
  if (!token || !ConstantTimeEquals(*token, api_key)) {
    // Never echo the key back: a log of the error body must not leak a near-miss secret.
    return WithParam(absl::UnauthenticatedError("Incorrect API key provided."), "",
                     "invalid_api_key");
  }
  return absl::OkStatus();
}

absl::Status CheckApiKey(std::string_view api_key,
                         const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  if (api_key.empty()) return absl::OkStatus();
  auto it = metadata.find("authorization");
  std::string_view value;
  if (it != metadata.end()) value = std::string_view(it->second.data(), it->second.size());
  return CheckApiKey(api_key, value);
}

bool IsOpenPath(std::string_view path) {
  if (path == "/health" || path.substr(0, 8) == "/health/" ||
      path.substr(0, 11) == "/v2/health/" || path == "/ping" || path == "/metrics") {
    return true;
  }
  // KServe v2's per-model readiness probe: /v2/models/<id>/ready (one path segment for <id>).
  constexpr std::string_view kPrefix = "/v2/models/", kSuffix = "/ready";
  if (path.size() <= kPrefix.size() + kSuffix.size() || path.substr(0, kPrefix.size()) != kPrefix ||
      path.substr(path.size() - kSuffix.size()) != kSuffix) {
    return false;
  }
  const std::string_view id =
      path.substr(kPrefix.size(), path.size() - kPrefix.size() - kSuffix.size());
  return id.find('/') == std::string_view::npos;
}

std::string ApiKeyFromFlagOrEnv(const std::string& flag_value) {
  if (!flag_value.empty()) return flag_value;
  const char* env = std::getenv("MXSERVE_API_KEY");
  return env ? std::string(env) : std::string();
}

}  // namespace mxserve::frontends

// Parsing JSON that a client sent (HTTP bodies, gRPC fields holding JSON, tool-call arguments):
// nesting depth is bounded and a key given twice in one object is refused, both while parsing,
// so no recursive walk (copy, dump, template) ever sees a document deeper than the bound.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mxserve {

// Objects and arrays nested deeper than this are refused. The outermost value is level 1; an
// OpenAI chat body with a tool schema reaches level 7 at `properties.<name>`, so 64 leaves a
// schema some 55 levels of its own, and bounds every recursion over the parsed value.
inline constexpr int kMaxClientJsonDepth = 64;

struct BoundedJsonLimits {
  int max_depth = kMaxClientJsonDepth;
  bool refuse_duplicate_keys = true;  // RFC 8259 leaves them undefined; nlohmann keeps the last
};

// Why a document was refused, for callers that name the offending field.
struct BoundedJsonError {
  enum class Kind { kSyntax, kTooDeep, kDuplicateKey };
  Kind kind = Kind::kSyntax;
  // Where: "messages[0].role" for a duplicate key (the key included), the container that
  // exceeded the depth for kTooDeep, cut after 8 levels ("tools[0].function.parameters[0][0]
  // [0][0]..."), "" for syntax errors.
  std::string path;
};

// The parsed value, or InvalidArgument: "not valid JSON: <parser message with byte offset>",
// "nested deeper than 64 levels (the limit) at PATH", "duplicate key \"K\" at PATH". Builds the
// value iteratively (nlohmann's SAX interface), in time linear in the text's length.
template <typename BasicJson = nlohmann::json>
absl::StatusOr<BasicJson> ParseBoundedJson(std::string_view text,
                                           const BoundedJsonLimits& limits = {},
                                           BoundedJsonError* error = nullptr);

extern template absl::StatusOr<nlohmann::json> ParseBoundedJson<nlohmann::json>(
    std::string_view, const BoundedJsonLimits&, BoundedJsonError*);
extern template absl::StatusOr<nlohmann::ordered_json> ParseBoundedJson<nlohmann::ordered_json>(
    std::string_view, const BoundedJsonLimits&, BoundedJsonError*);

}  // namespace mxserve

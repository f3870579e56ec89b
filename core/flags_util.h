// Helpers for command-line flags shared by the binaries (e.g. --experts 0-15).
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

// Parses an id list such as "0-15" or "0,3,5-7" into sorted unique ids, each in [0, limit).
// Errors name the offending part: "id list '0,x': 'x' is not a non-negative integer".
absl::StatusOr<std::vector<int>> ParseIdList(std::string_view spec, int limit);

}  // namespace mxserve

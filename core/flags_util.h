// Helpers for command-line flags shared by the binaries (e.g. --experts 0-15).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

// Parses an id list such as "0-15" or "0,3,5-7" into sorted unique ids, each in [0, limit).
// Errors name the offending part: "id list '0,x': 'x' is not a non-negative integer".
absl::StatusOr<std::vector<int>> ParseIdList(std::string_view spec, int limit);

// absl spells flag names with '_' only; users (and systemd units) write --http-port. Returns
// argv with '-' turned into '_' inside every "--flag-name" (values untouched). Keep the result
// alive while the char* vector from FlagArgv is used.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv);
std::vector<char*> FlagArgv(std::vector<std::string>& normalized);

}  // namespace mxserve

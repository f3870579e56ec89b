// Function tools in harmony: the TypeScript-like `namespace functions { ... }` the gpt-oss HF chat
// template writes into the developer message, and Python-json.dumps-style JSON (its `tojson`).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mxserve {

// tools: the OpenAI "tools" array ([{"type": "function", "function": {name, description,
// parameters}}]). Returns "## functions\n\nnamespace functions {\n\n...} // namespace functions".
absl::StatusOr<std::string> RenderHarmonyToolNamespace(const nlohmann::ordered_json& tools);

// Python's json.dumps(v, ensure_ascii=False) (separators ", " and ": ").
std::string PythonJsonDumps(const nlohmann::ordered_json& v);

}  // namespace mxserve

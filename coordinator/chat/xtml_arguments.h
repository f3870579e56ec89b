// A tool call's arguments as Kimi K3's XTML renderer writes them into an assistant turn: one
// (key, type, text) triple per top-level key of the JSON object, or the raw text when the
// arguments are not a JSON object (docs/MODELS.md, "Chat formats").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace mxserve {

struct XtmlArgument {
  std::string key;
  std::string type;  // string | number | boolean | null | object | array
  std::string text;  // strings decoded; any other value its JSON text exactly as written
};

struct XtmlArguments {
  std::vector<XtmlArgument> args;       // in order, repeated keys kept
  std::optional<std::string> raw_json;  // set: render `<|open|>json type="object"<|sep|>RAW...`
};

// Arguments given as JSON text, read one level deep the way encoding_k3.py does with Python's
// json scanner (strict=False: raw control characters allowed in strings; NaN, Infinity and
// -Infinity are numbers): "" has no arguments; text after the object's closing brace is
// ignored; anything that is not a JSON object (malformed, whitespace only, an array) is kept
// whole as raw_json. InvalidArgument naming `where` only for what Python itself could not
// render: nesting beyond 512 levels, or a \u escape that leaves a lone surrogate.
absl::StatusOr<XtmlArguments> XtmlArgumentsFromText(std::string_view text, const std::string& where);

// A call's function.arguments: text as above, an object one triple per key (non-strings as
// Python's json.dumps writes them), absent or null none; anything else InvalidArgument naming
// `where`.
absl::StatusOr<XtmlArguments> XtmlArgumentsOf(const nlohmann::ordered_json& function,
                                              const std::string& where);

}  // namespace mxserve

// Reads a request's structured-output fields — OpenAI's response_format (text, json_object,
// json_schema), vLLM's structured_outputs {json, regex, choice, json_object} and the older
// guided_json / guided_regex / guided_choice — and compiles the one given into a grammar.
// Errors name the field (param) and, for a schema or regex the engine cannot do, the keyword.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "coordinator/grammar/compiled_grammar.h"
#include "nlohmann/json.hpp"

namespace mxserve::frontends {

// Null when the request asks for free text. InvalidArgument (with param) when more than one
// constraint is given, or one is malformed or unsupported.
absl::StatusOr<std::shared_ptr<grammar::CompiledGrammar>> ReadStructuredOutput(
    const nlohmann::json& body);

}  // namespace mxserve::frontends

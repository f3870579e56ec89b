// What a request asks its output to be (response_format json_object / json_schema, vLLM's
// guided_json / guided_regex / guided_choice), compiled into a CompiledGrammar.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/grammar/compiled_grammar.h"
#include "nlohmann/json.hpp"

namespace mxserve::grammar {

struct StructuredOutputSpec {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kChoice };
  Kind kind = Kind::kJsonObject;
  nlohmann::json schema;             // kJsonSchema
  std::string regex;                 // kRegex
  std::vector<std::string> choices;  // kChoice: the output is exactly one of them
};

// InvalidArgument naming the unsupported keyword / construct for what the engine cannot do.
absl::StatusOr<std::shared_ptr<CompiledGrammar>> CompileStructuredOutput(
    const StructuredOutputSpec& spec);

}  // namespace mxserve::grammar

// Compiles a JSON Schema into a Grammar for compact JSON text: the subset OpenAI's strict mode
// allows (type string/number/integer/boolean/null/object/array or a list of them, properties,
// required, additionalProperties true/false, items, enum, const, anyOf, $ref into $defs /
// definitions / any JSON pointer of the document, recursion included) plus annotations (title,
// description, $schema, $id, $comment, examples, default). Any other keyword is refused with
// InvalidArgument naming it and where it is.
// Whitespace is bounded, as xgrammar's any_whitespace=False: none, except at most one space
// after ':' and ','. Object properties are written in the order the schema lists them
// (nlohmann::json's order: sorted by name); optional ones may be left out; no others appear.
// Numbers are bounded so that every one is finite and fits an int64 / a double: at most 18
// integer digits, 20 fraction digits and 2 exponent digits. String \u escapes are never lone
// surrogates.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "coordinator/grammar/grammar.h"
#include "nlohmann/json.hpp"

namespace mxserve::grammar {

// A rule matching exactly the compact JSON texts valid under `schema`.
absl::StatusOr<int32_t> CompileJsonSchemaRule(const nlohmann::json& schema, Grammar* grammar);

// A rule matching any JSON object (response_format {"type": "json_object"}).
int32_t CompileAnyJsonObjectRule(Grammar* grammar);

}  // namespace mxserve::grammar

#include "coordinator/frontends/structured_output_fields.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/frontends/api_error.h"
#include "coordinator/grammar/structured_output.h"
#include "core/status.h"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;
using grammar::StructuredOutputSpec;

struct Found {
  std::string param;  // the field that asked, for errors
  StructuredOutputSpec spec;
};

const json* Member(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// A schema given as an object, or as a string holding one (vLLM accepts both).
absl::StatusOr<json> SchemaValue(const json& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    json parsed = json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded() && parsed.is_object()) return parsed;
  }
  return InvalidParam(param, absl::StrCat("'", param, "' must be a JSON Schema object"));
}

absl::StatusOr<StructuredOutputSpec> Regex(const json& v, const std::string& param) {
  if (!v.is_string()) return InvalidParam(param, absl::StrCat("'", param, "' must be a string"));
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kRegex;
  spec.regex = v.get<std::string>();
  return spec;
}

absl::StatusOr<StructuredOutputSpec> Choice(const json& v, const std::string& param) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kChoice;
  if (v.is_array() && !v.empty()) {
    for (const json& c : v) {
      if (!c.is_string()) break;
      spec.choices.push_back(c.get<std::string>());
    }
  }
  if (spec.choices.empty() || spec.choices.size() != v.size()) {
    return InvalidParam(param, absl::StrCat("'", param, "' must be a non-empty array of strings"));
  }
  return spec;
}

absl::StatusOr<StructuredOutputSpec> Schema(const json& v, const std::string& param) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  ASSIGN_OR_RETURN(spec.schema, SchemaValue(v, param));
  return spec;
}

absl::StatusOr<std::optional<Found>> ResponseFormat(const json& body) {
  const json* rf = Member(body, "response_format");
  if (rf == nullptr) return std::nullopt;
  if (!rf->is_object()) return InvalidParam("response_format", "'response_format' must be an object");
  const json* type = Member(*rf, "type");
  const std::string t = type && type->is_string() ? type->get<std::string>() : "";
  if (t == "text") return std::nullopt;
  StructuredOutputSpec spec;
  if (t == "json_object") return Found{"response_format", spec};
  if (t == "json_schema") {
    const json* js = Member(*rf, "json_schema");
    if (js == nullptr || !js->is_object()) {
      return InvalidParam("response_format.json_schema",
                          "'response_format.json_schema' must be an object with 'name' and "
                          "'schema'");
    }
    const json* name = Member(*js, "name");
    if (name != nullptr && !name->is_string()) {
      return InvalidParam("response_format.json_schema.name", "'name' must be a string");
    }
    const json* strict = Member(*js, "strict");
    if (strict != nullptr && !strict->is_boolean()) {
      return InvalidParam("response_format.json_schema.strict", "'strict' must be a boolean");
    }
    const json* schema = Member(*js, "schema");
    if (schema == nullptr) {
      return InvalidParam("response_format.json_schema.schema",
                          "'response_format.json_schema.schema' is required");
    }
    ASSIGN_OR_RETURN(spec, Schema(*schema, "response_format.json_schema.schema"));
    return Found{"response_format.json_schema.schema", std::move(spec)};
  }
  return InvalidParam("response_format",
                      absl::StrCat("'response_format.type' must be \"text\", \"json_object\" or "
                                   "\"json_schema\", got ", type ? type->dump() : "nothing"));
}

absl::StatusOr<std::optional<Found>> StructuredOutputs(const json& body) {
  const json* so = Member(body, "structured_outputs");
  if (so == nullptr) return std::nullopt;
  if (!so->is_object()) {
    return InvalidParam("structured_outputs", "'structured_outputs' must be an object");
  }
  std::optional<Found> found;
  for (const auto& [key, value] : so->items()) {
    if (value.is_null()) continue;
    const std::string param = "structured_outputs." + key;
    StructuredOutputSpec spec;
    if (key == "json") {
      ASSIGN_OR_RETURN(spec, Schema(value, param));
    } else if (key == "regex") {
      ASSIGN_OR_RETURN(spec, Regex(value, param));
    } else if (key == "choice") {
      ASSIGN_OR_RETURN(spec, Choice(value, param));
    } else if (key == "json_object") {
      if (!value.is_boolean()) return InvalidParam(param, "'json_object' must be a boolean");
      if (!value.get<bool>()) continue;
    } else if (key == "grammar" || key == "structural_tag" || key == "whitespace_pattern") {
      return InvalidParam(param, absl::StrCat("'", param, "' is not supported"),
                          "unsupported_parameter");
    } else if (key == "disable_fallback" || key == "disable_any_whitespace" ||
               key == "disable_additional_properties") {
      continue;  // one engine, whitespace always bounded, extra properties never written
    } else {
      return InvalidParam(param, absl::StrCat("unknown field '", param, "'"));
    }
    if (found) {
      return InvalidParam(param, absl::StrCat("only one constraint may be given; '",
                                              found->param, "' already is"));
    }
    found = Found{param, std::move(spec)};
  }
  return found;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grammar::CompiledGrammar>> ReadStructuredOutput(const json& body) {
  std::vector<Found> all;
  ASSIGN_OR_RETURN(std::optional<Found> rf, ResponseFormat(body));
  if (rf) all.push_back(*std::move(rf));
  ASSIGN_OR_RETURN(std::optional<Found> so, StructuredOutputs(body));
  if (so) all.push_back(*std::move(so));
  if (const json* v = Member(body, "guided_json")) {
    ASSIGN_OR_RETURN(StructuredOutputSpec spec, Schema(*v, "guided_json"));
    all.push_back({"guided_json", std::move(spec)});
  }
  if (const json* v = Member(body, "guided_regex")) {
    ASSIGN_OR_RETURN(StructuredOutputSpec spec, Regex(*v, "guided_regex"));
    all.push_back({"guided_regex", std::move(spec)});
  }
  if (const json* v = Member(body, "guided_choice")) {
    ASSIGN_OR_RETURN(StructuredOutputSpec spec, Choice(*v, "guided_choice"));
    all.push_back({"guided_choice", std::move(spec)});
  }
  for (const char* unsupported : {"guided_grammar", "guided_whitespace_pattern"}) {
    if (Member(body, unsupported) != nullptr) {
      return InvalidParam(unsupported, absl::StrCat("'", unsupported, "' is not supported"),
                          "unsupported_parameter");
    }
  }
  if (all.empty()) return nullptr;
  if (all.size() > 1) {
    return InvalidParam(all[1].param, absl::StrCat("only one structured output constraint may "
                                                   "be given; got '", all[0].param, "' and '",
                                                   all[1].param, "'"));
  }
  absl::StatusOr<std::shared_ptr<grammar::CompiledGrammar>> g =
      grammar::CompileStructuredOutput(all[0].spec);
  if (!g.ok()) {
    return InvalidParam(all[0].param, absl::StrCat("'", all[0].param, "': ", g.status().message()),
                        "unsupported_value");
  }
  return g;
}

}  // namespace mxserve::frontends

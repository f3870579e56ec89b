#include "coordinator/chat/harmony_tools.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/chat/harmony_chat_template.h"

namespace mxserve {
namespace {

using ojson = nlohmann::ordered_json;

std::string Str(const ojson& v, const char* key) {
  if (!v.is_object() || !v.contains(key) || !v[key].is_string()) return "";
  return v[key].get<std::string>();
}

bool Truthy(const ojson& v, const char* key) {
  if (!v.is_object() || !v.contains(key)) return false;
  const ojson& x = v[key];
  if (x.is_boolean()) return x.get<bool>();
  if (x.is_null()) return false;
  if (x.is_string() || x.is_array() || x.is_object()) return !x.empty();
  return true;
}

bool InRequired(const ojson& required, const std::string& name) {
  if (!required.is_array()) return false;
  for (const auto& r : required)
    if (r.is_string() && r.get<std::string>() == name) return true;
  return false;
}

// Jinja's `"..." + value` for a default shown raw (enum / oneOf parameters).
std::string Raw(const ojson& v) { return v.is_string() ? v.get<std::string>() : PythonJsonDumps(v); }

// The HF template's render_typescript_type.
std::string TsType(const ojson& spec) {
  const std::string type = Str(spec, "type");
  const bool nullable = Truthy(spec, "nullable");
  if (type == "array") {
    std::string out;
    if (spec.contains("items")) {
      const std::string it = Str(spec["items"], "type");
      if (it == "string") out = "string[]";
      else if (it == "number" || it == "integer") out = "number[]";
      else if (it == "boolean") out = "boolean[]";
      else {
        std::string inner = TsType(spec["items"]);
        out = (inner == "object | object" || inner.size() > 50) ? "any[]" : inner + "[]";
      }
    } else {
      out = "any[]";
    }
    return nullable ? out + " | null" : out;
  }
  if (spec.is_object() && spec.contains("type") && spec["type"].is_array() && !spec["type"].empty()) {
    std::vector<std::string> parts;
    for (const auto& t : spec["type"]) parts.push_back(t.is_string() ? t.get<std::string>() : t.dump());
    return absl::StrJoin(parts, " | ");
  }
  if (Truthy(spec, "oneOf") && spec["oneOf"].is_array()) {
    const ojson& variants = spec["oneOf"];
    bool has_object = false;
    for (const auto& v : variants) has_object |= Str(v, "type") == "object";
    if (has_object && variants.size() > 1) return "any";
    std::string out;
    for (size_t i = 0; i < variants.size(); ++i) {
      out += TsType(variants[i]);
      if (Truthy(variants[i], "description")) out += "// " + Str(variants[i], "description");
      if (variants[i].contains("default")) out += "\n// default: " + PythonJsonDumps(variants[i]["default"]);
      if (i + 1 < variants.size()) out += " | \n";
    }
    return out;
  }
  if (type == "string") {
    if (Truthy(spec, "enum") && spec["enum"].is_array()) {
      std::vector<std::string> values;
      for (const auto& e : spec["enum"]) values.push_back(Raw(e));
      return "\"" + absl::StrJoin(values, "\" | \"") + "\"";
    }
    return nullable ? "string | null" : "string";
  }
  if (type == "number" || type == "integer") return "number";
  if (type == "boolean") return "boolean";
  if (type == "object") {
    if (!Truthy(spec, "properties") || !spec["properties"].is_object()) return "object";
    const ojson required = spec.contains("required") ? spec["required"] : ojson::array();
    std::string out = "{\n";
    size_t i = 0;
    for (auto it = spec["properties"].begin(); it != spec["properties"].end(); ++it, ++i) {
      // The template's whitespace: "name?: " then a newline and 16 spaces, then the type.
      absl::StrAppend(&out, it.key(), InRequired(required, it.key()) ? "" : "?", ": \n",
                      std::string(16, ' '), TsType(it.value()));
      if (i + 1 < spec["properties"].size()) out += ", ";
    }
    return out + "}";
  }
  return "any";
}

}  // namespace

std::string PythonJsonDumps(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        absl::StrAppend(&out, first ? "" : ", ", JsonQuote(it.key()), ": ",
                        PythonJsonDumps(it.value()));
        first = false;
      }
      return out + "}";
    }
    case ojson::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? ", " : "", PythonJsonDumps(v[i]));
      return out + "]";
    }
    case ojson::value_t::string: return JsonQuote(v.get<std::string>());
    case ojson::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case ojson::value_t::null: return "null";
    case ojson::value_t::number_float: {
      double d = v.get<double>();
      if (d == static_cast<double>(static_cast<long long>(d)) && std::abs(d) < 1e16)
        return absl::StrCat(static_cast<long long>(d), ".0");  // Python: 2.0, not 2
      return v.dump();
    }
    default: return v.dump();
  }
}

absl::StatusOr<std::string> RenderHarmonyToolNamespace(const ojson& tools) {
  if (!tools.is_array()) return absl::InvalidArgumentError("tools: expected an array");
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const ojson& fn = t.is_object() && t.contains("function") ? t["function"] : t;
    const std::string name = Str(fn, "name");
    if (name.empty())
      return absl::InvalidArgumentError(absl::StrCat("tools[", i, "].function.name: missing"));
    absl::StrAppend(&out, "// ", Str(fn, "description"), "\ntype ", name, " = ");
    const ojson params = fn.is_object() && fn.contains("parameters") ? fn["parameters"] : ojson();
    if (!Truthy(params, "properties") || !params["properties"].is_object()) {
      out += "() => any;\n\n";
      continue;
    }
    const ojson required = params.contains("required") ? params["required"] : ojson::array();
    out += "(_: {\n";
    for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
      const ojson& spec = it.value();
      if (Truthy(spec, "description")) absl::StrAppend(&out, "// ", Str(spec, "description"), "\n");
      absl::StrAppend(&out, it.key(), InRequired(required, it.key()) ? "" : "?", ": ",
                      TsType(spec));
      if (spec.is_object() && spec.contains("default")) {
        if (Truthy(spec, "enum")) {
          absl::StrAppend(&out, ", // default: ", Raw(spec["default"]));
        } else if (Truthy(spec, "oneOf")) {
          absl::StrAppend(&out, "// default: ", Raw(spec["default"]));
        } else {
          absl::StrAppend(&out, ", // default: ", PythonJsonDumps(spec["default"]));
        }
      }
      out += ",\n";
    }
    out += "}) => any;\n\n";
  }
  out += "} // namespace functions";
  return out;
}

}  // namespace mxserve

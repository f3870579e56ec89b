#include "coordinator/chat/template_inputs.h"

#include "absl/strings/str_cat.h"
#include "core/bounded_json.h"

namespace mxserve {

using ojson = nlohmann::ordered_json;

absl::StatusOr<ojson> ToolsForTemplate(const std::string& tools_json) {
  ojson out = ojson::array();
  if (tools_json.empty()) return out;
  auto parsed = ParseBoundedJson<ojson>(tools_json);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("tools: ", parsed.status().message()));
  if (!parsed->is_array()) return absl::InvalidArgumentError("tools: expected an array");
  for (size_t k = 0; k < parsed->size(); ++k) {
    const ojson& tool = (*parsed)[k];
    const std::string where = absl::StrCat("tools[", k, "]");
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".function: expected an object"));
    }
    const ojson& fn = tool["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".function.name: expected a string"));
    }
    // Declared fields first, in declaration order, then the extras pydantic keeps.
    ojson f = ojson::object();
    f["name"] = fn["name"];
    f["description"] = fn.contains("description") ? fn["description"] : ojson();
    f["parameters"] = fn.contains("parameters") ? fn["parameters"] : ojson();
    for (auto it = fn.begin(); it != fn.end(); ++it)
      if (!f.contains(it.key())) f[it.key()] = it.value();
    ojson t = ojson::object();
    t["type"] = tool.contains("type") ? tool["type"] : ojson("function");
    t["function"] = std::move(f);
    for (auto it = tool.begin(); it != tool.end(); ++it)
      if (!t.contains(it.key())) t[it.key()] = it.value();
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<ojson> ToolCallsForTemplate(const ChatMessage& m, size_t i) {
  if (m.tool_calls_json.empty()) return ojson::array();
  const std::string where = absl::StrCat("messages[", i, "].tool_calls");
  auto parsed = ParseBoundedJson<ojson>(m.tool_calls_json);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
  if (!parsed->is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected an array"));
  for (size_t k = 0; k < parsed->size(); ++k) {
    const ojson& call = (*parsed)[k];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
        !call["function"].contains("name") || !call["function"]["name"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "[", k, "].function.name: expected a string"));
    }
  }
  return *std::move(parsed);
}

absl::StatusOr<ojson> ArgumentsForTemplate(const ojson& function, const std::string& where) {
  if (!function.contains("arguments")) return ojson::object();
  const ojson& args = function["arguments"];
  if (!args.is_string()) return args.is_null() ? ojson::object() : args;
  const std::string& text = args.get_ref<const std::string&>();
  if (text.empty()) return ojson::object();
  BoundedJsonError why;
  auto parsed = ParseBoundedJson<ojson>(text, {}, &why);
  if (parsed.ok()) return *std::move(parsed);
  if (why.kind == BoundedJsonError::Kind::kSyntax) return args;  // not JSON: the text itself
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
}

}  // namespace mxserve

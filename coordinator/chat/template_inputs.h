// The request's tools and assistant tool calls as vLLM hands them to a model's Jinja chat
// template, for the templates that mirror one (Kimi, DeepSeek-V3): tools as its pydantic
// model_dump writes them, tool-call arguments parsed from their JSON text.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace mxserve {

// options.tools_json as an array ([] when absent): each tool {"type", "function": {"name",
// "description", "parameters", then any other keys}, then any other keys}, with null for a
// missing description or parameters. InvalidArgument naming the field on a malformed tool.
absl::StatusOr<nlohmann::ordered_json> ToolsForTemplate(const std::string& tools_json);

// An assistant message's tool_calls as an array ([] when none). Each call is an object with a
// "function" object holding a string "name"; InvalidArgument naming messages[i] otherwise.
absl::StatusOr<nlohmann::ordered_json> ToolCallsForTemplate(const ChatMessage& m, size_t i);

// A call's function.arguments as vLLM passes them: JSON text parsed to its value, absent or
// empty as {}; text that is not JSON stays the string it is. Too deep or a repeated key:
// InvalidArgument naming `where`.
absl::StatusOr<nlohmann::ordered_json> ArgumentsForTemplate(const nlohmann::ordered_json& function,
                                                            const std::string& where);

}  // namespace mxserve

#include "coordinator/frontends/responses_api.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/openai_api.h"
#include "core/bounded_json.h"
#include "core/status.h"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;

absl::Status Unsupported(absl::string_view param, absl::string_view why) {
  return InvalidParam(param, absl::StrCat("'", param, "' ", why), "unsupported_parameter");
}

// Absent and null are alike: "not given" (OpenAI's rule).
const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

// Every key of `obj` must be in `known`; `where` prefixes the name in the error ("" = top level).
absl::Status OnlyKnownKeys(const json& obj, const std::set<std::string>& known,
                           absl::string_view where, absl::string_view what) {
  for (const auto& [k, v] : obj.items()) {
    if (known.count(k)) continue;
    const std::string p = where.empty() ? k : absl::StrCat(where, ".", k);
    return InvalidParam(p, absl::StrCat("'", p, "' is not a supported field of ", what),
                        "unsupported_parameter");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> GetString(const json& obj, const char* key,
                                                     absl::string_view param) {
  const json* v = Field(obj, key);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return WrongType(param, "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

absl::StatusOr<std::string> RequiredString(const json& obj, const char* key,
                                           absl::string_view where) {
  const std::string p = absl::StrCat(where, ".", key);
  ASSIGN_OR_RETURN(auto s, GetString(obj, key, p));
  if (!s) return InvalidParam(p, absl::StrCat("'", p, "' is required"));
  return *s;
}

absl::StatusOr<std::optional<double>> GetNumber(const json& obj, const char* key) {
  const json* v = Field(obj, key);
  if (!v) return std::optional<double>();
  if (!v->is_number()) return WrongType(key, "a number", *v);
  double d = v->get<double>();
  if (!std::isfinite(d)) return InvalidParam(key, absl::StrCat("'", key, "' must be finite"));
  return std::optional<double>(d);
}

absl::StatusOr<std::optional<int64_t>> GetInt(const json& obj, const char* key) {
  const json* v = Field(obj, key);
  if (!v) return std::optional<int64_t>();
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidParam(key, absl::StrCat("'", key, "' is out of range"));
  }
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  if (v->is_number_float()) {  // 5.0 is 5, as pydantic reads it in vLLM
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
  }
  return WrongType(key, "an integer", *v);
}

absl::StatusOr<std::optional<bool>> GetBool(const json& obj, const char* key) {
  const json* v = Field(obj, key);
  if (!v) return std::optional<bool>();
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

absl::StatusOr<json> ParseBody(absl::string_view body) {
  size_t bad = 0;
  if (!IsValidUtf8(body, &bad)) {
    return InvalidParam("", absl::StrCat("Request body is not valid UTF-8 (bad byte at offset ",
                                         bad, ")"),
                        "invalid_utf8");
  }
  BoundedJsonError where;
  absl::StatusOr<json> parsed =
      ParseBoundedJson<json>(std::string_view(body.data(), body.size()), {}, &where);
  if (!parsed.ok()) {
    switch (where.kind) {
      case BoundedJsonError::Kind::kSyntax:
        return InvalidParam("", absl::StrCat("Request body is ", parsed.status().message()),
                            "invalid_json");
      case BoundedJsonError::Kind::kTooDeep:
        return InvalidParam(where.path, absl::StrCat("Request body is ", parsed.status().message()),
                            "json_too_deep");
      case BoundedJsonError::Kind::kDuplicateKey:
        return InvalidParam(where.path,
                            absl::StrCat("Request body has a ", parsed.status().message()),
                            "duplicate_key");
    }
  }
  json j = *std::move(parsed);
  if (!j.is_object()) {
    return InvalidParam("", absl::StrCat("Request body must be a JSON object, got ", TypeName(j)),
                        "invalid_json");
  }
  return j;
}

// The top-level fields /v1/responses takes. Those marked in ReadFixedFields are accepted only
// at the one value the server honours.
const std::set<std::string>& KnownFields() {
  static const std::set<std::string> k = {
      "model", "input", "instructions", "tools", "tool_choice", "max_output_tokens",
      "temperature", "top_p", "top_k", "reasoning", "stream", "store", "previous_response_id",
      "metadata", "user", "parallel_tool_calls", "truncation", "service_tier", "background",
      "include", "top_logprobs", "max_tool_calls", "text", "prompt", "request_id", "priority",
      "cache_salt", "enable_response_messages", "skip_special_tokens", "previous_input_messages",
      "logit_bias", "mm_processor_kwargs"};
  return k;
}

// Fields whose only honoured value is the default (or that are refused outright).
absl::Status ReadFixedFields(const json& j) {
  if (const json* prev = Field(j, "previous_response_id")) {
    if (!prev->is_string()) return WrongType("previous_response_id", "a string", *prev);
    // vLLM without VLLM_ENABLE_RESPONSES_API_STORE keeps no responses, so every id is unknown.
    return WithParam(absl::NotFoundError(absl::StrCat(
                         "Response with id '", prev->get<std::string>(),
                         "' not found: this server does not store responses; send the earlier "
                         "turns as input items instead of 'previous_response_id'")),
                     "previous_response_id", "response_not_found");
  }
  ASSIGN_OR_RETURN(auto store, GetBool(j, "store"));  // accepted; nothing is ever stored
  (void)store;
  ASSIGN_OR_RETURN(auto background, GetBool(j, "background"));
  if (background.value_or(false)) {
    return Unsupported("background", "is not supported: this server does not store responses");
  }
  if (const json* inc = Field(j, "include")) {
    if (!inc->is_array()) return WrongType("include", "an array of strings", *inc);
    if (!inc->empty()) {
      const std::string p = "include[0]";
      return Unsupported(p, absl::StrCat("= ", (*inc)[0].dump(),
                                         " is not supported (no extra output is available)"));
    }
  }
  ASSIGN_OR_RETURN(auto top_logprobs, GetInt(j, "top_logprobs"));
  if (top_logprobs.value_or(0) != 0) {
    return Unsupported("top_logprobs", "is not supported (logprobs are not returned for gpt-oss, "
                       "as in vLLM)");
  }
  if (Field(j, "max_tool_calls")) {
    return Unsupported("max_tool_calls", "is not supported (no built-in tools run here)");
  }
  if (Field(j, "prompt")) return Unsupported("prompt", "(a stored prompt template) is not supported");
  ASSIGN_OR_RETURN(auto truncation, GetString(j, "truncation", "truncation"));
  if (truncation && *truncation != "disabled") {
    return Unsupported("truncation", absl::StrCat("= \"", *truncation, "\" is not supported "
                                                  "(only \"disabled\")"));
  }
  ASSIGN_OR_RETURN(auto tier, GetString(j, "service_tier", "service_tier"));
  if (tier && *tier != "auto" && *tier != "default") {
    return Unsupported("service_tier", absl::StrCat("= \"", *tier, "\" is not supported (only "
                                                    "\"auto\" or \"default\")"));
  }
  ASSIGN_OR_RETURN(auto priority, GetInt(j, "priority"));
  if (priority.value_or(0) != 0) return Unsupported("priority", "is not supported (only 0)");
  ASSIGN_OR_RETURN(auto messages, GetBool(j, "enable_response_messages"));
  if (messages.value_or(false)) return Unsupported("enable_response_messages", "is not supported");
  ASSIGN_OR_RETURN(auto skip, GetBool(j, "skip_special_tokens"));
  if (!skip.value_or(true)) {
    return Unsupported("skip_special_tokens", "= false is not supported (the output parser "
                       "consumes the format's special tokens)");
  }
  for (const char* k : {"previous_input_messages", "cache_salt", "logit_bias",
                        "mm_processor_kwargs"}) {
    if (Field(j, k)) return Unsupported(k, "is not supported by /v1/responses on this server");
  }
  if (const json* md = Field(j, "metadata")) {
    if (!md->is_object()) return WrongType("metadata", "an object of strings", *md);
    for (const auto& [k, v] : md->items()) {
      if (!v.is_string()) return WrongType(absl::StrCat("metadata.", k), "a string", v);
    }
  }
  ASSIGN_OR_RETURN(auto user, GetString(j, "user", "user"));
  (void)user;
  ASSIGN_OR_RETURN(auto parallel, GetBool(j, "parallel_tool_calls"));
  (void)parallel;  // gpt-oss makes one call per turn: either value is honoured
  if (const json* text = Field(j, "text")) {
    if (!text->is_object()) return WrongType("text", "an object", *text);
    RETURN_IF_ERROR(OnlyKnownKeys(*text, {"format"}, "text", "'text'"));
    if (const json* f = Field(*text, "format")) {
      if (!f->is_object()) return WrongType("text.format", "an object", *f);
      const json* t = Field(*f, "type");
      if (!t || !t->is_string() || t->get<std::string>() != "text") {
        return Unsupported("text.format", "is not supported (only {\"type\": \"text\"})");
      }
    }
  }
  return absl::OkStatus();
}

// Text parts of a message ("input_text" / "output_text"), joined by newlines as vLLM joins
// chat text parts.
absl::StatusOr<std::string> PartsText(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return WrongType(param, "a string or an array of text parts", content);
  std::vector<std::string> texts;
  for (size_t k = 0; k < content.size(); ++k) {
    const json& part = content[k];
    const std::string pp = absl::StrCat(param, "[", k, "]");
    if (!part.is_object()) return WrongType(pp, "an object", part);
    ASSIGN_OR_RETURN(std::string type, RequiredString(part, "type", pp));
    if (type != "input_text" && type != "output_text") {
      return InvalidParam(pp + ".type",
                          absl::StrCat("content part type '", type, "' is not supported (only "
                                       "'input_text' and 'output_text')"),
                          "unsupported_content");
    }
    RETURN_IF_ERROR(OnlyKnownKeys(part, {"type", "text", "annotations", "logprobs"}, pp,
                                  "a text part"));
    ASSIGN_OR_RETURN(std::string text, RequiredString(part, "text", pp));
    texts.push_back(std::move(text));
  }
  return absl::StrJoin(texts, "\n");
}

// Input items as chat messages. Leading system/developer messages (and `instructions`) become
// the one developer message harmony allows; a reasoning item rides on the assistant turn that
// follows it (the template keeps it only before a tool call, as gpt-oss's does).
class InputReader {
 public:
  explicit InputReader(std::string instructions) : developer_(std::move(instructions)) {}

  absl::Status Read(const json& input) {
    if (input.is_string()) {
      messages_.push_back(ChatMessage{.role = "user", .content = input.get<std::string>()});
      return absl::OkStatus();
    }
    if (!input.is_array()) return WrongType("input", "a string or an array of input items", input);
    if (input.empty()) return InvalidParam("input", "'input' must not be empty");
    for (size_t i = 0; i < input.size(); ++i) RETURN_IF_ERROR(Item(input[i], i));
    return absl::OkStatus();
  }

  std::vector<ChatMessage> Messages() && {
    std::vector<ChatMessage> out;
    if (!developer_.empty()) out.push_back(ChatMessage{.role = "developer", .content = developer_});
    for (auto& m : messages_) out.push_back(std::move(m));
    return out;
  }

 private:
  absl::Status Item(const json& item, size_t i) {
    const std::string p = absl::StrCat("input[", i, "]");
    if (!item.is_object()) return WrongType(p, "an object", item);
    ASSIGN_OR_RETURN(auto type, GetString(item, "type", p + ".type"));
    if (!type) {
      if (!Field(item, "role")) return InvalidParam(p + ".type", absl::StrCat("'", p, ".type' is required"));
      type = "message";  // EasyInputMessage: {role, content}
    }
    if (*type == "message") return Message(item, p);
    if (*type == "reasoning") return Reasoning(item, p);
    if (*type == "function_call") return FunctionCall(item, p);
    if (*type == "function_call_output") return FunctionCallOutput(item, p);
    return InvalidParam(p + ".type",
                        absl::StrCat("input item type '", *type, "' is not supported (only "
                                     "message, reasoning, function_call, function_call_output)"),
                        "unsupported_parameter");
  }

  absl::Status Message(const json& item, const std::string& p) {
    RETURN_IF_ERROR(OnlyKnownKeys(item, {"type", "role", "content", "id", "status"}, p,
                                  "a message item"));
    ASSIGN_OR_RETURN(std::string role, RequiredString(item, "role", p));
    const json* content = Field(item, "content");
    if (!content) return InvalidParam(p + ".content", absl::StrCat("'", p, ".content' is required"));
    ASSIGN_OR_RETURN(std::string text, PartsText(*content, p + ".content"));
    if (role == "system" || role == "developer") {
      if (!messages_.empty()) {
        return InvalidParam(p + ".role", absl::StrCat("a ", role, " message is only accepted "
                                                      "before the conversation's first turn for "
                                                      "this model"));
      }
      if (!developer_.empty()) developer_ += "\n\n";
      developer_ += text;
      return absl::OkStatus();
    }
    if (role != "user" && role != "assistant") {
      return InvalidParam(p + ".role", absl::StrCat("'", p, ".role' must be one of user, "
                                                    "assistant, system, developer; got '", role,
                                                    "'"));
    }
    ChatMessage m{.role = role, .content = std::move(text)};
    if (role == "assistant") m.reasoning = std::exchange(reasoning_, "");
    messages_.push_back(std::move(m));
    return absl::OkStatus();
  }

  absl::Status Reasoning(const json& item, const std::string& p) {
    RETURN_IF_ERROR(OnlyKnownKeys(item, {"type", "id", "summary", "content", "encrypted_content",
                                         "status"},
                                  p, "a reasoning item"));
    if (Field(item, "encrypted_content")) {
      return Unsupported(p + ".encrypted_content", "is not supported (send the reasoning text "
                         "as content)");
    }
    // The reasoning itself when given; its summary only stands in for it.
    std::vector<std::string> texts;
    for (const auto& [key, part_type] : {std::pair{"content", "reasoning_text"},
                                         std::pair{"summary", "summary_text"}}) {
      const json* parts = Field(item, key);
      if (!parts) continue;
      const std::string pk = absl::StrCat(p, ".", key);
      if (!parts->is_array()) return WrongType(pk, "an array", *parts);
      std::vector<std::string> these;
      for (size_t k = 0; k < parts->size(); ++k) {
        const json& part = (*parts)[k];
        const std::string pp = absl::StrCat(pk, "[", k, "]");
        if (!part.is_object()) return WrongType(pp, "an object", part);
        RETURN_IF_ERROR(OnlyKnownKeys(part, {"type", "text"}, pp, "a reasoning part"));
        ASSIGN_OR_RETURN(std::string type, RequiredString(part, "type", pp));
        if (type != part_type) {
          return InvalidParam(pp + ".type", absl::StrCat("'", pp, ".type' must be '", part_type,
                                                         "', got '", type, "'"));
        }
        ASSIGN_OR_RETURN(std::string text, RequiredString(part, "text", pp));
        these.push_back(std::move(text));
      }
      if (texts.empty()) texts = std::move(these);
    }
    if (!reasoning_.empty() && !texts.empty()) reasoning_ += "\n";
    reasoning_ += absl::StrJoin(texts, "\n");
    return absl::OkStatus();
  }

  absl::Status FunctionCall(const json& item, const std::string& p) {
    RETURN_IF_ERROR(OnlyKnownKeys(item, {"type", "id", "call_id", "name", "arguments", "status"},
                                  p, "a function_call item"));
    ASSIGN_OR_RETURN(std::string call_id, RequiredString(item, "call_id", p));
    ASSIGN_OR_RETURN(std::string name, RequiredString(item, "name", p));
    ASSIGN_OR_RETURN(std::string arguments, RequiredString(item, "arguments", p));
    if (name.empty()) return InvalidParam(p + ".name", absl::StrCat("'", p, ".name' must not be empty"));
    calls_[call_id] = name;
    json call{{"id", call_id},
              {"type", "function"},
              {"function", {{"name", name}, {"arguments", arguments}}}};
    ChatMessage m{.role = "assistant"};
    m.tool_calls_json = json::array({call}).dump();
    m.reasoning = std::exchange(reasoning_, "");
    messages_.push_back(std::move(m));
    return absl::OkStatus();
  }

  absl::Status FunctionCallOutput(const json& item, const std::string& p) {
    RETURN_IF_ERROR(OnlyKnownKeys(item, {"type", "id", "call_id", "output", "status"}, p,
                                  "a function_call_output item"));
    ASSIGN_OR_RETURN(std::string call_id, RequiredString(item, "call_id", p));
    auto call = calls_.find(call_id);
    if (call == calls_.end()) {  // vLLM: "No call message found for <call_id>"
      return InvalidParam(p + ".call_id", absl::StrCat("no function_call item with call_id '",
                                                       call_id, "' comes before ", p));
    }
    const json* output = Field(item, "output");
    if (!output) return InvalidParam(p + ".output", absl::StrCat("'", p, ".output' is required"));
    ASSIGN_OR_RETURN(std::string text, PartsText(*output, p + ".output"));
    messages_.push_back(ChatMessage{.role = "tool", .content = std::move(text),
                                    .name = call->second, .tool_call_id = call_id});
    return absl::OkStatus();
  }

  std::string developer_;
  std::string reasoning_;  // from reasoning items, for the next assistant turn
  std::vector<ChatMessage> messages_;
  std::map<std::string, std::string> calls_;  // call_id -> function name
};

// Responses function tools ({type, name, description, parameters, strict}) as the chat "tools"
// array the template renders; `*names` gets their names.
absl::StatusOr<json> ReadTools(const json& j, std::vector<std::string>* names) {
  json chat = json::array();
  const json* tools = Field(j, "tools");
  if (!tools) return chat;
  if (!tools->is_array()) return WrongType("tools", "an array", *tools);
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const std::string p = absl::StrCat("tools[", i, "]");
    if (!t.is_object()) return WrongType(p, "an object", t);
    ASSIGN_OR_RETURN(std::string type, RequiredString(t, "type", p));
    if (type != "function") {
      return InvalidParam(p + ".type", absl::StrCat("tool type '", type, "' is not supported "
                                                    "(only 'function'; no built-in tools run "
                                                    "here)"),
                          "unsupported_parameter");
    }
    RETURN_IF_ERROR(OnlyKnownKeys(t, {"type", "name", "description", "parameters", "strict"}, p,
                                  "a function tool"));
    ASSIGN_OR_RETURN(std::string name, RequiredString(t, "name", p));
    if (name.empty()) return InvalidParam(p + ".name", absl::StrCat("'", p, ".name' must not be empty"));
    json fn{{"name", name}};
    ASSIGN_OR_RETURN(auto description, GetString(t, "description", p + ".description"));
    if (description) fn["description"] = *description;
    if (const json* params = Field(t, "parameters")) {
      if (!params->is_object()) return WrongType(p + ".parameters", "an object", *params);
      fn["parameters"] = *params;
    }
    if (const json* strict = Field(t, "strict")) {
      if (!strict->is_boolean()) return WrongType(p + ".strict", "a boolean", *strict);
      if (strict->get<bool>()) {
        return Unsupported(p + ".strict", "= true is not supported (arguments are not held to "
                           "the schema)");
      }
    }
    names->push_back(name);
    chat.push_back(json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return chat;
}

// tool_choice as ReadChatToolOptions takes it: "", auto, none, required, or a function's name.
absl::StatusOr<std::string> ReadToolChoice(const json& j, const std::vector<std::string>& names) {
  const json* c = Field(j, "tool_choice");
  if (!c) return std::string();
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s != "auto" && s != "none" && s != "required") {
      return InvalidParam("tool_choice", absl::StrCat("'tool_choice' must be \"auto\", \"none\", "
                                                      "\"required\" or {\"type\": \"function\", "
                                                      "\"name\": ...}, got \"", s, "\""));
    }
    return s;
  }
  if (!c->is_object()) return WrongType("tool_choice", "a string or an object", *c);
  const json* type = Field(*c, "type");
  const json* name = Field(*c, "name");
  if (!type || !type->is_string() || type->get<std::string>() != "function" || !name ||
      !name->is_string() || c->size() != 2) {
    return InvalidParam("tool_choice", "'tool_choice' as an object must be {\"type\": "
                        "\"function\", \"name\": \"...\"} (no built-in tools run here)",
                        "unsupported_parameter");
  }
  const std::string n = name->get<std::string>();
  if (std::find(names.begin(), names.end(), n) == names.end()) {
    return InvalidParam("tool_choice", absl::StrCat("'tool_choice' names function '", n,
                                                    "', which is not in 'tools'"));
  }
  return n;
}

absl::Status ReadReasoning(const json& j, std::string* effort) {
  const json* r = Field(j, "reasoning");
  if (!r) return absl::OkStatus();
  if (!r->is_object()) return WrongType("reasoning", "an object", *r);
  RETURN_IF_ERROR(OnlyKnownKeys(*r, {"effort", "summary", "generate_summary"}, "reasoning",
                                "'reasoning'"));
  ASSIGN_OR_RETURN(auto e, GetString(*r, "effort", "reasoning.effort"));
  if (e) {
    if (*e != "low" && *e != "medium" && *e != "high") {
      return InvalidParam("reasoning.effort", absl::StrCat("'reasoning.effort' must be low, "
                                                           "medium or high, got '", *e, "'"));
    }
    *effort = *e;
  }
  for (const char* k : {"summary", "generate_summary"}) {
    if (Field(*r, k)) {
      return Unsupported(absl::StrCat("reasoning.", k), "is not supported: gpt-oss writes no "
                         "reasoning summaries (its reasoning comes as reasoning_text)");
    }
  }
  return absl::OkStatus();
}

// Render errors name "messages[...]"; here the conversation is 'input'.
absl::Status AsInputError(absl::Status s) {
  std::optional<std::string> p = ParamOf(s);
  if (!p || absl::StartsWith(*p, "messages")) return WithParam(s, "input", CodeOf(s).value_or(""));
  return s;
}

}  // namespace

std::string NewItemId(absl::string_view prefix) {
  std::string id = NewRequestId(prefix);  // "<prefix>-<hex>"
  id[prefix.size()] = '_';
  return id;
}

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(absl::string_view body,
                                                       const ServingContext& ctx) {
  ASSIGN_OR_RETURN(json j, ParseBody(body));
  RETURN_IF_ERROR(OnlyKnownKeys(j, KnownFields(), "", "/v1/responses"));
  ASSIGN_OR_RETURN(auto model, GetString(j, "model", "model"));
  RETURN_IF_ERROR(CheckModel(model.value_or(""), ctx));
  RETURN_IF_ERROR(ReadFixedFields(j));
  if (!ctx.chat_template || !ctx.tokenizer) {
    return InvalidParam("input", "this model has no chat template; use /v1/completions");
  }

  ResponsesRequest out;
  ASSIGN_OR_RETURN(auto stream, GetBool(j, "stream"));
  out.stream = stream.value_or(false);
  ASSIGN_OR_RETURN(auto instructions, GetString(j, "instructions", "instructions"));
  const json* input = Field(j, "input");
  if (!input) return InvalidParam("input", "'input' is required");
  InputReader reader(instructions.value_or(""));
  RETURN_IF_ERROR(reader.Read(*input));
  std::vector<ChatMessage> messages = std::move(reader).Messages();

  std::vector<std::string> tool_names;
  ASSIGN_OR_RETURN(json tools, ReadTools(j, &tool_names));
  ASSIGN_OR_RETURN(std::string choice, ReadToolChoice(j, tool_names));
  std::string effort;
  RETURN_IF_ERROR(ReadReasoning(j, &effort));
  RETURN_IF_ERROR(ReadChatToolOptions(tools.empty() ? "" : tools.dump(), choice, effort, ctx,
                                      &out.render));

  SamplingFields f;
  ASSIGN_OR_RETURN(f.temperature, GetNumber(j, "temperature"));
  ASSIGN_OR_RETURN(f.top_p, GetNumber(j, "top_p"));
  ASSIGN_OR_RETURN(f.top_k, GetInt(j, "top_k"));
  ASSIGN_OR_RETURN(f.max_tokens, GetInt(j, "max_output_tokens"));
  f.max_tokens_param = "max_output_tokens";

  absl::StatusOr<std::vector<int32_t>> prompt = RenderChatPrompt(messages, out.render, ctx);
  if (!prompt.ok()) return AsInputError(prompt.status());
  RETURN_IF_ERROR(AsInputError(CheckPromptTokens(*prompt, ctx, "input")));
  ASSIGN_OR_RETURN(SamplingParams params,
                   ResolveSampling(f, static_cast<int>(prompt->size()), ctx, "input"));
  for (int32_t id : ctx.chat_template->StopTokenIds()) params.stop_token_ids.push_back(id);

  ASSIGN_OR_RETURN(auto request_id, GetString(j, "request_id", "request_id"));
  if (request_id && request_id->empty()) {
    return InvalidParam("request_id", "'request_id' must not be empty");
  }
  out.generate.request_id = request_id ? *request_id : NewItemId("resp");

  auto echo = [&](const char* key, json fallback) {
    const json* v = Field(j, key);
    return v ? *v : fallback;
  };
  out.echo = json{
      {"instructions", instructions ? json(*instructions) : json(nullptr)},
      {"metadata", echo("metadata", nullptr)},
      {"parallel_tool_calls", echo("parallel_tool_calls", true)},
      {"temperature", params.temperature},
      {"tool_choice", echo("tool_choice", "auto")},
      {"tools", echo("tools", json::array())},
      {"top_p", params.top_p},
      {"background", false},
      {"max_output_tokens", params.max_tokens},
      {"max_tool_calls", nullptr},
      {"previous_response_id", nullptr},
      {"prompt", nullptr},
      {"reasoning", echo("reasoning", nullptr)},
      {"service_tier", echo("service_tier", "auto")},
      {"store", false},  // never stored, whatever 'store' said (as vLLM without a store)
      {"text", echo("text", json{{"format", {{"type", "text"}}}})},
      {"top_logprobs", 0},
      {"truncation", "disabled"},
      {"user", echo("user", nullptr)}};
  out.generate.prompt_tokens = *std::move(prompt);
  out.generate.params = std::move(params);
  return out;
}

}  // namespace mxserve::frontends

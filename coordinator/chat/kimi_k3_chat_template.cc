#include "coordinator/chat/kimi_k3_chat_template.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/chat/harmony_tools.h"
#include "coordinator/chat/kimi_k3_output_parser.h"
#include "coordinator/chat/prompt_builder.h"
#include "coordinator/chat/staged_output_parser.h"
#include "coordinator/chat/template_inputs.h"
#include "coordinator/chat/xtml_arguments.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "core/bounded_json.h"
#include "core/status.h"

namespace mxserve {

using ojson = nlohmann::ordered_json;

namespace {

constexpr char kOpen[] = "<|open|>";
constexpr char kClose[] = "<|close|>";
constexpr char kSep[] = "<|sep|>";
constexpr char kEndOfMsg[] = "<|end_of_msg|>";

constexpr char kEffortBody[] =
    "`thinking_effort` guides on how much to think in your thinking channel (not including the "
    "response channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the "
    "system is invoked with `thinking_effort=";
constexpr char kJsonOnly[] =
    "Your response must be raw JSON data without markdown code blocks (```json) or any "
    "additional formatting.";

// Object keys sorted (by code point, as Python's sorted), at every depth.
ojson DeepSort(const ojson& v) {
  if (v.is_array()) {
    ojson out = ojson::array();
    for (const ojson& e : v) out.push_back(DeepSort(e));
    return out;
  }
  if (!v.is_object()) return v;
  std::vector<std::string> keys;
  for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  ojson out = ojson::object();
  for (const std::string& k : keys) out[k] = DeepSort(v[k]);
  return out;
}

// Python's json.dumps(v, ensure_ascii=False, separators=(",", ":")).
std::string CompactJson(const ojson& v) {
  if (v.is_object()) {
    std::string out = "{";
    for (auto it = v.begin(); it != v.end(); ++it) {
      absl::StrAppend(&out, it == v.begin() ? "" : ",", PythonJsonDumps(ojson(it.key())), ":",
                      CompactJson(it.value()));
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i ? "," : "", CompactJson(v[i]));
    return out + "]";
  }
  return PythonJsonDumps(v);
}

// The segment list under construction, with encoding_k3.py's tag helpers.
class Xtml {
 public:
  void Marker(const char* m) { out_.push_back({m, true}); }
  void Text(std::string_view t) {  // an empty text is no segment
    if (!t.empty()) out_.push_back({std::string(t), false});
  }
  // <|open|>TAG key="value"...<|sep|>: " key", "=\"", the escaped value and "\"" are four texts.
  void Open(std::string_view tag, const std::vector<std::pair<std::string, std::string>>& attrs = {}) {
    Marker(kOpen);
    Text(tag);
    for (const auto& [key, value] : attrs) {
      Text(absl::StrCat(" ", key));
      Text("=\"");
      Text(absl::StrReplaceAll(value, {{"&", "&amp;"}, {"\"", "&quot;"}}));
      Text("\"");
    }
    Marker(kSep);
  }
  void Close(std::string_view tag) {
    Marker(kClose);
    Text(tag);
    Marker(kSep);
  }
  // A whole message: header, body text, close, <|end_of_msg|>.
  void Message(const std::vector<std::pair<std::string, std::string>>& attrs, std::string_view body) {
    Open("message", attrs);
    Text(body);
    Close("message");
    Marker(kEndOfMsg);
  }
  void SystemNote(std::string type, std::string_view body) {
    Message({{"role", "system"}, {"type", std::move(type)}}, body);
  }
  std::vector<XtmlSegment> Take() { return std::move(out_); }

 private:
  std::vector<XtmlSegment> out_;
};

std::vector<std::pair<std::string, std::string>> RoleAttrs(std::string role, const std::string& name) {
  std::vector<std::pair<std::string, std::string>> attrs = {{"role", std::move(role)}};
  if (!name.empty()) attrs.push_back({"name", name});
  return attrs;
}

// A call id as Python's str() writes it, for the ids a client may send; nullopt = no id.
std::optional<std::string> CallId(const ojson& call) {
  if (!call.contains("id")) return std::nullopt;
  const ojson& id = call["id"];
  if (id.is_string()) return id.get<std::string>();
  if (id.is_number_integer()) return id.dump();
  return std::nullopt;
}

// encoding_k3.py's normalize_xtml_tool_result_messages: the order messages render in, and for a
// tool message answering a known call, the name of that call. Each run of consecutive tool
// messages whose tool_call_ids all match the latest assistant's tool_calls is sorted into call
// order (ties keep their order); a run with any other id is left as it is.
void OrderToolResults(const std::vector<ChatMessage>& messages, const std::vector<ojson>& calls,
                      std::vector<size_t>* order, std::vector<std::optional<std::string>>* named) {
  named->assign(messages.size(), std::nullopt);
  struct Known { std::string id; size_t position; std::string name; };
  std::vector<Known> known;
  for (size_t i = 0; i < messages.size();) {
    if (messages[i].role == "assistant") {
      known.clear();
      for (size_t k = 0; k < calls[i].size(); ++k) {
        auto id = CallId(calls[i][k]);
        if (!id || std::any_of(known.begin(), known.end(), [&](const Known& c) { return c.id == *id; }))
          continue;
        known.push_back({*id, k + 1, calls[i][k]["function"]["name"].get<std::string>()});
      }
    }
    if (messages[i].role != "tool") {
      order->push_back(i++);
      continue;
    }
    std::vector<std::pair<size_t, size_t>> run;  // (call position, message index)
    bool resolved = true;
    for (; i < messages.size() && messages[i].role == "tool"; ++i) {
      const std::string& id = messages[i].tool_call_id;
      auto hit = std::find_if(known.begin(), known.end(), [&](const Known& c) { return c.id == id; });
      if (id.empty() || hit == known.end()) {
        resolved = false;
        run.push_back({0, i});
      } else {
        run.push_back({hit->position, i});
        (*named)[i] = hit->name;
      }
    }
    if (resolved) {
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    } else {
      for (const auto& r : run) (*named)[r.second] = std::nullopt;
    }
    for (const auto& r : run) order->push_back(r.second);
  }
}

// <|open|>think...<|close|>think<|sep|> (thinking on), the response channel, then the tools
// channel with one call per tool_calls entry.
absl::Status AppendAssistantBody(const ChatMessage& m, const ojson& calls, size_t i, bool thinking,
                                 Xtml& x) {
  if (thinking) {
    x.Open("think");
    x.Text(m.reasoning);
    x.Close("think");
  }
  x.Open("response");
  x.Text(m.content);
  x.Close("response");
  if (calls.empty()) return absl::OkStatus();
  x.Open("tools");
  for (size_t k = 0; k < calls.size(); ++k) {
    const ojson& fn = calls[k]["function"];
    const std::string where = absl::StrCat("messages[", i, "].tool_calls[", k, "].function.arguments");
    ASSIGN_OR_RETURN(XtmlArguments args, XtmlArgumentsOf(fn, where));
    x.Open("call", {{"tool", fn["name"].get<std::string>()}, {"index", absl::StrCat(k + 1)}});
    if (args.raw_json) {
      x.Open("json", {{"type", "object"}});
      x.Text(*args.raw_json);
      x.Close("json");
    }
    for (const XtmlArgument& a : args.args) {
      x.Open("argument", {{"key", a.key}, {"type", a.type}});
      x.Text(a.text);
      x.Close("argument");
    }
    x.Close("call");
  }
  x.Close("tools");
  return absl::OkStatus();
}

// The response-format system message for json_object and json_schema ("" = none).
absl::StatusOr<std::string> ResponseFormatNote(const std::string& response_format_json) {
  if (response_format_json.empty()) return std::string();
  auto rf = ParseBoundedJson<ojson>(response_format_json);
  if (!rf.ok()) return absl::InvalidArgumentError(absl::StrCat("response_format: ", rf.status().message()));
  if (!rf->is_object()) return absl::InvalidArgumentError("response_format: expected an object");
  const std::string type = rf->contains("type") && (*rf)["type"].is_string()
                               ? (*rf)["type"].get<std::string>() : "";
  if (type == "json_object") {
    return absl::StrCat("The system is invoked with `response_format=json_object`.\n", kJsonOnly);
  }
  if (type != "json_schema") return std::string();
  // json_schema.schema, else json_schema.json_schema, else json_schema itself.
  ojson schema;
  if (rf->contains("json_schema")) {
    const ojson& js = (*rf)["json_schema"];
    schema = js.is_object() && js.contains("schema")        ? js["schema"]
             : js.is_object() && js.contains("json_schema") ? js["json_schema"]
                                                            : js;
  }
  return absl::StrCat("The system is invoked with `response_format=json_schema`.\n", kJsonOnly,
                      "\nThe JSON data must match the following schema:\n```json\n",
                      CompactJson(DeepSort(schema)), "\n```");
}

}  // namespace

bool HasXtmlMarkers(const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return false;
  for (const char* m : {kOpen, kClose, kSep, kEndOfMsg})
    if (!tokenizer->SpecialTokenId(m)) return false;
  return true;
}

absl::StatusOr<std::unique_ptr<KimiK3ChatTemplate>> KimiK3ChatTemplate::Create(
    const Tokenizer* tokenizer) {
  ASSIGN_OR_RETURN(auto markers,
                   ResolveMarkers(tokenizer, "Kimi K3", {kOpen, kClose, kSep, kEndOfMsg}));
  return std::unique_ptr<KimiK3ChatTemplate>(new KimiK3ChatTemplate(tokenizer, std::move(markers)));
}

absl::StatusOr<std::vector<XtmlSegment>> KimiK3ChatTemplate::Segments(
    const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  if (messages.empty()) return absl::InvalidArgumentError("messages: the conversation is empty");
  const bool thinking = options.thinking.value_or(true);
  const std::string effort =
      options.thinking_effort.empty() ? kK3DefaultThinkingEffort : options.thinking_effort;
  if (effort != "low" && effort != "high" && effort != "max") {
    return absl::InvalidArgumentError(absl::StrCat(
        "chat_template_kwargs.thinking_effort: Kimi K3 takes low, high or max, got \"", effort, "\""));
  }
  std::vector<ojson> calls(messages.size(), ojson::array());
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "].role: unknown role \"", r,
          "\" (expected system, developer, user, assistant or tool)"));
    }
    if (r == "assistant") {
      ASSIGN_OR_RETURN(calls[i], ToolCallsForTemplate(messages[i], i));
    }
  }
  ASSIGN_OR_RETURN(ojson tools, ToolsForTemplate(options.tools_json));
  ASSIGN_OR_RETURN(std::string response_format, ResponseFormatNote(options.response_format_json));

  Xtml x;
  if (!tools.empty()) {
    x.SystemNote("tool-declare",
                 absl::StrCat("# Tools\nHere are the available tools, described in JSONSchema.\n\n"
                              "```json\n", CompactJson(DeepSort(tools)), "\n```"));
  }
  if (thinking) x.SystemNote("thinking-effort", absl::StrCat(kEffortBody, effort, "`."));

  std::vector<size_t> order;
  std::vector<std::optional<std::string>> named;
  OrderToolResults(messages, calls, &order, &named);
  const ojson* last_calls = nullptr;  // the latest assistant's tool_calls
  size_t tool_index = 0;
  for (size_t i : order) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      x.Message(RoleAttrs("user", m.name), m.content);
    } else if (m.role == "system" || m.role == "developer") {
      x.Message(RoleAttrs("system", m.name), m.content);
    } else if (m.role == "tool") {
      ++tool_index;
      // The answered call's name, else the message's own, else the call at its position.
      std::string tool = named[i].value_or(m.name);
      if (tool.empty() && last_calls != nullptr && tool_index <= last_calls->size()) {
        tool = (*last_calls)[tool_index - 1]["function"]["name"].get<std::string>();
      }
      if (tool.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "messages[", i, "]: a tool message needs a name, or a tool_call_id or position that "
            "matches the preceding assistant message's tool_calls"));
      }
      x.Message({{"role", "tool"}, {"tool", tool}, {"index", absl::StrCat(tool_index)}}, m.content);
    } else {  // assistant
      last_calls = &calls[i];
      tool_index = 0;
      x.Open("message", RoleAttrs("assistant", m.name));
      RETURN_IF_ERROR(AppendAssistantBody(m, calls[i], i, thinking, x));
      x.Close("message");
      x.Marker(kEndOfMsg);
    }
  }
  if (options.tool_choice == "required") {
    x.SystemNote("tool-choice", "The system is invoked with `tool_choice=required`.\n"
                                "You MUST call tools in the next message.");
  } else if (options.tool_choice == "none") {
    x.SystemNote("tool-choice", "The system is invoked with `tool_choice=none`.\n"
                                "You MUST NOT call any tools in the next message.");
  }
  if (!response_format.empty()) x.SystemNote("response-format", response_format);
  if (options.add_generation_prompt) {
    x.Open("message", {{"role", "assistant"}});
    x.Open(thinking ? "think" : "response");
  }
  return x.Take();
}

absl::StatusOr<std::string> KimiK3ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                       const ChatRenderOptions& options) const {
  ASSIGN_OR_RETURN(std::vector<XtmlSegment> segments, Segments(messages, options));
  std::string out;
  for (const XtmlSegment& s : segments) out += s.text;
  return out;
}

absl::StatusOr<std::vector<int32_t>> KimiK3ChatTemplate::RenderIds(
    const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  ASSIGN_OR_RETURN(std::vector<XtmlSegment> segments, Segments(messages, options));
  std::vector<int32_t> ids;
  for (const XtmlSegment& s : segments) {
    if (s.marker) {
      for (const auto& [text, id] : markers_)
        if (text == s.text) ids.push_back(id);
      continue;
    }
    // K3's markers are ordinary added tokens ("special": false): only EncodeOrdinary keeps them
    // text here, as tiktoken's encode(disallowed_special=()) does.
    std::vector<int32_t> part = tok_->EncodeOrdinary(s.text);
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

std::unique_ptr<ChatOutputParser> KimiK3ChatTemplate::NewParser() const {
  return std::make_unique<StagedOutputParser>(tok_, std::make_unique<KimiK3Reasoning>(),
                                              std::make_unique<KimiK3Tools>(false));
}

}  // namespace mxserve

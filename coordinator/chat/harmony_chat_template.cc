#include "coordinator/chat/harmony_chat_template.h"

#include <ctime>

#include "absl/strings/str_cat.h"
#include "coordinator/chat/harmony_output_parser.h"
#include "coordinator/chat/harmony_tools.h"
#include "core/bounded_json.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {
namespace {

std::string TodayUtc() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

bool IsDate(const std::string& d) {
  if (d.size() != 10 || d[4] != '-' || d[7] != '-') return false;
  for (int i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (d[i] < '0' || d[i] > '9') return false;
  return true;
}

}  // namespace

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out += "\"";
  return out;
}

absl::StatusOr<std::unique_ptr<HarmonyChatTemplate>> HarmonyChatTemplate::Create(
    const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("harmony chat template: no tokenizer");
  HarmonyTokens t{};
  const std::pair<const char*, int32_t*> want[] = {
      {"<|start|>", &t.start},     {"<|end|>", &t.end},           {"<|message|>", &t.message},
      {"<|channel|>", &t.channel}, {"<|constrain|>", &t.constrain}, {"<|return|>", &t.ret},
      {"<|call|>", &t.call}};
  for (const auto& [name, dst] : want) {
    auto id = tokenizer->SpecialTokenId(name);
    if (!id) {
      return absl::InvalidArgumentError(
          absl::StrCat("harmony chat template: the tokenizer has no ", name, " token"));
    }
    *dst = *id;
  }
  return std::unique_ptr<HarmonyChatTemplate>(new HarmonyChatTemplate(tokenizer, t));
}

absl::StatusOr<std::string> HarmonyChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                        const ChatRenderOptions& options) const {
  std::vector<std::pair<size_t, size_t>> spans;
  return RenderWithSpans(messages, options, &spans);
}

absl::StatusOr<std::vector<int32_t>> HarmonyChatTemplate::RenderIds(
    const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  std::vector<std::pair<size_t, size_t>> spans;
  ASSIGN_OR_RETURN(std::string text, RenderWithSpans(messages, options, &spans));
  // Special tokens are taken from the template's text only; everything between them (template
  // text and message text alike) is encoded as one ordinary run, as HF's whole-string encoding
  // would, so ids equal Encode(Render(), true) unless a message spells a special token.
  std::vector<int32_t> ids;
  size_t run = 0, span = 0;
  for (size_t i = 0; i < text.size();) {
    while (span < spans.size() && spans[span].second <= i) ++span;
    const bool in_content = span < spans.size() && spans[span].first <= i;
    if (!in_content && text.compare(i, 2, "<|") == 0) {
      size_t e = text.find("|>", i + 2);
      if (e != std::string::npos) {
        auto id = tok_->SpecialTokenId(std::string_view(text).substr(i, e + 2 - i));
        if (id) {
          auto part = tok_->Encode(std::string_view(text).substr(run, i - run), false);
          ids.insert(ids.end(), part.begin(), part.end());
          ids.push_back(*id);
          i = e + 2;
          run = i;
          continue;
        }
      }
    }
    ++i;
  }
  auto part = tok_->Encode(std::string_view(text).substr(run), false);
  ids.insert(ids.end(), part.begin(), part.end());
  return ids;
}

absl::StatusOr<std::string> HarmonyChatTemplate::RenderWithSpans(
    const std::vector<ChatMessage>& messages, const ChatRenderOptions& options,
    std::vector<std::pair<size_t, size_t>>* spans) const {
  if (messages.empty()) return absl::InvalidArgumentError("messages: the conversation is empty");
  const std::string& effort = options.reasoning_effort;
  if (effort != "low" && effort != "medium" && effort != "high") {
    return absl::InvalidArgumentError(absl::StrCat(
        "reasoning_effort: must be one of low, medium, high (got \"", effort, "\")"));
  }
  if (!options.current_date.empty() && !IsDate(options.current_date)) {
    return absl::InvalidArgumentError(
        absl::StrCat("current_date: expected YYYY-MM-DD, got \"", options.current_date, "\""));
  }
  const std::string date = options.current_date.empty() ? TodayUtc() : options.current_date;

  nlohmann::ordered_json tools;
  if (!options.tools_json.empty()) {
    auto parsed = ParseBoundedJson<nlohmann::ordered_json>(options.tools_json);
    if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("tools: ", parsed.status().message()));
    tools = *std::move(parsed);
  }
  const bool has_tools = tools.is_array() && !tools.empty();

  std::string out;
  // Text that comes from the request, not the template: never a source of special tokens.
  auto C = [&](const std::string& s) {
    spans->push_back({out.size(), out.size() + s.size()});
    out += s;
  };
  out = absl::StrCat(
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: ",
      date, "\n\nReasoning: ", effort,
      "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.",
      has_tools ? "\nCalls to these tools must go to the commentary channel: 'functions'." : "",
      "<|end|>");

  size_t first = 0;
  std::string developer;
  if (messages[0].role == "system" || messages[0].role == "developer") {
    first = 1;
    developer = messages[0].content;
  }
  if (!developer.empty() || has_tools) {
    out += "<|start|>developer<|message|>";
    if (!developer.empty()) {
      out += "# Instructions\n\n";
      C(developer);
      out += "\n\n";
    }
    if (has_tools) {
      ASSIGN_OR_RETURN(std::string ns, RenderHarmonyToolNamespace(tools));
      out += "# Tools\n\n";
      C(ns);
    }
    out += "<|end|>";
  }

  std::string last_tool_call;  // name of the latest assistant tool call still awaiting results
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (m.role == "user") {
      out += "<|start|>user<|message|>";
      C(m.content);
      out += "<|end|>";
    } else if (m.role == "assistant") {
      for (const auto& [field, text] : {std::pair{"content", &m.content}, {"reasoning", &m.reasoning}}) {
        if (text->find("<|channel|>analysis<|message|>") != std::string::npos ||
            text->find("<|channel|>final<|message|>") != std::string::npos) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ".", field, ": holds harmony <|channel|> tags; pass the text only"));
        }
      }
      if (!m.tool_calls_json.empty()) {
        auto parsed = ParseBoundedJson<nlohmann::ordered_json>(m.tool_calls_json);
        if (!parsed.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ".tool_calls: ", parsed.status().message()));
        }
        nlohmann::ordered_json calls = *std::move(parsed);
        if (!calls.is_array() || calls.empty() || !calls[0].is_object()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ".tool_calls: expected a non-empty array of calls"));
        }
        // The template renders the first call only (gpt-oss makes one call per turn).
        const nlohmann::ordered_json& call =
            calls[0].contains("function") ? calls[0]["function"] : calls[0];
        if (!call.contains("name") || !call["name"].is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ".tool_calls[0].function.name: missing"));
        }
        // Reasoning before a call is kept until a later final answer exists.
        bool future_final = false;
        for (size_t k = i + 1; k < messages.size(); ++k)
          future_final |= messages[k].role == "assistant" && messages[k].tool_calls_json.empty();
        if (!m.content.empty() && !m.reasoning.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, ": an assistant tool call may carry content or reasoning, not both"));
        }
        const std::string& analysis = !m.content.empty() ? m.content : m.reasoning;
        if (!analysis.empty() && !future_final) {
          out += "<|start|>assistant<|channel|>analysis<|message|>";
          C(analysis);
          out += "<|end|>";
        }
        // OpenAI sends arguments as a JSON string; like vLLM, parse it so the template's
        // tojson writes the object rather than a quoted string.
        nlohmann::ordered_json args = call.contains("arguments") ? call["arguments"]
                                                                 : nlohmann::ordered_json::object();
        if (args.is_string()) {
          // The client's text: bounded like every JSON it sends. Not JSON at all: rendered as
          // the string it is; too deep or a repeated key: refused.
          BoundedJsonError why;
          auto parsed = ParseBoundedJson<nlohmann::ordered_json>(args.get<std::string>(), {}, &why);
          if (parsed.ok()) {
            args = *std::move(parsed);
          } else if (why.kind != BoundedJsonError::Kind::kSyntax) {
            return absl::InvalidArgumentError(absl::StrCat(
                where, ".tool_calls[0].function.arguments: ", parsed.status().message()));
          }
        }
        const std::string name = call["name"].get<std::string>();
        const std::string content_type =
            call.contains("content_type") && call["content_type"].is_string()
                ? call["content_type"].get<std::string>()
                : "json";
        out += "<|start|>assistant to=functions.";
        C(name);
        out += "<|channel|>commentary ";
        C(content_type);
        out += "<|message|>";
        C(PythonJsonDumps(args));
        out += "<|call|>";
        last_tool_call = name;
        continue;
      }
      // Only a trailing assistant turn without a generation prompt (training) ends in
      // <|return|> and keeps its reasoning; history turns end in <|end|> and drop it.
      const bool last_for_training = i + 1 == messages.size() && !options.add_generation_prompt;
      if (last_for_training && !m.reasoning.empty()) {
        out += "<|start|>assistant<|channel|>analysis<|message|>";
        C(m.reasoning);
        out += "<|end|>";
      }
      out += "<|start|>assistant<|channel|>final<|message|>";
      C(m.content);
      out += last_for_training ? "<|return|>" : "<|end|>";
      if (!last_for_training) last_tool_call.clear();
    } else if (m.role == "tool") {
      // The template names the result after the latest call; a message's own name serves when
      // the history has no call (clients that send results without the call).
      const std::string name = !last_tool_call.empty() ? last_tool_call : m.name;
      if (name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": a tool result needs an earlier assistant tool call (or a name)"));
      }
      out += "<|start|>functions.";
      C(name);
      out += " to=assistant<|channel|>commentary<|message|>";
      C(JsonQuote(m.content));
      out += "<|end|>";
    } else if (m.role == "system" || m.role == "developer") {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".role: \"", m.role, "\" is only accepted as the first message for this model"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".role: unknown role \"", m.role,
          "\" (expected system, developer, user, assistant or tool)"));
    }
  }
  if (options.add_generation_prompt) {
    out += "<|start|>assistant";
    if (options.forced_tool == "*") {
      out += HarmonyForcedToolHeader("*");
    } else if (!options.forced_tool.empty()) {
      out += "<|channel|>commentary to=functions.";
      C(options.forced_tool);  // the client's text: never special tokens
      out += " <|constrain|>json<|message|>";
    } else if (options.forced_final) {
      out += HarmonyForcedFinalHeader();
    }
  }
  return out;
}

std::string HarmonyForcedToolHeader(const std::string& forced_tool) {
  if (forced_tool.empty()) return "";
  if (forced_tool == "*") return "<|channel|>commentary to=functions.";
  return absl::StrCat("<|channel|>commentary to=functions.", forced_tool,
                      " <|constrain|>json<|message|>");
}

std::string HarmonyForcedFinalHeader() { return "<|channel|>final<|message|>"; }

std::unique_ptr<ChatOutputParser> HarmonyChatTemplate::NewParser() const {
  return std::make_unique<HarmonyOutputParser>(tok_, tokens_);
}

std::unique_ptr<ChatOutputParser> HarmonyChatTemplate::NewParserFor(
    const ChatRenderOptions& options) const {
  auto p = std::make_unique<HarmonyOutputParser>(tok_, tokens_);
  if (!options.forced_tool.empty() && options.add_generation_prompt) {
    p->Prime(tok_->Encode(HarmonyForcedToolHeader(options.forced_tool), /*allow_special=*/true));
  } else if (options.forced_final && options.add_generation_prompt) {
    p->Prime(tok_->Encode(HarmonyForcedFinalHeader(), /*allow_special=*/true));
  }
  return p;
}

}  // namespace mxserve

#include "coordinator/chat/deepseek_v3_chat_template.h"

#include "absl/strings/str_cat.h"
#include "coordinator/chat/harmony_tools.h"
#include "coordinator/chat/plain_output_parser.h"
#include "coordinator/chat/template_inputs.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mxserve {
namespace {

using ojson = nlohmann::ordered_json;

constexpr char kBos[] = "<｜begin▁of▁sentence｜>";
constexpr char kEos[] = "<｜end▁of▁sentence｜>";
constexpr char kUser[] = "<｜User｜>";
constexpr char kAssistant[] = "<｜Assistant｜>";
constexpr char kCallsBegin[] = "<｜tool▁calls▁begin｜>";
constexpr char kCallsEnd[] = "<｜tool▁calls▁end｜>";
constexpr char kCallBegin[] = "<｜tool▁call▁begin｜>";
constexpr char kCallEnd[] = "<｜tool▁call▁end｜>";
constexpr char kSep[] = "<｜tool▁sep｜>";
constexpr char kOutputsBegin[] = "<｜tool▁outputs▁begin｜>";
constexpr char kOutputsEnd[] = "<｜tool▁outputs▁end｜>";
constexpr char kOutputBegin[] = "<｜tool▁output▁begin｜>";
constexpr char kOutputEnd[] = "<｜tool▁output▁end｜>";

}  // namespace

absl::StatusOr<std::unique_ptr<DeepSeekV3ChatTemplate>> DeepSeekV3ChatTemplate::Create(
    const Tokenizer* tokenizer) {
  ASSIGN_OR_RETURN(auto markers,
                   ResolveMarkers(tokenizer, "DeepSeek-V3",
                                  {kEos, kBos, kUser, kAssistant, kCallsBegin, kCallsEnd,
                                   kCallBegin, kCallEnd, kSep, kOutputsBegin, kOutputsEnd,
                                   kOutputBegin, kOutputEnd}));
  const int32_t eos = markers[0].second;
  return std::unique_ptr<DeepSeekV3ChatTemplate>(
      new DeepSeekV3ChatTemplate(tokenizer, std::move(markers), eos));
}

absl::StatusOr<std::string> DeepSeekV3ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                           const ChatRenderOptions& options) const {
  ASSIGN_OR_RETURN(PromptBuilder p, Build(messages, options));
  return p.Take();
}

absl::StatusOr<std::vector<int32_t>> DeepSeekV3ChatTemplate::RenderIds(
    const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  ASSIGN_OR_RETURN(PromptBuilder p, Build(messages, options));
  return p.Encode(*tok_);
}

std::unique_ptr<ChatOutputParser> DeepSeekV3ChatTemplate::NewParser() const {
  return std::make_unique<PlainOutputParser>(tok_);
}

// The template's state, named as its `ns` namespace names it.
absl::StatusOr<PromptBuilder> DeepSeekV3ChatTemplate::Build(const std::vector<ChatMessage>& messages,
                                                            const ChatRenderOptions& options) const {
  if (messages.empty()) return absl::InvalidArgumentError("messages: the conversation is empty");
  PromptBuilder p(&markers_);
  p.Markup(kBos);
  // Every system message, joined by a blank line, comes first.
  bool first_system = true;
  for (const ChatMessage& m : messages) {
    if (m.role != "system") continue;
    if (!first_system) p.Markup("\n\n");
    p.Text(m.content);
    first_system = false;
  }
  bool is_first = false;  // never reset: only the first call of the conversation opens a list
  bool is_tool = false;
  bool is_output_first = true;  // never reset either
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (m.role == "user") {
      is_tool = false;
      p.Markup(kUser);
      p.Text(m.content);
    } else if (m.role == "assistant") {
      ASSIGN_OR_RETURN(ojson calls, ToolCallsForTemplate(m, i));
      // The template renders calls for content None only: an empty content with calls.
      if (m.content.empty() && !calls.empty()) {
        is_tool = false;
        for (size_t k = 0; k < calls.size(); ++k) {
          const ojson& call = calls[k];
          const ojson& fn = call["function"];
          const std::string cw = absl::StrCat(where, ".tool_calls[", k, "]");
          const std::string type =
              call.contains("type") && call["type"].is_string() ? call["type"].get<std::string>()
                                                                : "function";
          // The arguments are joined in as the text the client sent.
          std::string args;
          if (fn.contains("arguments") && fn["arguments"].is_string()) {
            args = fn["arguments"].get<std::string>();
          } else if (fn.contains("arguments") && !fn["arguments"].is_null()) {
            args = PythonJsonDumps(fn["arguments"]);
          } else {
            return absl::InvalidArgumentError(absl::StrCat(cw, ".function.arguments: missing"));
          }
          p.Markup(is_first ? std::string("\n") + kCallBegin
                            : absl::StrCat(kAssistant, kCallsBegin, kCallBegin));
          p.Text(type);
          p.Markup(kSep);
          p.Text(fn["name"].get<std::string>());
          p.Markup("\n```json\n");
          p.Text(args);
          p.Markup(absl::StrCat("\n```", kCallEnd));
          if (is_first) p.Markup(absl::StrCat(kCallsEnd, kEos));
          is_first = true;
        }
      } else if (is_tool) {
        p.Markup(kOutputsEnd);
        p.Text(m.content);
        p.Markup(kEos);
        is_tool = false;
      } else {
        p.Markup(kAssistant);
        p.Text(m.content);
        p.Markup(kEos);
      }
    } else if (m.role == "tool") {
      is_tool = true;
      p.Markup(is_output_first ? absl::StrCat(kOutputsBegin, kOutputBegin)
                               : absl::StrCat("\n", kOutputBegin));
      p.Text(m.content);
      p.Markup(kOutputEnd);
      is_output_first = false;
    } else if (m.role != "system" && m.role != "developer") {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".role: unknown role \"", m.role,
          "\" (expected system, developer, user, assistant or tool)"));
    }
  }
  if (is_tool) p.Markup(kOutputsEnd);
  if (options.add_generation_prompt && !is_tool) p.Markup(kAssistant);
  return p;
}

}  // namespace mxserve

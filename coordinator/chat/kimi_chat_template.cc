#include "coordinator/chat/kimi_chat_template.h"

#include "absl/strings/str_cat.h"
#include "coordinator/chat/harmony_tools.h"
#include "coordinator/chat/plain_output_parser.h"
#include "coordinator/chat/template_inputs.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mxserve {

using ojson = nlohmann::ordered_json;

absl::StatusOr<std::unique_ptr<KimiChatTemplate>> KimiChatTemplate::Create(
    const Tokenizer* tokenizer, KimiVariant variant) {
  ASSIGN_OR_RETURN(auto markers,
                   ResolveMarkers(tokenizer, "Kimi",
                                  {"<|im_end|>", "<|im_user|>", "<|im_assistant|>",
                                   "<|im_system|>", "<|im_middle|>",
                                   "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                                   "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                                   "<|tool_call_end|>"}));
  const int32_t im_end = markers[0].second;
  return std::unique_ptr<KimiChatTemplate>(
      new KimiChatTemplate(tokenizer, variant, std::move(markers), im_end));
}

absl::StatusOr<std::string> KimiChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                     const ChatRenderOptions& options) const {
  ASSIGN_OR_RETURN(PromptBuilder p, Build(messages, options));
  return p.Take();
}

absl::StatusOr<std::vector<int32_t>> KimiChatTemplate::RenderIds(
    const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) const {
  ASSIGN_OR_RETURN(PromptBuilder p, Build(messages, options));
  return p.Encode(*tok_);
}

std::unique_ptr<ChatOutputParser> KimiChatTemplate::NewParser() const {
  return std::make_unique<PlainOutputParser>(tok_);
}

// <|tool_calls_section_begin|>(<|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS
// <|tool_call_end|>)*<|tool_calls_section_end|>: ARGS as the template's tojson writes the parsed
// arguments (Python json.dumps), or the text itself when it is not JSON.
absl::Status KimiChatTemplate::AppendToolCalls(const ChatMessage& m, size_t i,
                                               PromptBuilder& p) const {
  ASSIGN_OR_RETURN(ojson calls, ToolCallsForTemplate(m, i));
  p.Markup("<|tool_calls_section_begin|>");
  for (size_t k = 0; k < calls.size(); ++k) {
    const ojson& call = calls[k];
    const std::string where = absl::StrCat("messages[", i, "].tool_calls[", k, "]");
    if (!call.contains("id") || !call["id"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".id: expected a string"));
    }
    ASSIGN_OR_RETURN(ojson args, ArgumentsForTemplate(call["function"], where + ".function.arguments"));
    p.Markup("<|tool_call_begin|>");
    p.Text(call["id"].get<std::string>());
    p.Markup("<|tool_call_argument_begin|>");
    p.Text(args.is_string() ? args.get<std::string>() : PythonJsonDumps(args));
    p.Markup("<|tool_call_end|>");
  }
  p.Markup("<|tool_calls_section_end|>");
  return absl::OkStatus();
}

absl::StatusOr<PromptBuilder> KimiChatTemplate::Build(const std::vector<ChatMessage>& messages,
                                                      const ChatRenderOptions& options) const {
  if (messages.empty()) return absl::InvalidArgumentError("messages: the conversation is empty");
  ASSIGN_OR_RETURN(ojson tools, ToolsForTemplate(options.tools_json));
  PromptBuilder p(&markers_);
  if (!tools.empty()) {
    // The template's own line breaks and indentation, kept by its whitespace control.
    p.Markup("<|im_system|>tool_declare<|im_middle|>\n  # Tools\n  ");
    p.Text(PythonJsonDumps(tools));
    p.Markup("<|im_end|>");
  }
  if (variant_ == KimiVariant::kK2 && messages[0].role != "system") {
    p.Markup(absl::StrCat("<|im_system|>system<|im_middle|>", kKimiDefaultSystem, "<|im_end|>"));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (m.role != "system" && m.role != "developer" && m.role != "user" &&
        m.role != "assistant" && m.role != "tool") {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".role: unknown role \"", m.role,
          "\" (expected system, developer, user, assistant or tool)"));
    }
    // The header names the turn after the message's name when it has one, else its role.
    const std::string& role_name = m.name.empty() ? m.role : m.name;
    p.Markup(m.role == "user" ? "<|im_user|>" : m.role == "assistant" ? "<|im_assistant|>"
                                                                       : "<|im_system|>");
    p.Text(role_name);
    p.Markup("<|im_middle|>");
    if (m.role == "assistant" && !m.tool_calls_json.empty() && m.tool_calls_json != "[]") {
      p.Text(m.content);
      RETURN_IF_ERROR(AppendToolCalls(m, i, p));
    } else if (m.role == "tool") {
      p.Markup("## Return of ");
      p.Text(m.tool_call_id);
      p.Markup("\n    ");
      p.Text(m.content);
    } else {
      p.Text(m.content);
    }
    p.Markup("<|im_end|>");
  }
  if (options.add_generation_prompt) p.Markup("<|im_assistant|>assistant<|im_middle|>");
  return p;
}

}  // namespace mxserve

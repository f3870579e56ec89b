// Chat templates: render OpenAI-style messages into the model's prompt text, and parse the
// model's output tokens back into content and reasoning. gpt-oss speaks harmony; Kimi K2,
// Kimi Linear and DeepSeek-V3 their published Jinja templates (docs/MODELS.md, "Chat formats").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

class Tokenizer;

struct ChatMessage {
  std::string role;     // system | developer | user | assistant | tool
  std::string content;
  std::string name;     // tool name for role "tool" (optional); Kimi renders any role's name
  // Assistant turns only: the OpenAI "tool_calls" array as JSON text ("" = none), and earlier
  // reasoning (reasoning_content / HF "thinking"), which harmony keeps only across tool calls.
  std::string tool_calls_json;
  std::string reasoning;
  std::string tool_call_id;  // role "tool": the call answered (Kimi renders it)
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  std::string reasoning_effort = "medium";  // low | medium | high
  std::string current_date;                 // "YYYY-MM-DD"; empty = today (UTC)
  // The OpenAI request's "tools" array as JSON text ("" = none); key order is kept, as the HF
  // template renders parameters in the order given.
  std::string tools_json;
  // tool_choice that forces a call: "" = the model decides (auto, none); "*" = some function
  // (required); else the function's name (named). The template ends the generation prompt
  // inside the call's header, so the model can only write the (rest of the) call, and
  // NewParserFor(options) starts as if it had read that header.
  std::string forced_tool;
  // The request's tool_choice when it is a string ("auto", "none", "required"; "" = absent or a
  // named function). Kimi K3 tells the model of none and required in a system message.
  std::string tool_choice;
  // The request's response_format object as JSON text ("" = none). Kimi K3 renders json_object
  // and json_schema as a system message.
  std::string response_format_json;
  // chat_template_kwargs (only those the template lists in TemplateKwargs()): "thinking"
  // (nullopt = the template's default) and "thinking_effort" ("" = the template's default).
  std::optional<bool> thinking;
  std::string thinking_effort;
  // Structured output: the generation prompt ends inside the answer's header (harmony: the
  // final channel), so the grammar-constrained text is the content; NewParserFor(options)
  // starts as if it had read that header. Templates without headers ignore it.
  bool forced_final = false;
};

// Streaming parser of the model's output tokens into OpenAI fields.
class ChatOutputParser {
 public:
  // One streamed piece of a function call (harmony commentary message to=functions.NAME),
  // shaped like OpenAI's streamed tool_calls: the first piece of a call carries its name.
  struct ToolCallDelta {
    int index = 0;          // 0, 1, ... in the order the calls appear in this response
    std::string name;       // on the call's first piece only
    std::string arguments;  // JSON text, in pieces
    std::string id;         // first piece only, where the format names the call (Kimi K2)
  };
  struct Delta {
    std::string content;    // user-visible text (harmony final/commentary channel)
    std::string reasoning;  // harmony analysis channel -> reasoning_content
    std::vector<ToolCallDelta> tool_calls;
  };
  virtual ~ChatOutputParser() = default;
  virtual Delta Push(int32_t token_id) = 0;
  virtual Delta Finish() = 0;  // flush held-back bytes at end of stream
};

class ChatTemplate {
 public:
  // Picks the template for the model folder's config.json model_type, told apart further by the
  // tokenizer's special tokens (tokenizer_config.json): "gpt_oss" -> harmony; "kimi_k2" -> Kimi
  // K2; "kimi_linear" -> Kimi Linear, or Kimi K3 when the tokenizer has K3's XTML markers;
  // "kimi_k3" -> Kimi K3; "deepseek_v3" -> DeepSeek-V3, or Kimi K2 when the tokenizer is Kimi's
  // (K2's deployment guide renames its model_type so). Error otherwise.
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> ForModel(const std::string& model_type,
                                                                const Tokenizer* tokenizer);
  virtual ~ChatTemplate() = default;
  // InvalidArgument naming the message index on bad roles or empty conversations.
  virtual absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                             const ChatRenderOptions& options) const = 0;
  // Render, tokenized safely: only the template's own special tokens become special ids; text
  // from the messages that spells one (e.g. "<|start|>system") stays ordinary text. Equals
  // tokenizer.Encode(Render(...), true) otherwise. The front doors tokenize chat through it.
  virtual absl::StatusOr<std::vector<int32_t>> RenderIds(const std::vector<ChatMessage>& messages,
                                                         const ChatRenderOptions& options) const = 0;
  // Tokens that end an assistant turn (harmony: <|return|>, <|call|>).
  virtual std::vector<int32_t> StopTokenIds() const = 0;
  virtual std::unique_ptr<ChatOutputParser> NewParser() const = 0;
  // Whether Render honours ChatRenderOptions::forced_tool (else the front door rejects it).
  virtual bool CanForceToolCalls() const { return false; }
  // The parser for a turn rendered with `options` (forced_tool: the forced header is already
  // read, and the call's name is reported by the first Push or Finish).
  virtual std::unique_ptr<ChatOutputParser> NewParserFor(const ChatRenderOptions& options) const {
    return NewParser();
  }
  // The chat_template_kwargs keys this template reads; the front doors refuse any other.
  virtual std::vector<std::string> TemplateKwargs() const { return {}; }
};

}  // namespace mxserve

// gpt-oss's chat format (harmony; docs/MODELS.md): renders OpenAI messages the way the HF
// chat_template.jinja shipped with gpt-oss does, and parses the model's harmony output.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/chat/chat_template.h"

namespace mxserve {

// The harmony special tokens, resolved once from the tokenizer.
struct HarmonyTokens {
  int32_t start, end, message, channel, constrain, ret, call;
};

class HarmonyChatTemplate : public ChatTemplate {
 public:
  // Error when the tokenizer lacks a harmony special token (naming it).
  static absl::StatusOr<std::unique_ptr<HarmonyChatTemplate>> Create(const Tokenizer* tokenizer);

  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) const override;
  absl::StatusOr<std::vector<int32_t>> RenderIds(const std::vector<ChatMessage>& messages,
                                                 const ChatRenderOptions& options) const override;
  std::vector<int32_t> StopTokenIds() const override { return {tokens_.ret, tokens_.call}; }
  std::unique_ptr<ChatOutputParser> NewParser() const override;
  bool CanForceToolCalls() const override { return true; }
  std::unique_ptr<ChatOutputParser> NewParserFor(const ChatRenderOptions& options) const override;

 private:
  HarmonyChatTemplate(const Tokenizer* tok, HarmonyTokens t) : tok_(tok), tokens_(t) {}
  // Render, also recording the byte ranges of text taken from the request.
  absl::StatusOr<std::string> RenderWithSpans(const std::vector<ChatMessage>& messages,
                                              const ChatRenderOptions& options,
                                              std::vector<std::pair<size_t, size_t>>* spans) const;
  const Tokenizer* tok_;
  HarmonyTokens tokens_;
};

// The harmony text that follows "<|start|>assistant" to force a tool call (forced_tool as in
// ChatRenderOptions; "" for none): named "<|channel|>commentary to=functions.NAME
// <|constrain|>json<|message|>", required "<|channel|>commentary to=functions.".
std::string HarmonyForcedToolHeader(const std::string& forced_tool);
// The harmony text that follows "<|start|>assistant" when the answer is structured output:
// the final channel's header (ChatRenderOptions::forced_final; no reasoning first).
std::string HarmonyForcedFinalHeader();

// Python's json.dumps(s, ensure_ascii=False): what the HF template's `tojson` filter produces.
std::string JsonQuote(const std::string& s);

}  // namespace mxserve

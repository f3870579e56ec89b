// Kimi's chat format (docs/MODELS.md, "Chat formats"): renders OpenAI messages the
// way the chat_template.jinja published with Kimi-K2-Instruct-0905 does, under vLLM's inputs;
// Kimi-Linear-Instruct's is the same without the default system message.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/chat/chat_template.h"
#include "coordinator/chat/prompt_builder.h"

namespace mxserve {

enum class KimiVariant {
  kK2,      // a default system message when the conversation starts without one
  kLinear,  // Kimi-Linear-Instruct: none
};

// Rendered when a K2 conversation does not start with a system message.
inline constexpr char kKimiDefaultSystem[] = "You are Kimi, an AI assistant created by Moonshot AI.";

class KimiChatTemplate : public ChatTemplate {
 public:
  // Error naming the first of Kimi's markers (<|im_end|>, <|im_user|>, ...) the tokenizer lacks.
  static absl::StatusOr<std::unique_ptr<KimiChatTemplate>> Create(const Tokenizer* tokenizer,
                                                                  KimiVariant variant);

  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) const override;
  absl::StatusOr<std::vector<int32_t>> RenderIds(const std::vector<ChatMessage>& messages,
                                                 const ChatRenderOptions& options) const override;
  std::vector<int32_t> StopTokenIds() const override { return {im_end_}; }
  std::unique_ptr<ChatOutputParser> NewParser() const override;

 private:
  KimiChatTemplate(const Tokenizer* tok, KimiVariant v,
                   std::vector<std::pair<std::string, int32_t>> markers, int32_t im_end)
      : tok_(tok), variant_(v), markers_(std::move(markers)), im_end_(im_end) {}
  absl::StatusOr<PromptBuilder> Build(const std::vector<ChatMessage>& messages,
                                      const ChatRenderOptions& options) const;
  absl::Status AppendToolCalls(const ChatMessage& m, size_t i, PromptBuilder& p) const;

  const Tokenizer* tok_;
  KimiVariant variant_;
  std::vector<std::pair<std::string, int32_t>> markers_;
  int32_t im_end_;
};

}  // namespace mxserve

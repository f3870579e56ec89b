// DeepSeek-V3's chat format (docs/MODELS.md, "Chat formats"): renders OpenAI messages the way the
// chat_template in deepseek-ai/DeepSeek-V3's tokenizer_config.json does, quirks included (it
// gathers every system message up front, ignores tools and developer messages, and closes a
// tool-call list only after a second call).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/chat/chat_template.h"
#include "coordinator/chat/prompt_builder.h"

namespace mxserve {

class DeepSeekV3ChatTemplate : public ChatTemplate {
 public:
  // Error naming the first DeepSeek-V3 marker (<｜User｜>, ...) the tokenizer lacks.
  static absl::StatusOr<std::unique_ptr<DeepSeekV3ChatTemplate>> Create(const Tokenizer* tokenizer);

  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) const override;
  absl::StatusOr<std::vector<int32_t>> RenderIds(const std::vector<ChatMessage>& messages,
                                                 const ChatRenderOptions& options) const override;
  std::vector<int32_t> StopTokenIds() const override { return {eos_}; }
  std::unique_ptr<ChatOutputParser> NewParser() const override;

 private:
  DeepSeekV3ChatTemplate(const Tokenizer* tok, std::vector<std::pair<std::string, int32_t>> markers,
                         int32_t eos)
      : tok_(tok), markers_(std::move(markers)), eos_(eos) {}
  absl::StatusOr<PromptBuilder> Build(const std::vector<ChatMessage>& messages,
                                      const ChatRenderOptions& options) const;

  const Tokenizer* tok_;
  std::vector<std::pair<std::string, int32_t>> markers_;
  int32_t eos_;
};

}  // namespace mxserve

// Kimi K3's XTML chat format (docs/MODELS.md, "Chat formats"): renders OpenAI messages the way
// the encoding_k3.py published with moonshotai/Kimi-K3 does (K3 ships no Jinja template), as
// segments tokenized one by one: markers as their tokens, all other text as ordinary text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/chat/chat_template.h"

namespace mxserve {

// One piece of a rendered K3 prompt. marker: one of <|open|>, <|close|>, <|sep|>,
// <|end_of_msg|>, which becomes its token; otherwise the text is encoded on its own as ordinary
// text (a marker spelled in it stays text, and no token spans two segments).
struct XtmlSegment {
  std::string text;
  bool marker = false;
  bool operator==(const XtmlSegment&) const = default;
};

inline constexpr char kK3DefaultThinkingEffort[] = "max";

// Whether the tokenizer is Kimi K3's: it has the XTML markers (<|open|>, <|close|>, <|sep|>,
// <|end_of_msg|>) on the ids where K2's has <|im_user|>...; a K3 text model exported with
// model_type "kimi_linear" is told from Kimi Linear by this.
bool HasXtmlMarkers(const Tokenizer* tokenizer);

class KimiK3ChatTemplate : public ChatTemplate {
 public:
  // Error naming the first of K3's markers the tokenizer lacks.
  static absl::StatusOr<std::unique_ptr<KimiK3ChatTemplate>> Create(const Tokenizer* tokenizer);

  // The prompt's segments. InvalidArgument naming the field: an unknown role, a tool message
  // with no name to be found, bad tools/tool_calls/response_format JSON, a thinking_effort
  // other than low, high or max.
  absl::StatusOr<std::vector<XtmlSegment>> Segments(const std::vector<ChatMessage>& messages,
                                                    const ChatRenderOptions& options) const;
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) const override;
  absl::StatusOr<std::vector<int32_t>> RenderIds(const std::vector<ChatMessage>& messages,
                                                 const ChatRenderOptions& options) const override;
  std::vector<int32_t> StopTokenIds() const override { return {end_of_msg_}; }
  std::unique_ptr<ChatOutputParser> NewParser() const override;
  std::vector<std::string> TemplateKwargs() const override { return {"thinking", "thinking_effort"}; }

 private:
  KimiK3ChatTemplate(const Tokenizer* tok, std::vector<std::pair<std::string, int32_t>> markers)
      : tok_(tok), markers_(std::move(markers)), end_of_msg_(markers_[3].second) {}

  const Tokenizer* tok_;
  std::vector<std::pair<std::string, int32_t>> markers_;  // open, close, sep, end_of_msg
  int32_t end_of_msg_;
};

}  // namespace mxserve

// Kimi K2's output, read as vLLM's `kimi_k2` reasoning and tool parsers read it. Reasoning is
// `<think>…</think>`; it may start without `<think>` (the prompt opened it) and also ends where
// the tool section begins. Tool calls: `<|tool_calls_section_begin|>` then per call
// `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>`;
// the call's id is that header and its name the header's last dot-segment before ':'.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "coordinator/chat/output_text_stages.h"

namespace mxserve {

inline constexpr std::string_view kK2ThinkOpen = "<think>";
inline constexpr std::string_view kK2ThinkClose = "</think>";
inline constexpr std::string_view kK2SectionBegin = "<|tool_calls_section_begin|>";
inline constexpr std::string_view kK2SectionEnd = "<|tool_calls_section_end|>";
inline constexpr std::string_view kK2CallBegin = "<|tool_call_begin|>";
inline constexpr std::string_view kK2ArgBegin = "<|tool_call_argument_begin|>";
inline constexpr std::string_view kK2CallEnd = "<|tool_call_end|>";

class KimiK2Reasoning : public ReasoningStage {
 public:
  void Feed(std::string_view text, std::string* reasoning, std::string* rest) override;
  void Finish(std::string* reasoning, std::string* rest) override;
  std::vector<std::string> Markers() const override;
  // The whole output at once: (reasoning, rest); rest is nullopt while still reasoning.
  static std::pair<std::string, std::optional<std::string>> Extract(std::string_view text);

 private:
  enum class State { kStart, kReasoning, kHeld, kRest };
  State state_ = State::kStart;
  std::string buf_;  // text not yet settled
};

class KimiK2Tools : public ToolStage {
 public:
  void Feed(std::string_view text, std::string* content,
            std::vector<ParsedToolCall>* calls) override;
  void Finish(std::string* content, std::vector<ParsedToolCall>* calls) override;
  std::vector<std::string> Markers() const override;
  static ParsedOutput Extract(std::string_view text);  // reasoning left empty

 private:
  void ScanCalls(std::vector<ParsedToolCall>* calls);
  std::string all_;        // every byte fed so far
  size_t sent_ = 0;        // content bytes of all_ already settled
  bool in_section_ = false;
  size_t scan_ = 0;        // where the next call may begin (calls are matched from byte 0)
};

}  // namespace mxserve

// DeepSeek's output, read as vLLM's `deepseek_v3` tool parser and `deepseek_r1` reasoning parser
// read it. Tool calls: `<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function
// <｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>` (type, name and arguments each on
// one line); a call whose type is not "function" makes the whole output plain content, as vLLM's
// validation error does. Reasoning: `<think>…</think>`, where the `<think>` may be in the prompt.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "coordinator/chat/output_text_stages.h"

namespace mxserve {

inline constexpr std::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
inline constexpr std::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
inline constexpr std::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
inline constexpr std::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
inline constexpr std::string_view kDsSep = "<｜tool▁sep｜>";

// deepseek_r1: the text before the first `<think>` is dropped; reasoning runs to the first
// `</think>`, or to the end. Only a `<think>` that opens the output is dropped here: text is
// reasoning as soon as it comes, so where other text precedes a `<think>` that text is kept as
// reasoning (vLLM's non-streamed path drops it, its streamed path calls it content).
class DeepSeekR1Reasoning : public ReasoningStage {
 public:
  void Feed(std::string_view text, std::string* reasoning, std::string* rest) override;
  void Finish(std::string* reasoning, std::string* rest) override;
  std::vector<std::string> Markers() const override { return {"<think>", "</think>"}; }
  static std::pair<std::string, std::optional<std::string>> Extract(std::string_view text);

 private:
  bool started_ = false;  // past a leading (partial) <think>
  bool done_ = false;     // past </think>
  std::string buf_;
};

// Content streams until `<｜tool▁calls▁begin｜>`; the calls come whole at the end of the output
// (one malformed type would turn every call back into content).
class DeepSeekV3Tools : public ToolStage {
 public:
  void Feed(std::string_view text, std::string* content,
            std::vector<ParsedToolCall>* calls) override;
  void Finish(std::string* content, std::vector<ParsedToolCall>* calls) override;
  std::vector<std::string> Markers() const override;
  static ParsedOutput Extract(std::string_view text);

 private:
  std::string all_;
  size_t sent_ = 0;
  bool in_calls_ = false;
};

}  // namespace mxserve

// Kimi K3's XTML output, read as vLLM's `kimi_k3` reasoning and tool parsers read it:
// `{reasoning}<|close|>think<|sep|><|open|>response<|sep|>{answer}<|close|>response<|sep|>
// [<|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|><|open|>argument key="K"
// type="T"<|sep|>VALUE<|close|>argument<|sep|>…<|close|>call<|sep|><|close|>tools<|sep|>]
// <|close|>message<|sep|>`. Arguments of type string are raw text, others JSON; attribute values
// unescape &quot; then &amp;. Markers are matched exactly (vLLM also tolerates spaces inside
// them, which only its own detokenizer option produces).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "coordinator/chat/output_text_stages.h"

namespace mxserve {

// Reasoning runs from the start (the prompt ends with `<|open|>think<|sep|>`; one at the start of
// the output is dropped) to the first `<|close|>think<|sep|>`. An output cut off before that is
// all reasoning (vLLM's non-streamed path would call it content, its streamed path reasoning).
class KimiK3Reasoning : public ReasoningStage {
 public:
  void Feed(std::string_view text, std::string* reasoning, std::string* rest) override;
  void Finish(std::string* reasoning, std::string* rest) override;
  std::vector<std::string> Markers() const override { return {}; }  // ordinary tokens in K3
  static std::pair<std::string, std::optional<std::string>> Extract(std::string_view text);

 private:
  bool started_ = false, done_ = false;
  std::string buf_;
};

// The text after reasoning. With tools: the response channel is the content and each call of the
// tools channel a tool call (which come whole at the end of the output). Without (tools_active
// false): the response channel unwrapped, as vLLM's reasoning parser does when no tool parser
// runs. Content streams up to the first marker of the response body.
class KimiK3Tools : public ToolStage {
 public:
  explicit KimiK3Tools(bool tools_active) : tools_active_(tools_active) {}
  void Feed(std::string_view text, std::string* content,
            std::vector<ParsedToolCall>* calls) override;
  void Finish(std::string* content, std::vector<ParsedToolCall>* calls) override;
  std::vector<std::string> Markers() const override { return {}; }
  static ParsedOutput Extract(std::string_view text, bool tools_active);

 private:
  bool tools_active_;
  std::string all_;
  std::string sent_;       // content streamed so far
  bool body_known_ = false;
  size_t body_start_ = 0;
  bool held_ = false;      // a marker was seen in the body: the rest waits for Finish
};

}  // namespace mxserve

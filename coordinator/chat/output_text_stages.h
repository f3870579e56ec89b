// The two text stages every non-harmony output parser is built from, as vLLM composes its
// parsers: a reasoning stage splits the output's text into reasoning and the rest, and a tool
// stage splits the rest into content and function calls. Each stage is fed the text in pieces of
// any size and its outputs, concatenated, never depend on where the pieces were cut.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mxserve {

// One complete function call. `id` is "" where the format has none (the front door makes one).
struct ParsedToolCall {
  std::string id, name, arguments;
  bool operator==(const ParsedToolCall&) const = default;
};

// The whole of one output, parsed at once (what a non-streamed response reports).
struct ParsedOutput {
  std::string reasoning, content;
  std::vector<ParsedToolCall> tool_calls;
  bool operator==(const ParsedOutput&) const = default;
};

class ReasoningStage {
 public:
  virtual ~ReasoningStage() = default;
  // Appends what `text` settles to `reasoning` and to `rest` (the text after reasoning).
  virtual void Feed(std::string_view text, std::string* reasoning, std::string* rest) = 0;
  virtual void Finish(std::string* reasoning, std::string* rest) = 0;
  // Special tokens this stage reads as markers: the token layer spells them out.
  virtual std::vector<std::string> Markers() const = 0;
};

class ToolStage {
 public:
  virtual ~ToolStage() = default;
  // Appends what `text` settles to `content` and complete calls to `calls`.
  virtual void Feed(std::string_view text, std::string* content,
                    std::vector<ParsedToolCall>* calls) = 0;
  virtual void Finish(std::string* content, std::vector<ParsedToolCall>* calls) = 0;
  virtual std::vector<std::string> Markers() const = 0;
};

// The identity stages: no reasoning; everything is content.
class NoReasoning : public ReasoningStage {
 public:
  void Feed(std::string_view text, std::string*, std::string* rest) override { rest->append(text); }
  void Finish(std::string*, std::string*) override {}
  std::vector<std::string> Markers() const override { return {}; }
};
class NoTools : public ToolStage {
 public:
  void Feed(std::string_view text, std::string* content, std::vector<ParsedToolCall>*) override {
    content->append(text);
  }
  void Finish(std::string*, std::vector<ParsedToolCall>*) override {}
  std::vector<std::string> Markers() const override { return {}; }
};

// Python's str.isspace() for ASCII (what `\s` matches in vLLM's patterns, ASCII part).
inline bool IsPyAsciiSpace(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}
std::string_view StripPySpace(std::string_view s);

// Length of the longest suffix of `text` that is a proper prefix of one of `markers`: text
// that must wait for the next piece before it can be called plain text.
size_t PartialMarkerTail(std::string_view text, const std::vector<std::string_view>& markers);

}  // namespace mxserve

#include "coordinator/chat/staged_output_parser.h"

namespace mxserve {

StagedOutputParser::StagedOutputParser(const Tokenizer* tok,
                                       std::unique_ptr<ReasoningStage> reasoning,
                                       std::unique_ptr<ToolStage> tools)
    : tok_(tok),
      reasoning_(std::move(reasoning)),
      tools_(std::move(tools)),
      detok_(tok, /*skip_special=*/true) {
  for (auto& m : reasoning_->Markers()) markers_.insert(m);
  for (auto& m : tools_->Markers()) markers_.insert(m);
}

ChatOutputParser::Delta StagedOutputParser::Route(std::string reasoning_in, std::string rest,
                                                  bool finish) {
  Delta d;
  std::string more_rest;
  if (finish) reasoning_->Finish(&d.reasoning, &more_rest);
  d.reasoning.insert(0, reasoning_in);
  rest += more_rest;
  std::vector<ParsedToolCall> calls;
  if (!rest.empty()) tools_->Feed(rest, &d.content, &calls);
  if (finish) tools_->Finish(&d.content, &calls);
  for (ParsedToolCall& c : calls) {
    ToolCallDelta t;
    t.index = calls_++;
    t.id = std::move(c.id);
    t.name = std::move(c.name);
    t.arguments = std::move(c.arguments);
    d.tool_calls.push_back(std::move(t));
  }
  return d;
}

ChatOutputParser::Delta StagedOutputParser::PushText(std::string_view text) {
  std::string reasoning, rest;
  reasoning_->Feed(text, &reasoning, &rest);
  return Route(std::move(reasoning), std::move(rest), false);
}

ChatOutputParser::Delta StagedOutputParser::Push(int32_t id) {
  std::string text;
  if (tok_->IsSpecial(id)) {
    std::string name = tok_->TokenString(id);
    if (!markers_.count(name)) return Delta();  // stop and other control tokens: not text
    text = detok_.Flush() + name;
  } else {
    text = detok_.Push(id);
  }
  if (text.empty()) return Delta();
  return PushText(text);
}

ChatOutputParser::Delta StagedOutputParser::Finish() {
  std::string reasoning, rest;
  std::string tail = detok_.Flush();
  if (!tail.empty()) reasoning_->Feed(tail, &reasoning, &rest);
  return Route(std::move(reasoning), std::move(rest), true);
}

}  // namespace mxserve

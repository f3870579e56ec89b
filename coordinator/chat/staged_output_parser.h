// ChatOutputParser over token ids for the text-based formats (Kimi K2, Kimi K3, DeepSeek-V3):
// ids become text, then a reasoning stage and a tool stage (output_text_stages.h) split it.
// Special tokens a stage reads as markers are spelled out; other special tokens (the stop token,
// <|im_end|>, [EOS]) are dropped, as vLLM leaves the stop token out of the text.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "coordinator/chat/chat_template.h"
#include "coordinator/chat/output_text_stages.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

class StagedOutputParser : public ChatOutputParser {
 public:
  StagedOutputParser(const Tokenizer* tok, std::unique_ptr<ReasoningStage> reasoning,
                     std::unique_ptr<ToolStage> tools);
  Delta Push(int32_t token_id) override;
  Delta Finish() override;
  // The same on text (tests feed text cut at every character).
  Delta PushText(std::string_view text);

 private:
  Delta Route(std::string reasoning, std::string rest, bool finish);

  const Tokenizer* tok_;
  std::unique_ptr<ReasoningStage> reasoning_;
  std::unique_ptr<ToolStage> tools_;
  std::set<std::string> markers_;
  IncrementalDetokenizer detok_;
  int calls_ = 0;
};

}  // namespace mxserve

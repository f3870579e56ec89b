// Streaming parser of gpt-oss's harmony output: token ids in, OpenAI fields out. The analysis
// channel is reasoning, final and commentary are content, a commentary message addressed
// to=functions.NAME is a tool call; message headers never reach any field.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "coordinator/chat/chat_template.h"
#include "coordinator/chat/harmony_chat_template.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

class HarmonyOutputParser : public ChatOutputParser {
 public:
  HarmonyOutputParser(const Tokenizer* tok, HarmonyTokens t);
  Delta Push(int32_t token_id) override;
  Delta Finish() override;
  // Reads `ids` as if the model had written them (a header the prompt forced); what they
  // produce (a tool call's name) comes out of the next Push or Finish.
  void Prime(const std::vector<int32_t>& ids);

  // Header text longer than this without <|message|> is not a header: the model is not
  // speaking harmony (e.g. random weights), and its text is shown as content instead.
  static constexpr size_t kMaxHeaderBytes = 256;

 private:
  enum class Where { kHeader, kBody, kDone };
  enum class Route { kContent, kReasoning, kToolCall };

  void StartBody(Delta* d);
  void Emit(const std::string& text, Delta* d);
  void EndBody(Delta* d);

  const Tokenizer* tok_;
  HarmonyTokens t_;
  Where where_ = Where::kHeader;  // the prompt ends with "<|start|>assistant"
  std::string header_;            // header text, specials spelled out
  bool header_has_special_ = false;
  std::vector<int32_t> header_ids_;  // ordinary tokens of the header, replayed on fallback
  Route route_ = Route::kContent;
  std::optional<IncrementalDetokenizer> detok_;
  int tool_calls_ = 0;
  Delta pending_;  // from Prime, not yet returned
};

}  // namespace mxserve

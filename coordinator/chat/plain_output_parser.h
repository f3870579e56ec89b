// The output parser of a chat format whose tool-call and reasoning syntax is not parsed: every
// token's text is content, special tokens left out (vLLM's skip_special_tokens default).
#pragma once

#include "coordinator/chat/chat_template.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

class PlainOutputParser : public ChatOutputParser {
 public:
  explicit PlainOutputParser(const Tokenizer* tok) : detok_(tok, /*skip_special=*/true) {}
  Delta Push(int32_t token_id) override {
    Delta d;
    d.content = detok_.Push(token_id);
    return d;
  }
  Delta Finish() override {
    Delta d;
    d.content = detok_.Flush();
    return d;
  }

 private:
  IncrementalDetokenizer detok_;
};

}  // namespace mxserve

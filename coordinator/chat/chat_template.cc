#include "coordinator/chat/chat_template.h"

#include "absl/strings/str_cat.h"
#include "coordinator/chat/harmony_chat_template.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::ForModel(const std::string& model_type,
                                                                     const Tokenizer* tokenizer) {
  if (model_type == "gpt_oss") {
    auto t = HarmonyChatTemplate::Create(tokenizer);
    if (!t.ok()) return t.status();
    return std::unique_ptr<ChatTemplate>(std::move(*t));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no chat template for model_type \"", model_type, "\" (supported: gpt_oss)"));
}

}  // namespace mxserve

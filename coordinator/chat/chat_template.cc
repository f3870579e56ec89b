#include "coordinator/chat/chat_template.h"

#include "absl/strings/str_cat.h"
#include "coordinator/chat/deepseek_v3_chat_template.h"
#include "coordinator/chat/harmony_chat_template.h"
#include "coordinator/chat/kimi_chat_template.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {
namespace {

template <typename T>
absl::StatusOr<std::unique_ptr<ChatTemplate>> Up(absl::StatusOr<std::unique_ptr<T>> t) {
  if (!t.ok()) return t.status();
  return std::unique_ptr<ChatTemplate>(std::move(*t));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::ForModel(const std::string& model_type,
                                                                     const Tokenizer* tokenizer) {
  if (model_type == "gpt_oss") return Up(HarmonyChatTemplate::Create(tokenizer));
  if (model_type == "kimi_k2") return Up(KimiChatTemplate::Create(tokenizer, KimiVariant::kK2));
  if (model_type == "kimi_linear") {
    return Up(KimiChatTemplate::Create(tokenizer, KimiVariant::kLinear));
  }
  if (model_type == "deepseek_v3") {
    // Kimi K2 served as "deepseek_v3" keeps Kimi's tokenizer, and so its chat format.
    if (tokenizer != nullptr && tokenizer->SpecialTokenId("<|im_user|>").has_value()) {
      return Up(KimiChatTemplate::Create(tokenizer, KimiVariant::kK2));
    }
    return Up(DeepSeekV3ChatTemplate::Create(tokenizer));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "no chat template for model_type \"", model_type,
      "\" (supported: gpt_oss, kimi_k2, kimi_linear, deepseek_v3)"));
}

}  // namespace mxserve

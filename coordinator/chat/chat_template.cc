#include "coordinator/chat/chat_template.h"

#include "absl/strings/str_cat.h"
#include "coordinator/chat/deepseek_v3_chat_template.h"
#include "coordinator/chat/harmony_chat_template.h"
#include "coordinator/chat/kimi_chat_template.h"
#include "coordinator/chat/kimi_k3_chat_template.h"
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
  // Kimi K3's config is typed "kimi_k3" (a multimodal wrapper whose text_config is typed
  // "kimi_linear"); a text-only export typed "kimi_linear" keeps K3's tokenizer.
  if (model_type == "kimi_k3" || (model_type == "kimi_linear" && HasXtmlMarkers(tokenizer))) {
    return Up(KimiK3ChatTemplate::Create(tokenizer));
  }
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
      "\" (supported: gpt_oss, kimi_k2, kimi_linear, kimi_k3, deepseek_v3)"));
}

}  // namespace mxserve

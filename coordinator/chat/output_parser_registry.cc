#include "coordinator/chat/output_parser_registry.h"

#include "absl/strings/str_cat.h"
#include "coordinator/chat/deepseek_output_parser.h"
#include "coordinator/chat/kimi_k2_output_parser.h"
#include "coordinator/chat/kimi_k3_chat_template.h"
#include "coordinator/chat/kimi_k3_output_parser.h"
#include "coordinator/chat/staged_output_parser.h"
#include "core/status.h"

namespace mxserve {
namespace {

enum class Family { kHarmony, kKimiK2, kKimiK3, kDeepSeekV3 };

absl::StatusOr<Family> FamilyOf(const std::string& model_type, const Tokenizer* tok) {
  if (model_type == "gpt_oss") return Family::kHarmony;
  // A K3 text model exported as "kimi_linear" speaks K3's format (ChatTemplate::ForModel).
  if (model_type == "kimi_linear" && HasXtmlMarkers(tok)) return Family::kKimiK3;
  if (model_type == "kimi_k2" || model_type == "kimi_linear") return Family::kKimiK2;
  if (model_type == "kimi_k3") return Family::kKimiK3;
  if (model_type == "deepseek_v3") return Family::kDeepSeekV3;
  return absl::InvalidArgumentError(absl::StrCat(
      "no output parsers for model_type \"", model_type,
      "\" (known: gpt_oss, kimi_k2, kimi_linear, kimi_k3, deepseek_v3)"));
}

bool Has(const Tokenizer* tok, std::string_view s) { return tok->SpecialTokenId(s).has_value(); }

absl::Status NeedTokens(const Tokenizer* tok, const std::string& flag, const std::string& name,
                        std::initializer_list<std::string_view> tokens) {
  for (std::string_view t : tokens) {
    if (!Has(tok, t)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", name, ": the tokenizer has no ",
                                                     std::string(t), " token"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OutputParserFactory> MakeOutputParserFactory(const OutputParserChoice& choice,
                                                            const std::string& model_type,
                                                            const Tokenizer* tok,
                                                            OutputParserChoice* resolved) {
  if (tok == nullptr) return absl::InvalidArgumentError("output parsers: no tokenizer");
  auto family = FamilyOf(model_type, tok);
  if (!family.ok()) return family.status();
  std::string tool = choice.tool_call_parser, reasoning = choice.reasoning_parser;
  if (tool == "deepseekv3") tool = "deepseek_v3";  // vLLM's older name
  const bool k2_thinks = Has(tok, kK2ThinkOpen) && Has(tok, kK2ThinkClose);
  if (tool.empty()) {
    tool = *family == Family::kHarmony  ? "openai"
           : *family == Family::kKimiK2 ? "kimi_k2"
           : *family == Family::kKimiK3 ? "kimi_k3"
                                        : "deepseek_v3";
  }
  if (reasoning.empty()) {
    reasoning = *family == Family::kHarmony  ? "openai_gptoss"
                : *family == Family::kKimiK2 ? (k2_thinks ? "kimi_k2" : "none")
                : *family == Family::kKimiK3 ? "kimi_k3"
                                             : "deepseek_v3";
  }
  const bool harmony_tool = tool == "openai" || tool == "harmony";
  const bool harmony_reasoning = reasoning == "openai_gptoss" || reasoning == "harmony";
  if (!harmony_tool && tool != "kimi_k2" && tool != "kimi_k3" && tool != "deepseek_v3") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tool-call-parser: unknown parser \"", tool,
        "\" (known: openai (harmony), kimi_k2, kimi_k3, deepseek_v3)"));
  }
  if (!harmony_reasoning && reasoning != "kimi_k2" && reasoning != "kimi_k3" &&
      reasoning != "deepseek_r1" && reasoning != "deepseek_v3" && reasoning != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--reasoning-parser: unknown parser \"", reasoning,
        "\" (known: openai_gptoss (harmony), kimi_k2, kimi_k3, deepseek_r1, deepseek_v3, none)"));
  }
  // Harmony is a token-level format with its own parser: all or nothing, and gpt-oss only.
  if ((*family == Family::kHarmony) != harmony_tool ||
      (*family == Family::kHarmony) != harmony_reasoning) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tool-call-parser ", tool, " with --reasoning-parser ", reasoning,
        " does not fit model_type \"", model_type,
        "\": gpt_oss speaks harmony (openai / openai_gptoss), other models do not"));
  }
  if (tool == "kimi_k2") {
    RETURN_IF_ERROR(NeedTokens(tok, "--tool-call-parser", tool,
                               {kK2SectionBegin, kK2SectionEnd, kK2CallBegin, kK2CallEnd}));
  }
  if (tool == "deepseek_v3") {
    RETURN_IF_ERROR(NeedTokens(tok, "--tool-call-parser", tool, {kDsCallsBegin, kDsCallsEnd}));
  }
  if (reasoning == "kimi_k2" || reasoning == "deepseek_r1") {
    RETURN_IF_ERROR(NeedTokens(tok, "--reasoning-parser", reasoning, {kK2ThinkOpen, kK2ThinkClose}));
  }
  if (resolved) *resolved = OutputParserChoice{tool, reasoning};
  if (*family == Family::kHarmony) return OutputParserFactory();
  return OutputParserFactory([tok, tool, reasoning](const ChatRenderOptions& render) {
    // vLLM runs the tool parser only when the request offers tools (tool_choice "none" drops
    // them before rendering).
    const bool tools_active = !render.tools_json.empty();
    std::unique_ptr<ReasoningStage> r;
    if (reasoning == "kimi_k2") r = std::make_unique<KimiK2Reasoning>();
    // K3 with thinking off: the prompt opens the response channel, no reasoning comes.
    else if (reasoning == "kimi_k3" && render.thinking.value_or(true))
      r = std::make_unique<KimiK3Reasoning>();
    else if (reasoning == "deepseek_r1") r = std::make_unique<DeepSeekR1Reasoning>();
    else r = std::make_unique<NoReasoning>();  // deepseek_v3 without thinking, none
    std::unique_ptr<ToolStage> t;
    if (tools_active && tool == "kimi_k2") t = std::make_unique<KimiK2Tools>();
    else if (tools_active && tool == "deepseek_v3") t = std::make_unique<DeepSeekV3Tools>();
    else if (tools_active && tool == "kimi_k3") t = std::make_unique<KimiK3Tools>(true);
    else if (reasoning == "kimi_k3") t = std::make_unique<KimiK3Tools>(false);
    else t = std::make_unique<NoTools>();
    return std::unique_ptr<ChatOutputParser>(
        new StagedOutputParser(tok, std::move(r), std::move(t)));
  });
}

}  // namespace mxserve

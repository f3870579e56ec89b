#include "coordinator/frontends/grpc_generate.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/openai_api.h"
#include "coordinator/frontends/structured_output_fields.h"
#include "core/bounded_json.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mxserve::frontends {
namespace {

// A proto chat message as the templates take it (tool calls as OpenAI's JSON array).
absl::StatusOr<ChatMessage> ToChatMessage(const v1::ChatMessage& m, size_t i) {
  ChatMessage cm{m.role(), m.content(), m.name()};
  if (m.tool_calls_size() > 0) {
    if (m.role() != "assistant") {
      const std::string p = absl::StrCat("messages[", i, "].tool_calls");
      return InvalidParam(p, absl::StrCat("'", p, "' is only allowed on assistant messages"));
    }
    nlohmann::json calls = nlohmann::json::array();
    for (const v1::ToolCall& c : m.tool_calls()) {
      calls.push_back({{"id", c.id()},
                       {"type", "function"},
                       {"function", {{"name", c.name()}, {"arguments", c.arguments()}}}});
    }
    cm.tool_calls_json = calls.dump();
  }
  if (m.role() == "assistant") cm.reasoning = m.reasoning();
  cm.tool_call_id = m.tool_call_id();
  return cm;
}

// The structured-output fields, read as the HTTP door reads their JSON namesakes.
absl::StatusOr<std::shared_ptr<grammar::CompiledGrammar>> ReadGrammarFields(
    const v1::GenerateRequest& req) {
  nlohmann::json body = nlohmann::json::object();
  if (!req.response_format_json().empty()) {
    BoundedJsonError where;
    absl::StatusOr<nlohmann::json> rf = ParseBoundedJson<nlohmann::json>(
        std::string_view(req.response_format_json()), {}, &where);
    if (!rf.ok()) {
      return InvalidParam("response_format_json",
                          absl::StrCat("'response_format_json' is not JSON: ",
                                       rf.status().message()));
    }
    body["response_format"] = *std::move(rf);
  }
  if (!req.guided_regex().empty()) body["guided_regex"] = req.guided_regex();
  if (req.guided_choice_size() > 0) {
    body["guided_choice"] =
        std::vector<std::string>(req.guided_choice().begin(), req.guided_choice().end());
  }
  return ReadStructuredOutput(body);
}

}  // namespace

absl::StatusOr<ParsedGenerate> ParseGenerate(const v1::GenerateRequest& req,
                                             const ServingContext& ctx) {
  RETURN_IF_ERROR(CheckModel(req.model(), ctx));
  ParsedGenerate out;
  ASSIGN_OR_RETURN(std::shared_ptr<grammar::CompiledGrammar> output_grammar,
                   ReadGrammarFields(req));
  std::vector<int32_t> ids;
  std::string prompt_param;
  switch (req.input_case()) {
    case v1::GenerateRequest::kPrompt:
      prompt_param = "prompt";
      if (req.prompt().empty()) return InvalidParam("prompt", "'prompt' must not be empty");
      if (!IsValidUtf8(req.prompt())) return InvalidParam("prompt", "'prompt' is not valid UTF-8");
      ids = ctx.tokenizer->EncodePrompt(req.prompt(), /*add_special_tokens=*/true);
      break;
    case v1::GenerateRequest::kPromptTokenIds:
      prompt_param = "prompt_token_ids";
      ids.assign(req.prompt_token_ids().ids().begin(), req.prompt_token_ids().ids().end());
      break;
    case v1::GenerateRequest::kMessages: {
      prompt_param = "messages";
      std::vector<ChatMessage> messages;
      for (int i = 0; i < req.messages().messages_size(); ++i) {
        ASSIGN_OR_RETURN(ChatMessage m, ToChatMessage(req.messages().messages(i), i));
        messages.push_back(std::move(m));
      }
      RETURN_IF_ERROR(CheckChatMessages(messages, "messages"));
      RETURN_IF_ERROR(ReadChatToolOptions(req.tools_json(), req.tool_choice(), req.reasoning_effort(),
                                          ctx, &out.render));
      RETURN_IF_ERROR(ForceStructuredAnswer(output_grammar != nullptr, &out.render));
      ASSIGN_OR_RETURN(ids, RenderChatPrompt(messages, out.render, ctx));
      out.chat = true;
      break;
    }
    default:
      return InvalidParam("input", "one of 'prompt', 'prompt_token_ids' or 'messages' is required");
  }
  if (!out.chat) {  // the chat fields mean nothing to a raw prompt: say so rather than drop them
    const std::pair<const char*, const std::string*> chat_only[] = {
        {"tools_json", &req.tools_json()},
        {"tool_choice", &req.tool_choice()},
        {"reasoning_effort", &req.reasoning_effort()}};
    for (const auto& [field, value] : chat_only) {
      if (!value->empty()) {
        return InvalidParam(field, absl::StrCat("'", field, "' is only allowed with 'messages'"));
      }
    }
  }
  RETURN_IF_ERROR(CheckPromptTokens(ids, ctx, prompt_param));

  const v1::SamplingParams& sp = req.sampling();
  SamplingFields f;
  f.param_prefix = "sampling.";
  if (sp.has_temperature()) f.temperature = sp.temperature();
  if (sp.has_top_p()) f.top_p = sp.top_p();
  if (sp.has_top_k()) f.top_k = sp.top_k();
  if (sp.has_seed()) f.seed = sp.seed();
  if (sp.has_max_tokens()) f.max_tokens = sp.max_tokens();
  for (const std::string& s : sp.stop()) {
    if (!s.empty()) f.stop.push_back(s);
  }
  for (int32_t id : sp.stop_token_ids()) f.stop_token_ids.push_back(id);
  if (sp.has_logprobs()) f.logprobs = sp.logprobs();
  if (sp.has_n()) {
    if (sp.n() < 1 || sp.n() > kMaxChoices) {
      return InvalidParam("sampling.n", absl::StrCat("'sampling.n' must be in [1, ", kMaxChoices,
                                                     "], got ", sp.n()));
    }
    out.n = sp.n();
  }
  f.ignore_eos = sp.ignore_eos();
  if (sp.has_presence_penalty()) f.presence_penalty = sp.presence_penalty();
  if (sp.has_frequency_penalty()) f.frequency_penalty = sp.frequency_penalty();
  if (sp.has_repetition_penalty()) f.repetition_penalty = sp.repetition_penalty();
  if (sp.has_min_p()) f.min_p = sp.min_p();
  if (sp.has_min_tokens()) f.min_tokens = sp.min_tokens();
  for (const auto& [id, bias] : sp.logit_bias()) f.logit_bias.emplace_back(id, bias);
  std::sort(f.logit_bias.begin(), f.logit_bias.end());  // a map's order is unspecified
  f.bad_words.assign(sp.bad_words().begin(), sp.bad_words().end());
  if (sp.has_skip_special_tokens()) f.skip_special_tokens = sp.skip_special_tokens();
  f.include_stop_str_in_output = sp.include_stop_str_in_output();
  ASSIGN_OR_RETURN(SamplingParams params,
                   ResolveSampling(f, static_cast<int>(ids.size()), ctx, prompt_param));
  if (out.chat) {
    for (int32_t id : ctx.chat_template->StopTokenIds()) params.stop_token_ids.push_back(id);
  }
  params.grammar = std::move(output_grammar);
  out.generate.request_id = req.request_id().empty() ? NewRequestId("gen") : req.request_id();
  out.generate.prompt_tokens = std::move(ids);
  out.generate.params = std::move(params);
  return out;
}

}  // namespace mxserve::frontends

// OpenAI-compatible request parsing and validation (chat completions, completions, tokenize),
// and the door-neutral sampling checks the gRPC door reuses. Every rejected field comes back as
// an InvalidArgument (NotFound for an unknown model) naming it through api_error.h's payloads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/request.h"
#include "coordinator/frontends/serving_context.h"
#include "nlohmann/json.hpp"

namespace mxserve::frontends {

// A JSON value's type as an error message names it ("string", "integer", "number", ...).
absl::string_view TypeName(const nlohmann::json& v);
// 400 invalid_type: "'param' must be WANT, got TYPE".
absl::Status WrongType(absl::string_view param, absl::string_view want, const nlohmann::json& got);

// Sampling fields as a client sent them, whichever door it came through (unset = default).
// The *_param names are what an error about that field calls it.
struct SamplingFields {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::optional<int64_t> max_tokens;
  std::string max_tokens_param = "max_tokens";
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  std::optional<int64_t> logprobs;  // top-N per sampled token, 0..20
  std::string logprobs_param = "logprobs";
  bool ignore_eos = false;
  // vLLM's logits-processing and output fields (SamplingParams in request.h says what each does).
  std::optional<double> presence_penalty, frequency_penalty, repetition_penalty, min_p;
  std::optional<int64_t> min_tokens;
  std::vector<std::pair<int64_t, double>> logit_bias;  // token id -> bias
  std::vector<std::string> bad_words;
  std::optional<bool> skip_special_tokens, include_stop_str_in_output;
  std::string param_prefix;  // prepended to every field name in errors (gRPC: "sampling.")
  // max_tokens when unset: 0 = the rest of the context; else this, capped by the context
  // (the legacy /v1/completions default is 16, as in OpenAI and vLLM).
  int default_max_tokens = 0;
};

// Range checks, and max_tokens against the context: prompt + max_tokens <= max_model_len;
// unset max_tokens = the rest of the context. `prompt_param` names the prompt in errors.
absl::StatusOr<SamplingParams> ResolveSampling(const SamplingFields& fields, int prompt_tokens,
                                               const ServingContext& ctx,
                                               absl::string_view prompt_param);

// Empty = the served model (vLLM lets it be omitted); anything else must equal ctx.model_id,
// else NotFound with code model_not_found.
absl::Status CheckModel(absl::string_view model, const ServingContext& ctx);

// Non-empty, every id inside the vocabulary.
absl::Status CheckPromptTokens(const std::vector<int32_t>& ids, const ServingContext& ctx,
                               absl::string_view param);

// Roles and presence of content, as the OpenAI schema requires (`param` names the list).
absl::Status CheckChatMessages(const std::vector<ChatMessage>& messages, absl::string_view param);

// Renders messages with the chat template and tokenizes the result.
absl::StatusOr<std::vector<int32_t>> RenderChatPrompt(const std::vector<ChatMessage>& messages,
                                                      const ChatRenderOptions& options,
                                                      const ServingContext& ctx);

// The chat options of the gRPC door, checked as the HTTP door checks its fields (same messages):
// `tools_json` the OpenAI "tools" array as JSON text ("" = none); `tool_choice` "" or "auto",
// "none", "required", or the name of one of the tools (forces a call to it); `reasoning_effort`
// "" (the template's default), low, medium or high.
absl::Status ReadChatToolOptions(absl::string_view tools_json, absl::string_view tool_choice,
                                 absl::string_view reasoning_effort, const ServingContext& ctx,
                                 ChatRenderOptions* render);

// Valid UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF)? On failure *bad_offset is
// the first offending byte.
bool IsValidUtf8(absl::string_view s, size_t* bad_offset = nullptr);

// "<prefix>-<32 hex digits>", random.
std::string NewRequestId(absl::string_view prefix);

struct ChatCompletionRequest {
  GenerateRequest generate;      // request_id "chatcmpl-…", prompt tokens, sampling
  int n = 1;                     // choices (ChoiceRequests)
  bool tokens_as_ids = false;    // vLLM's return_tokens_as_token_ids: "token_id:N" in logprobs
  ChatRenderOptions render;      // how the prompt was rendered (forced_tool: for the parser)
  bool stream = false;
  bool include_usage = false;    // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  bool tools = false;            // tools were offered (the parser may report tool calls)
};

struct CompletionRequest {
  GenerateRequest generate;      // request_id "cmpl-…"
  int n = 1;                     // choices (ChoiceRequests)
  bool tokens_as_ids = false;    // vLLM's return_tokens_as_token_ids: "token_id:N" in logprobs
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  int logprobs = -1;             // -1 = none; else top-N per token
  std::string prompt_text;       // the prompt as text (decoded when given as token ids), for echo
};

// Most choices one request may ask for ("n").
inline constexpr int kMaxChoices = 16;

// The engine requests behind n choices: choice i is "<request_id>-<i>", and with a seed, seed + i
// (so each choice is reproducible and they differ). n == 1: the request itself.
std::vector<GenerateRequest> ChoiceRequests(const GenerateRequest& request, int n);

// Structured output in chat: the prompt ends inside the answer's header (forced_final); a
// forced tool call cannot be structured output too (InvalidArgument naming tool_choice).
absl::Status ForceStructuredAnswer(bool has_grammar, ChatRenderOptions* render);

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(absl::string_view body,
                                                                 const ServingContext& ctx);
absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const ServingContext& ctx);

// vLLM's POST /tokenize ({model?, prompt | messages, add_special_tokens?}) -> token ids.
absl::StatusOr<std::vector<int32_t>> ParseTokenizeRequest(absl::string_view body,
                                                          const ServingContext& ctx);
// vLLM's POST /detokenize ({model?, tokens}) -> token ids to decode.
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body,
                                                            const ServingContext& ctx);

}  // namespace mxserve::frontends

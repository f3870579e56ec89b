// OpenAI's Responses API request (POST /v1/responses) as vLLM serves it for gpt-oss: input as a
// string or as items (messages, reasoning, function_call, function_call_output), instructions,
// function tools, sampling; checked and rendered into the chat template's prompt. Every field the
// route does not honour is refused with a 400 naming it, never ignored.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/request.h"
#include "coordinator/frontends/serving_context.h"
#include "nlohmann/json.hpp"

namespace mxserve::frontends {

struct ResponsesRequest {
  GenerateRequest generate;  // request_id "resp_…" (or the client's request_id), prompt, sampling
  ChatRenderOptions render;  // how the prompt was rendered (forced_tool: for the parser)
  bool stream = false;
  // The request fields a Response object repeats (instructions, tools, tool_choice, reasoning,
  // text, metadata, user, ...), with the sampling values resolved: the body of every response
  // and of response.created / response.in_progress starts from it.
  nlohmann::json echo;
};

// Parses and checks a /v1/responses body and renders its prompt. InvalidArgument names the
// field (api_error.h); previous_response_id gets NotFound, as from vLLM without a store.
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(absl::string_view body,
                                                       const ServingContext& ctx);

// "<prefix>_<32 hex digits>", random: the id shape of Responses objects (resp_, msg_, rs_, fc_,
// call_).
std::string NewItemId(absl::string_view prefix);

}  // namespace mxserve::frontends

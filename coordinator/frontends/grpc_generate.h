// The gRPC door's request parsing: a proto mxserve.v1.GenerateRequest checked and turned into
// the engine's request, through the same door-neutral checks as the OpenAI door (openai_api.h).
// Every rejected field is an InvalidArgument naming it (NotFound for an unknown model).
// Separate from grpc_frontend.cc so that the fuzzer (fuzz/fuzz_grpc_generate.cc) reaches it
// without a server.
#pragma once

#include "absl/status/statusor.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/request.h"
#include "coordinator/frontends/serving_context.h"
#include "mxserve/v1/inference.pb.h"

namespace mxserve::frontends {

// What one Generate call asks of the engine.
struct ParsedGenerate {
  GenerateRequest generate;
  bool chat = false;         // deltas come from the chat parser (content, reasoning, tool calls)
  int n = 1;                 // sequences (ChoiceRequests)
  ChatRenderOptions render;  // chat: how the prompt was rendered (forced_tool: for the parser)
};

// The model, the input (prompt, prompt_token_ids or messages, with tools only for messages), the
// sampling fields and n. An accepted request holds what the engine's contract asks
// (coordinator/engine/request.h): a non-empty prompt of ids in the vocabulary, max_tokens within
// the context, the sampling values in range.
absl::StatusOr<ParsedGenerate> ParseGenerate(const v1::GenerateRequest& req, const ServingContext& ctx);

}  // namespace mxserve::frontends

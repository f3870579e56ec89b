// What the front doors (HTTP and gRPC) need from the rest of the coordinator: the served model's
// identity and limits, its tokenizer and chat template, the engine, and a readiness probe.
#pragma once

#include <functional>
#include <string>

#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/request.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

struct ServingContext {
  std::string model_id;                      // the served name clients must send as "model"
  int max_model_len = 0;                     // prompt + completion tokens, at most
  const Tokenizer* tokenizer = nullptr;      // not owned; outlives the front doors
  const ChatTemplate* chat_template = nullptr;  // not owned; null = chat routes answer 400
  GenerationService* engine = nullptr;       // not owned
  // True once the engine can take requests (weights resident, workers up). Called from I/O
  // threads, so it must be cheap and thread-safe. Empty = always ready.
  std::function<bool()> ready;
  // Prometheus text exposition for GET /metrics on the HTTP port. Empty = no /metrics route.
  std::function<std::string()> metrics;
  // Non-empty: every route but the probes and /metrics needs "Authorization: Bearer <api_key>"
  // (gRPC: metadata "authorization"), else 401 / UNAUTHENTICATED (frontends/auth.h).
  std::string api_key;
  // > 0: prompts longer than this many tokens are rejected with 400 (--max-prompt-tokens).
  int max_prompt_tokens = 0;

  bool IsReady() const { return !ready || ready(); }
};

}  // namespace mxserve

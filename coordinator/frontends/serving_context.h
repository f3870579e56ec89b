// What the front doors (HTTP and gRPC) need from the rest of the coordinator: the served model's
// identity and limits, its tokenizer and chat template, the engine, and a readiness probe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "coordinator/chat/chat_template.h"
#include "coordinator/chat/output_parser_registry.h"
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
  // > 0: prompts longer than this many bytes are rejected with 400 before they are tokenized
  // (frontends/prompt_limit.h; the HTTP door sets it from the tokenizer when 0).
  int64_t max_prompt_bytes = 0;

  // Readiness for the probes (/health/ready, /v2/health/ready, gRPC grpc.health.v1): `ready`
  // and also worker health and scheduler progress. Returns whether ready, and sets `*json` to
  // a JSON object saying why not (coordinator/observability/health_monitor.h). Empty = `ready`.
  std::function<bool(std::string* json)> readiness;
  // The message new requests get with their 503 while `ready` is false ("draining ..").
  std::function<std::string()> not_ready_message;
  // GET /v1/workers: placement and worker states as JSON. Empty = no such route.
  std::function<std::string()> workers;
  // The output parser of a chat turn (--tool-call-parser, --reasoning-parser); empty = the chat
  // template's own (harmony).
  OutputParserFactory output_parser;
  // vLLM without --enable-auto-tool-choice: requests whose tool_choice is "auto" (the default
  // when tools are given) get 400. Harmony models are exempt, as in vLLM.
  bool refuse_auto_tool_choice = false;

  std::unique_ptr<ChatOutputParser> NewOutputParser(const ChatRenderOptions& render) const {
    if (output_parser) return output_parser(render);
    return chat_template ? chat_template->NewParserFor(render) : nullptr;
  }
  bool IsReady() const { return !ready || ready(); }
  bool IsProbeReady(std::string* json) const {
    if (readiness) return readiness(json);
    return IsReady();
  }
  std::string NotReadyMessage() const {
    return not_ready_message ? not_ready_message() : "the model is not ready yet";
  }
};

}  // namespace mxserve

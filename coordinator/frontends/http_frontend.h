// The OpenAI-compatible HTTP front door: routes /v1/chat/completions, /v1/completions,
// /v1/responses (SSE or whole), /v1/models, /health, /tokenize and /detokenize onto the engine,
// on an HttpServer.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "coordinator/frontends/http_server.h"
#include "coordinator/frontends/serving_context.h"

namespace mxserve::frontends {

class HttpFrontend {
 public:
  // Binds options.host:options.port (0 = pick; see port()) and starts serving. The pointers in
  // `ctx` must outlive the returned object. Key, path and method are checked on a request's
  // header, before its body is read. The generation and tokenizer routes run on
  // `handler_threads` threads of their own; the probes, /metrics and /v1/models on the I/O
  // threads. ctx.max_prompt_bytes == 0 is set from the tokenizer (PromptByteLimit).
  static absl::StatusOr<std::unique_ptr<HttpFrontend>> Start(ServingContext ctx,
                                                             HttpServerOptions options,
                                                             int handler_threads = 2);
  ~HttpFrontend();
  int port() const { return server_->port(); }
  // Stops accepting and closes every connection; in-flight requests are cancelled through
  // ctx.engine, so shut the front doors down before the engine goes away.
  void Shutdown();
  int open_connections() const { return server_->open_connections(); }
  HttpServerStats stats() const;

 private:
  struct Routes;
  HttpFrontend() = default;
  std::shared_ptr<Routes> routes_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace mxserve::frontends

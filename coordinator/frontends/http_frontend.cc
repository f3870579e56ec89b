#include "coordinator/frontends/http_frontend.h"

#include <atomic>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/openai_api.h"
#include "coordinator/frontends/auth.h"
#include "coordinator/frontends/handler_pool.h"
#include "coordinator/frontends/openai_response.h"
#include "coordinator/frontends/prompt_limit.h"
#include "coordinator/frontends/responses_response.h"
#include "core/status_map.h"
#include "nlohmann/json.hpp"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;
using Responder = std::shared_ptr<HttpResponder>;
using Handler = std::function<void(const HttpRequest&, const Responder&)>;

constexpr char kJson[] = "application/json";

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void SendError(const Responder& r, const absl::Status& status) {
  std::vector<std::pair<std::string, std::string>> headers;
  const int code = HttpStatusFor(status);
  if (code == 429 || code == 503) headers.emplace_back("Retry-After", "1");
  r->Send(code, kJson, ErrorBody(status), std::move(headers));
}

std::string Sse(absl::string_view payload) { return absl::StrCat("data: ", payload, "\n\n"); }

// An SSE response whose writes may come before its headers are out: stream events that arrive
// before Submit has returned (a synchronous engine) are held until Start(). "" marks the end.
struct HeldStream {
  explicit HeldStream(Responder r) : http(std::move(r)) {}
  Responder http;
  absl::Mutex mu;
  bool started ABSL_GUARDED_BY(mu) = false;  // stream headers sent
  std::vector<std::string> early ABSL_GUARDED_BY(mu);

  void Emit(std::string s) {
    absl::MutexLock lock(&mu);
    if (!started) {
      early.push_back(std::move(s));
      return;
    }
    Put(std::move(s));
  }
  void End() { Emit(""); }
  void Start() {
    absl::MutexLock lock(&mu);
    http->StartStream(200, "text/event-stream; charset=utf-8");
    started = true;
    for (auto& s : early) Put(std::move(s));
    early.clear();
  }

 private:
  void Put(std::string s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (s.empty()) {
      http->End();
    } else {
      http->Write(std::move(s));
    }
  }
};

// State one generation shares between the I/O thread that submitted it and the engine thread
// that calls back.
template <typename Builder>
struct Generation {
  Generation(Responder r, std::unique_ptr<Builder> b, bool s)
      : http(r), sse(std::move(r)), builder(std::move(b)), stream(s) {}
  Responder http;
  HeldStream sse;
  std::unique_ptr<Builder> builder;  // touched only by the engine callback (events are ordered)
  const bool stream;
  std::atomic<bool> finished{false};

  void Emit(std::string s) { sse.Emit(std::move(s)); }
  void EndStream() { sse.End(); }
  void StartStream() { sse.Start(); }

  void OnEvent(GenerationEvent ev) {
    if (finished.load()) return;
    if (ev.finished) finished.store(true);
    if constexpr (requires { Builder::kFramesOwnEvents; }) {
      // The Responses API: the builder frames every event, errors included; no "[DONE]".
      if (stream) {
        for (std::string& c : builder->Chunks(ev)) Emit(std::move(c));
        if (ev.finished) EndStream();
        return;
      }
    }
    if (stream) {
      if (ev.finish_reason == FinishReason::kError) {
        absl::Status err = ev.error.ok() ? absl::InternalError("generation failed") : ev.error;
        Emit(Sse(ErrorBody(err)));
        Emit(Sse("[DONE]"));
        EndStream();
        return;
      }
      for (std::string& c : builder->Chunks(ev)) Emit(Sse(c));
      if (ev.finished) {
        Emit(Sse("[DONE]"));
        EndStream();
      }
      return;
    }
    if (ev.finish_reason == FinishReason::kError) {
      SendError(http, ev.error.ok() ? absl::InternalError("generation failed") : ev.error);
      return;
    }
    builder->Add(ev);
    if (ev.finished) http->Send(200, kJson, builder->Body());
  }
};

// n > 1: n engine requests (ChoiceRequests) behind one response (ChoicesResponder). A choice
// that fails fails the response; the others run out unseen (an engine callback must not call
// back into the engine to cancel them; a client that goes away cancels them all).
template <typename R>
struct ChoicesGeneration {
  ChoicesGeneration(Responder r, std::unique_ptr<ChoicesResponder<R>> b, bool s)
      : http(r), sse(std::move(r)), builder(std::move(b)), stream(s) {}
  Responder http;
  HeldStream sse;
  std::unique_ptr<ChoicesResponder<R>> builder;
  const bool stream;
  std::atomic<bool> finished{false};

  std::mutex order;  // one choice's chunks go out together, [DONE] after all of them

  void Emit(std::string s) { sse.Emit(std::move(s)); }
  void StartStream() { sse.Start(); }

  void OnEvent(int i, GenerationEvent ev) {
    std::lock_guard<std::mutex> lock(order);
    if (finished.load()) return;
    if (ev.finish_reason == FinishReason::kError) {
      finished.store(true);
      absl::Status err = ev.error.ok() ? absl::InternalError("generation failed") : ev.error;
      if (!stream) return SendError(http, err);
      Emit(Sse(ErrorBody(err)));
      Emit(Sse("[DONE]"));
      Emit("");
      return;
    }
    if (stream) {
      for (std::string& c : builder->Chunks(i, ev)) Emit(Sse(c));
      if (builder->done()) {
        finished.store(true);
        Emit(Sse("[DONE]"));
        Emit("");
      }
      return;
    }
    if (builder->Add(i, ev)) {
      finished.store(true);
      http->Send(200, kJson, builder->Body());
    }
  }
};

}  // namespace

struct HttpFrontend::Routes {
  ServingContext ctx;
  // path -> method -> handler
  std::map<std::string, std::map<std::string, Handler>> table;
  // Paths whose handlers parse, render or tokenize: they run on `pool`, never on an I/O
  // thread, so that the probes stay answered while they work.
  std::set<std::string> heavy;
  HandlerPool pool;

  Routes(ServingContext c, int handler_threads) : ctx(std::move(c)), pool(handler_threads) {
    heavy = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/tokenize",
             "/detokenize"};
    table["/v1/responses"]["POST"] = [this](auto& q, auto& r) { Responses(q, r); };
    table["/v1/chat/completions"]["POST"] = [this](auto& q, auto& r) { Chat(q, r); };
    table["/v1/completions"]["POST"] = [this](auto& q, auto& r) { Completions(q, r); };
    table["/v1/models"]["GET"] = [this](auto& q, auto& r) { Models(q, r); };
    table["/health"]["GET"] = [this](auto& q, auto& r) { Health(q, r, /*ready=*/false); };
    table["/health/live"]["GET"] = [this](auto& q, auto& r) { Health(q, r, false); };
    table["/health/ready"]["GET"] = [this](auto& q, auto& r) { Health(q, r, /*ready=*/true); };
    // KServe v2 / Open Inference Protocol aliases: 200 = true, 503 = false.
    table["/v2/health/live"]["GET"] = [this](auto& q, auto& r) { Health(q, r, false); };
    table["/v2/health/ready"]["GET"] = [this](auto& q, auto& r) { Health(q, r, true); };
    table["/v2/models/" + ctx.model_id + "/ready"]["GET"] = [this](auto& q, auto& r) {
      Health(q, r, true);
    };
    if (ctx.workers) {
      table["/v1/workers"]["GET"] = [this](auto&, auto& r) { r->Send(200, kJson, ctx.workers()); };
    }
    // SageMaker's probe, as vLLM has it.
    table["/ping"]["GET"] = [this](auto& q, auto& r) { Health(q, r, false); };
    table["/ping"]["POST"] = [this](auto& q, auto& r) { Health(q, r, false); };
    if (ctx.metrics) {
      table["/metrics"]["GET"] = [this](auto&, auto& r) {
        r->Send(200, "text/plain; version=0.0.4; charset=utf-8", ctx.metrics());
      };
    }
    table["/tokenize"]["POST"] = [this](auto& q, auto& r) { Tokenize(q, r); };
    table["/detokenize"]["POST"] = [this](auto& q, auto& r) { Detokenize(q, r); };
  }

  // Key, path and method, judged on the header alone (HttpHeadCheck): a request that fails
  // here never has its body read. The route's handler, or nullptr with `*refusal` set.
  const Handler* Route(const HttpRequest& req, std::optional<HttpRefusal>* refusal) const {
    if (!ctx.api_key.empty() && !IsOpenPath(req.path)) {
      if (absl::Status s = CheckApiKey(ctx.api_key, req.Header("authorization")); !s.ok()) {
        *refusal = HttpRefusal{401, kJson, ErrorBody(s), {{"WWW-Authenticate", "Bearer"}}};
        return nullptr;
      }
    }
    auto it = table.find(req.path);
    if (it == table.end()) {
      absl::Status nf = WithParam(
          absl::NotFoundError(absl::StrCat("Not found: ", req.method, " ", req.path)), "",
          "not_found");
      *refusal = HttpRefusal{HttpStatusFor(nf), kJson, ErrorBody(nf), {}};
      return nullptr;
    }
    auto m = it->second.find(req.method);
    if (m == it->second.end()) {
      std::vector<std::string> allowed;
      for (const auto& [k, v] : it->second) allowed.push_back(k);
      std::string allow = absl::StrJoin(allowed, ", ");
      *refusal = HttpRefusal{405, kJson,
                             ErrorBody(absl::StrCat("Method ", req.method, " is not allowed for ",
                                                    req.path, " (allowed: ", allow, ")"),
                                       "invalid_request_error", "", "method_not_allowed"),
                             {{"Allow", allow}}};
      return nullptr;
    }
    return &m->second;
  }

  std::optional<HttpRefusal> CheckHead(const HttpRequest& head) const {
    std::optional<HttpRefusal> refusal;
    Route(head, &refusal);
    return refusal;
  }

  // On an I/O thread: probes and small answers at once, the rest on the pool.
  void Dispatch(HttpRequest req, const Responder& r) {
    std::optional<HttpRefusal> refusal;
    const Handler* h = Route(req, &refusal);
    if (!h) {
      r->Send(refusal->status, refusal->content_type, std::move(refusal->body),
              std::move(refusal->headers));
      return;
    }
    if (!heavy.count(req.path)) return (*h)(req, r);
    const bool posted = pool.Post([h, req = std::move(req), r] {
      try {
        (*h)(req, r);
      } catch (const std::exception& e) {
        // Handlers answer their own errors; this one did not, so the client gets a 500 (a
        // response already begun ignores it).
        SendError(r, absl::InternalError(absl::StrCat("internal error: ", e.what())));
      }
    });
    if (!posted) SendError(r, absl::UnavailableError("the server is shutting down"));
  }

  absl::Status CheckReady() const {
    if (!ctx.IsReady()) return absl::UnavailableError(ctx.NotReadyMessage());
    if (!ctx.engine) return absl::UnavailableError("no engine attached");
    return absl::OkStatus();
  }

  template <typename Builder>
  void Run(const Responder& r, GenerateRequest gen, bool stream, std::unique_ptr<Builder> b) {
    auto g = std::make_shared<Generation<Builder>>(r, std::move(b), stream);
    GenerationService* engine = ctx.engine;
    const std::string id = gen.request_id;
    r->OnDisconnect([engine, id, g] {
      if (!g->finished.load()) engine->Cancel(id);
    });
    absl::Status s = engine->Submit(std::move(gen), [g](GenerationEvent ev) {
      g->OnEvent(std::move(ev));
    });
    if (!s.ok()) {
      g->finished.store(true);
      SendError(r, s);
      return;
    }
    if (stream) g->StartStream();
    if (r->disconnected() && !g->finished.load()) engine->Cancel(id);  // gone before Submit
  }

  // n > 1 (parsed.n): one responder per choice, one engine request per choice.
  template <typename R, typename Parsed>
  void RunChoices(const Responder& r, const Parsed& parsed) {
    std::vector<GenerateRequest> reqs = ChoiceRequests(parsed.generate, parsed.n);
    std::vector<std::unique_ptr<R>> choices;
    const int64_t created = std::time(nullptr);
    for (int i = 0; i < parsed.n; ++i) choices.push_back(std::make_unique<R>(ctx, parsed, created));
    json head{{"id", parsed.generate.request_id},
              {"object", std::is_same_v<R, ChatCompletionResponder> ? "chat.completion.chunk"
                                                                    : "text_completion"},
              {"created", created},
              {"model", ctx.model_id}};
    auto g = std::make_shared<ChoicesGeneration<R>>(
        r, std::make_unique<ChoicesResponder<R>>(std::move(choices), parsed.include_usage, head),
        parsed.stream);
    GenerationService* engine = ctx.engine;
    std::vector<std::string> ids;
    for (const auto& q : reqs) ids.push_back(q.request_id);
    r->OnDisconnect([engine, ids, g] {
      if (!g->finished.load()) {
        for (const auto& id : ids) engine->Cancel(id);
      }
    });
    for (int i = 0; i < parsed.n; ++i) {
      absl::Status s = engine->Submit(std::move(reqs[i]), [g, i](GenerationEvent ev) {
        g->OnEvent(i, std::move(ev));
      });
      if (!s.ok()) {
        g->finished.store(true);
        for (int k = 0; k < i; ++k) engine->Cancel(ids[k]);
        SendError(r, s);
        return;
      }
    }
    if (parsed.stream) g->StartStream();
    if (r->disconnected() && !g->finished.load()) {
      for (const auto& id : ids) engine->Cancel(id);
    }
  }

  void Chat(const HttpRequest& req, const Responder& r) {
    absl::StatusOr<ChatCompletionRequest> parsed = ParseChatCompletionRequest(req.body, ctx);
    if (!parsed.ok()) return SendError(r, parsed.status());
    if (absl::Status s = CheckReady(); !s.ok()) return SendError(r, s);
    if (parsed->n > 1) return RunChoices<ChatCompletionResponder>(r, *parsed);
    auto b = std::make_unique<ChatCompletionResponder>(ctx, *parsed, std::time(nullptr));
    Run(r, std::move(parsed->generate), parsed->stream, std::move(b));
  }

  void Completions(const HttpRequest& req, const Responder& r) {
    absl::StatusOr<CompletionRequest> parsed = ParseCompletionRequest(req.body, ctx);
    if (!parsed.ok()) return SendError(r, parsed.status());
    if (absl::Status s = CheckReady(); !s.ok()) return SendError(r, s);
    if (parsed->n > 1) return RunChoices<CompletionResponder>(r, *parsed);
    auto b = std::make_unique<CompletionResponder>(ctx, *parsed, std::time(nullptr));
    Run(r, std::move(parsed->generate), parsed->stream, std::move(b));
  }

  void Responses(const HttpRequest& req, const Responder& r) {
    absl::StatusOr<ResponsesRequest> parsed = ParseResponsesRequest(req.body, ctx);
    if (!parsed.ok()) return SendError(r, parsed.status());
    if (absl::Status s = CheckReady(); !s.ok()) return SendError(r, s);
    auto b = std::make_unique<ResponsesResponder>(ctx, *parsed, std::time(nullptr));
    Run(r, std::move(parsed->generate), parsed->stream, std::move(b));
  }

  void Models(const HttpRequest&, const Responder& r) {
    json model{{"id", ctx.model_id},
               {"object", "model"},
               {"created", static_cast<int64_t>(std::time(nullptr))},
               {"owned_by", "mxserve"},
               {"root", ctx.model_id},
               {"parent", nullptr},
               {"max_model_len", ctx.max_model_len}};
    r->Send(200, kJson, Dump(json{{"object", "list"}, {"data", json::array({model})}}));
  }

  // /health and /health/live: the process answers (vLLM's /health is liveness too).
  // /health/ready: 503 until the engine takes requests.
  // With ctx.readiness the body is JSON saying why (worker down, no step for N s, draining).
  void Health(const HttpRequest&, const Responder& r, bool ready) {
    if (ready && ctx.readiness) {
      std::string body;
      const bool ok = ctx.readiness(&body);
      r->Send(ok ? 200 : 503, kJson, std::move(body));
      return;
    }
    if (ready && !ctx.IsReady()) {
      SendError(r, absl::UnavailableError("not ready"));
      return;
    }
    r->Send(200, "", "");
  }

  void Tokenize(const HttpRequest& req, const Responder& r) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseTokenizeRequest(req.body, ctx);
    if (!ids.ok()) return SendError(r, ids.status());
    r->Send(200, kJson,
            Dump(json{{"tokens", *ids},
                      {"count", ids->size()},
                      {"max_model_len", ctx.max_model_len},
                      {"token_strs", nullptr}}));
  }

  void Detokenize(const HttpRequest& req, const Responder& r) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseDetokenizeRequest(req.body, ctx);
    if (!ids.ok()) return SendError(r, ids.status());
    absl::StatusOr<std::string> text = ctx.tokenizer->Decode(*ids, /*skip_special=*/false);
    if (!text.ok()) return SendError(r, WithParam(text.status(), "tokens"));
    r->Send(200, kJson, Dump(json{{"prompt", *text}}));
  }
};

absl::StatusOr<std::unique_ptr<HttpFrontend>> HttpFrontend::Start(ServingContext ctx,
                                                                  HttpServerOptions options,
                                                                  int handler_threads) {
  if (!ctx.tokenizer) return absl::InvalidArgumentError("HttpFrontend needs a tokenizer");
  if (!ctx.engine) return absl::InvalidArgumentError("HttpFrontend needs an engine");
  if (ctx.max_model_len < 2) return absl::InvalidArgumentError("max_model_len must be >= 2");
  if (options.too_large_body.empty()) {
    options.too_large_body = ErrorBody(
        absl::StrCat("Request body is larger than the limit of ", options.max_body_bytes,
                     " bytes"),
        "invalid_request_error", "", "request_too_large");
  }
  if (options.bad_request_body.empty()) {
    options.bad_request_body =
        ErrorBody("Malformed HTTP request", "invalid_request_error", "", "bad_request");
  }
  if (handler_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("handler_threads must be >= 1, got ", handler_threads));
  }
  if (!options.error_body) {
    options.error_body = [](int status, absl::string_view message) {
      return ErrorBody(message, "invalid_request_error", "",
                       status == 503 ? "overloaded" : status == 501 ? "not_implemented"
                                                                    : "bad_request");
    };
  }
  if (ctx.max_prompt_bytes == 0) ctx.max_prompt_bytes = PromptByteLimit(ctx);
  std::unique_ptr<HttpFrontend> fe(new HttpFrontend());
  fe->routes_ = std::make_shared<Routes>(std::move(ctx), handler_threads);
  // The server's callbacks hold the routes weakly: only the front door owns them, so that
  // the pool (joined in Shutdown) is never destroyed from one of its own threads.
  std::weak_ptr<Routes> weak = fe->routes_;
  options.head_check = [weak](const HttpRequest& head) -> std::optional<HttpRefusal> {
    auto routes = weak.lock();
    if (!routes) return std::nullopt;
    return routes->CheckHead(head);
  };
  auto server = HttpServer::Start(std::move(options),
                                  [weak](HttpRequest req, Responder r) {
                                    auto routes = weak.lock();
                                    if (!routes) {
                                      return SendError(r, absl::UnavailableError(
                                                              "the server is shutting down"));
                                    }
                                    routes->Dispatch(std::move(req), r);
                                  });
  if (!server.ok()) return server.status();
  fe->server_ = *std::move(server);
  return fe;
}

HttpFrontend::~HttpFrontend() { Shutdown(); }

void HttpFrontend::Shutdown() {
  if (server_) server_->Shutdown();
  if (routes_) routes_->pool.Stop();
}

HttpServerStats HttpFrontend::stats() const { return server_->stats(); }

}  // namespace mxserve::frontends

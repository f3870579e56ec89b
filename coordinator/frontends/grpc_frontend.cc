#include "coordinator/frontends/grpc_frontend.h"

#include <atomic>
#include <deque>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/auth.h"
#include "core/grpc_reflection.h"
#include "coordinator/frontends/grpc_generate.h"
#include "coordinator/frontends/openai_api.h"
#include "core/status.h"
#include "core/status_map.h"
#include "mxserve/v1/inference.grpc.pb.h"

namespace mxserve::frontends {
namespace {

namespace pb = ::mxserve::v1;
constexpr char kServiceName[] = "mxserve.v1.Inference";

// gRPC has no "param": put the field name into the message when it is not there already.
grpc::Status ToGrpc(const absl::Status& s) {
  std::optional<std::string> param = ParamOf(s);
  if (param && !param->empty() && !absl::StrContains(s.message(), *param)) {
    return ToGrpcStatus(absl::Status(s.code(), absl::StrCat(*param, ": ", s.message())));
  }
  return ToGrpcStatus(s);
}

pb::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return pb::FINISH_REASON_STOP;
    case FinishReason::kLength: return pb::FINISH_REASON_LENGTH;
    case FinishReason::kAbort: return pb::FINISH_REASON_ABORT;
    default: return pb::FINISH_REASON_UNSPECIFIED;
  }
}

// One Generate call: n engine requests (ChoiceRequests; n = 1 unless sampling.n says more)
// behind one stream. Deleted when both gRPC is done with it (OnDone) and the engine has sent
// every choice's final event (or they never started), so an engine callback never sees a dead
// reactor. A choice that fails fails the stream; the others run out unseen (an engine callback
// must not call back into the engine to cancel them; a client that goes away cancels them all).
class GenerateReactor : public grpc::ServerWriteReactor<pb::GenerateResponse> {
 public:
  GenerateReactor(const ServingContext& ctx, grpc::CallbackServerContext* call,
                  const pb::GenerateRequest* req)
      : ctx_(ctx) {
    absl::Status auth = CheckApiKey(ctx_.api_key, call->client_metadata());
    absl::StatusOr<ParsedGenerate> parsed =
        !auth.ok()       ? absl::StatusOr<ParsedGenerate>(auth)
        : ctx_.IsReady() ? ParseGenerate(*req, ctx_)
                       : absl::StatusOr<ParsedGenerate>(
                             absl::UnavailableError(ctx_.NotReadyMessage()));
    if (!parsed.ok()) {
      FinishAfterWrites(ToGrpc(parsed.status()));
      return;
    }
    id_ = parsed->generate.request_id;
    logprobs_ = parsed->generate.params.logprobs >= 0;
    prompt_tokens_ = static_cast<int>(parsed->generate.prompt_tokens.size());
    std::vector<GenerateRequest> reqs = ChoiceRequests(parsed->generate, parsed->n);
    for (const GenerateRequest& q : reqs) {
      Choice c;
      c.engine_id = q.request_id;
      if (parsed->chat) c.parser = ctx_.NewOutputParser(parsed->render);
      choices_.push_back(std::move(c));
    }
    multi_ = parsed->n > 1;
    for (size_t i = 0; i < reqs.size(); ++i) {
      {
        absl::MutexLock lock(&mu_);
        ++engine_pending_;  // before Submit: its callback may run at once
      }
      absl::Status s = ctx_.engine->Submit(std::move(reqs[i]), [this, i](GenerationEvent ev) {
        OnEvent(i, std::move(ev));
      });
      if (!s.ok()) {
        {
          absl::MutexLock lock(&mu_);
          --engine_pending_;
        }
        for (size_t k = 0; k < i; ++k) ctx_.engine->Cancel(choices_[k].engine_id);
        FinishAfterWrites(ToGrpc(s));  // an earlier choice may already be writing
        return;
      }
    }
  }

  void OnWriteDone(bool ok) override {
    pb::GenerateResponse* next = nullptr;
    bool finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      queue_.pop_front();
      if (!ok) {  // the stream broke (client gone): stop writing and stop the engine
        queue_.clear();
        if (!finished_) {
          finished_ = true;
          finish = true;
          status = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
        }
      } else if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        if (finish_pending_ && !finished_) {
          finished_ = true;
          finish = true;
          status = final_status_;
        }
      }
    }
    if (!ok) CancelEngine();
    if (next) StartWrite(next);
    if (finish) Finish(status);
  }

  void OnCancel() override {
    CancelEngine();
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (!finished_ && !writing_) finished_ = finish = true;
    }
    if (finish) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

  void OnDone() override {
    bool del;
    {
      absl::MutexLock lock(&mu_);
      grpc_done_ = true;
      del = engine_pending_ == 0;
    }
    if (del) delete this;
  }

 private:
  // One of the n sequences. Its fields are touched only by its engine callbacks (ordered).
  struct Choice {
    std::string engine_id;
    std::unique_ptr<ChatOutputParser> parser;  // chat only
    std::vector<std::string> call_ids;         // chat: ids of its tool calls so far
    size_t completion_count = 0;
    std::atomic<bool> done{false};             // its final event has arrived (read by Cancel)
    Choice() = default;
    Choice(Choice&& o) noexcept
        : engine_id(std::move(o.engine_id)), parser(std::move(o.parser)),
          call_ids(std::move(o.call_ids)), completion_count(o.completion_count) {}
  };

  // Ends the stream with `s`: now, or once the write in progress (if any) is done; what is
  // queued after it is dropped.
  void FinishAfterWrites(grpc::Status s) {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || finish_pending_) return;
      finish_pending_ = true;
      final_status_ = s;
      if (!queue_.empty()) queue_.erase(queue_.begin() + 1, queue_.end());  // front() is in flight
      if (!writing_) finished_ = finish = true;
    }
    if (finish) Finish(std::move(s));
  }

  void CancelEngine() {
    for (const Choice& c : choices_) {
      if (!c.done.load()) ctx_.engine->Cancel(c.engine_id);
    }
  }

  pb::GenerateResponse Delta(Choice& c, size_t index, const GenerationEvent& ev) {
    pb::GenerateResponse r;
    r.set_request_id(id_);
    if (multi_) r.set_index(static_cast<int32_t>(index));
    for (int32_t id : ev.token_ids) r.add_token_ids(id);
    c.completion_count += ev.token_ids.size();
    if (c.parser) {
      std::string text, reasoning;
      auto take = [&](ChatOutputParser::Delta d) {
        text += d.content;
        reasoning += d.reasoning;
        for (const auto& t : d.tool_calls) {
          pb::ToolCallDelta* p = r.add_tool_calls();
          p->set_index(t.index);
          if (c.call_ids.size() <= static_cast<size_t>(t.index)) {  // the call's first piece
            c.call_ids.resize(t.index + 1);
            c.call_ids[t.index] = t.id.empty() ? NewRequestId("call") : t.id;
            p->set_id(c.call_ids[t.index]);
          }
          p->set_name(t.name);
          p->set_arguments(t.arguments);
        }
      };
      for (int32_t id : ev.token_ids) take(c.parser->Push(id));
      if (ev.finished) take(c.parser->Finish());
      r.set_text(std::move(text));
      r.set_reasoning(std::move(reasoning));
    } else {
      r.set_text(ev.text);
    }
    if (logprobs_) {
      for (const TokenLogprob& lp : ev.logprobs) {
        pb::TokenLogprob* t = r.add_logprobs();
        t->set_token_id(lp.token_id);
        t->set_token(ctx_.tokenizer->TokenString(lp.token_id));
        t->set_logprob(lp.logprob);
        for (const TopLogprob& top : lp.top) {
          pb::TopLogprob* tt = t->add_top();
          tt->set_token_id(top.token_id);
          tt->set_token(ctx_.tokenizer->TokenString(top.token_id));
          tt->set_logprob(top.logprob);
        }
      }
    }
    return r;
  }

  void OnEvent(size_t index, GenerationEvent ev) {
    Choice& c = choices_[index];
    std::vector<pb::GenerateResponse> out;
    grpc::Status error;
    if (ev.finish_reason == FinishReason::kError) {
      error = ToGrpc(ev.error.ok() ? absl::InternalError("generation failed") : ev.error);
    } else {
      pb::GenerateResponse d = Delta(c, index, ev);
      if (d.token_ids_size() > 0 || !d.text().empty() || !d.reasoning().empty() ||
          d.tool_calls_size() > 0) {
        out.push_back(std::move(d));
      }
      if (ev.finished) {
        pb::GenerateResponse f;
        f.set_request_id(id_);
        if (multi_) f.set_index(static_cast<int32_t>(index));
        f.set_finished(true);
        // A chat turn that ends by calling tools (harmony: <|call|>) asks the client to run them.
        const bool tools = ev.finish_reason == FinishReason::kStop && !c.call_ids.empty();
        f.set_finish_reason(tools ? pb::FINISH_REASON_TOOL_CALLS : ToProto(ev.finish_reason));
        int prompt = ev.prompt_tokens > 0 ? ev.prompt_tokens : prompt_tokens_;
        int completion = ev.completion_tokens > 0 ? ev.completion_tokens
                                                  : static_cast<int>(c.completion_count);
        f.mutable_usage()->set_prompt_tokens(prompt);
        f.mutable_usage()->set_completion_tokens(completion);
        f.mutable_usage()->set_total_tokens(prompt + completion);
        out.push_back(std::move(f));
      }
    }
    if (ev.finished) c.done.store(true);
    pb::GenerateResponse* start = nullptr;
    bool finish = false, del = false;
    grpc::Status finish_status;
    {
      absl::MutexLock lock(&mu_);
      if (!finished_ && !finish_pending_) {
        for (auto& r : out) queue_.push_back(std::move(r));
        if (!error.ok()) {  // the stream ends with the error once what is queued is written
          finish_pending_ = true;
          final_status_ = error;
        } else if (ev.finished && ++choices_done_ == choices_.size()) {
          finish_pending_ = true;
          final_status_ = grpc::Status::OK;
        }
        if (!writing_ && !queue_.empty()) {
          writing_ = true;
          start = &queue_.front();
        } else if (!writing_ && finish_pending_) {
          finished_ = finish = true;
          finish_status = final_status_;
        }
      }
      if (ev.finished) {
        --engine_pending_;
        del = grpc_done_ && engine_pending_ == 0;
      }
    }
    if (start) StartWrite(start);
    if (finish) Finish(finish_status);
    if (del) delete this;
  }

  const ServingContext& ctx_;
  std::string id_;
  bool logprobs_ = false;
  bool multi_ = false;  // n > 1: messages carry their choice's index
  int prompt_tokens_ = 0;
  std::vector<Choice> choices_;  // fixed after the constructor

  absl::Mutex mu_;
  std::deque<pb::GenerateResponse> queue_ ABSL_GUARDED_BY(mu_);  // front() is being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_pending_ ABSL_GUARDED_BY(mu_) = false;  // Finish once the queue drains
  bool finished_ ABSL_GUARDED_BY(mu_) = false;        // Finish called (or about to be)
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  size_t choices_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool grpc_done_ ABSL_GUARDED_BY(mu_) = false;
  int engine_pending_ ABSL_GUARDED_BY(mu_) = 0;  // choices whose final event is due
};

class InferenceService final : public pb::Inference::CallbackService {
 public:
  explicit InferenceService(ServingContext ctx) : ctx_(std::move(ctx)) {}

  grpc::ServerWriteReactor<pb::GenerateResponse>* Generate(
      grpc::CallbackServerContext* call, const pb::GenerateRequest* req) override {
    return new GenerateReactor(ctx_, call, req);
  }

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* call,
                                       const pb::ListModelsRequest*,
                                       pb::ListModelsResponse* resp) override {
    if (absl::Status s = CheckApiKey(ctx_.api_key, call->client_metadata()); !s.ok()) {
      auto* r = call->DefaultReactor();
      r->Finish(ToGrpc(s));
      return r;
    }
    pb::ModelInfo* m = resp->add_models();
    m->set_id(ctx_.model_id);
    m->set_max_model_len(ctx_.max_model_len);
    m->set_owned_by("mxserve");
    auto* r = call->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call,
                                     const pb::TokenizeRequest* req,
                                     pb::TokenizeResponse* resp) override {
    auto* r = call->DefaultReactor();
    absl::Status s = CheckApiKey(ctx_.api_key, call->client_metadata());
    if (s.ok()) s = CheckModel(req->model(), ctx_);
    if (s.ok() && !IsValidUtf8(req->text())) s = InvalidParam("text", "'text' is not valid UTF-8");
    if (!s.ok()) {
      r->Finish(ToGrpc(s));
      return r;
    }
    std::vector<int32_t> ids = ctx_.tokenizer->EncodePrompt(req->text(), req->add_special_tokens());
    for (int32_t id : ids) resp->add_token_ids(id);
    resp->set_count(static_cast<int32_t>(ids.size()));
    resp->set_max_model_len(ctx_.max_model_len);
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  ServingContext ctx_;
};

}  // namespace

struct GrpcFrontend::Impl {
  ServingContext ctx;
  GrpcServerOptions options;
  std::unique_ptr<InferenceService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  absl::Mutex mu;
  absl::CondVar cv;
  bool stop ABSL_GUARDED_BY(mu) = false;
  int last_ready ABSL_GUARDED_BY(mu) = -1;
  std::thread health_thread;

  void Refresh() {
    std::string why;
    const bool ready = ctx.IsProbeReady(&why);  // readiness, not just "accepting"
    absl::MutexLock lock(&mu);
    if (stop || last_ready == static_cast<int>(ready)) return;
    last_ready = ready;
    grpc::HealthCheckServiceInterface* hs = server->GetHealthCheckService();
    if (!hs) return;
    hs->SetServingStatus("", ready);
    hs->SetServingStatus(kServiceName, ready);
  }
};

GrpcFrontend::GrpcFrontend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrpcFrontend::~GrpcFrontend() { Shutdown(); }

absl::StatusOr<std::unique_ptr<GrpcFrontend>> GrpcFrontend::Start(ServingContext ctx,
                                                                  GrpcServerOptions options) {
  if (!ctx.tokenizer) return absl::InvalidArgumentError("GrpcFrontend needs a tokenizer");
  if (!ctx.engine) return absl::InvalidArgumentError("GrpcFrontend needs an engine");
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad gRPC port ", options.port));
  }
  auto impl = std::make_unique<Impl>();
  impl->ctx = ctx;
  impl->options = options;
  impl->service = std::make_unique<InferenceService>(std::move(ctx));

  // Process-wide switches; both must be set before the builder is created.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  ConfigureReflection(builder, options.reflection);
  const std::string addr = absl::StrCat(
      options.host.find(':') != std::string::npos ? "[" + options.host + "]" : options.host, ":",
      options.port);
  builder.AddListeningPort(addr, grpc::InsecureServerCredentials(), &impl->port);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  builder.SetMaxSendMessageSize(options.max_send_message_bytes);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (!impl->server || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot start the gRPC server on ", addr));
  }
  // The default health service says SERVING for "" from construction; be honest instead.
  impl->Refresh();
  Impl* raw = impl.get();
  impl->health_thread = std::thread([raw] {
    const absl::Duration poll = absl::FromChrono(raw->options.health_poll);
    absl::MutexLock lock(&raw->mu);
    while (!raw->stop) {
      raw->cv.WaitWithTimeout(&raw->mu, poll);
      if (raw->stop) break;
      raw->mu.Unlock();
      raw->Refresh();
      raw->mu.Lock();
    }
  });
  return std::unique_ptr<GrpcFrontend>(new GrpcFrontend(std::move(impl)));
}

int GrpcFrontend::port() const { return impl_->port; }

void GrpcFrontend::RefreshHealth() { impl_->Refresh(); }

void GrpcFrontend::Shutdown() {
  if (!impl_ || !impl_->server) return;
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->stop) return;
    impl_->stop = true;
  }
  impl_->cv.SignalAll();
  if (impl_->health_thread.joinable()) impl_->health_thread.join();
  if (auto* hs = impl_->server->GetHealthCheckService()) hs->Shutdown();
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server->Wait();
}

}  // namespace mxserve::frontends

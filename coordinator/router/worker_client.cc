#include "coordinator/router/worker_client.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/status_map.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "wire/tensor_wire.h"

namespace mxserve {

namespace {
constexpr char kServiceName[] = "mxserve.v1.ExpertWorker";

// A worker on this host: only such a worker can map our shared-memory objects.
bool IsLoopback(const std::string& address) {
  const std::string host = address.substr(0, address.rfind(':'));
  return absl::StartsWith(host, "127.") || host == "localhost" || host == "[::1]" ||
         absl::StartsWith(address, "unix:");
}
}  // namespace

absl::StatusOr<std::unique_ptr<WorkerClient>> WorkerClient::Create(const std::string& address,
                                                                   WorkerClientOptions options) {
  if (address.empty() || address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("worker address '", address,
                                                   "': expected host:port"));
  }
  if (WireDTypeSize(options.wire_dtype) == 0) {
    return absl::InvalidArgumentError("wire_dtype: must be TENSOR_DTYPE_F32 or TENSOR_DTYPE_BF16");
  }
  auto c = std::unique_ptr<WorkerClient>(new WorkerClient());
  c->name_ = options.name.empty() ? absl::StrCat("worker@", address) : options.name;
  c->options_ = options;
  c->shm_unsupported_ = !IsLoopback(address);
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds =
      WorkerChannelCredentials(options.auth);
  if (!creds.ok()) return creds.status();
  c->creds_ = *std::move(creds);
  absl::MutexLock l(&c->mu_);
  c->conn_ = c->MakeConn(address);
  return c;
}

std::shared_ptr<const WorkerClient::Conn> WorkerClient::MakeConn(const std::string& address) const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  args.SetMaxSendMessageSize(options_.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // A restarted worker should be found quickly, not after gRPC's default backoff of up to 2 min.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Own connection per client: two clients to one address must not share (and queue on) one.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!options_.auth.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options_.auth.tls_server_name);
  }
  auto conn = std::make_shared<Conn>();
  conn->address = address;
  conn->channel = grpc::CreateCustomChannel(address, creds_, args);
  conn->stub = v1::ExpertWorker::NewStub(conn->channel);
  conn->health = grpc::health::v1::Health::NewStub(conn->channel);
  return conn;
}

std::shared_ptr<const WorkerClient::Conn> WorkerClient::conn() const {
  absl::MutexLock l(&mu_);
  return conn_;
}

std::string WorkerClient::address() const { return conn()->address; }

std::shared_ptr<grpc::health::v1::Health::Stub> WorkerClient::health_stub() const {
  return conn()->health;
}

absl::Status WorkerClient::Reconnect(const std::string& address) {
  if (address.empty() || address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("worker address '", address,
                                                   "': expected host:port"));
  }
  auto fresh = MakeConn(address);
  if (!IsLoopback(address)) shm_unsupported_ = true;
  {
    absl::MutexLock l(&mu_);
    conn_ = std::move(fresh);
  }
  ++generation_;
  return absl::OkStatus();
}

absl::Status WorkerClient::Annotate(const absl::Status& s) const {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(name_, ": ", s.message()));
}

namespace {
// The request fields of one call (the wire dtype chosen by the client), the activations in
// `hidden` unless encode_hidden is false (they go through shared memory); returns the payload
// bytes the call moves either way (activations, ids, weights).
size_t FillRequest(const ExpertBatch& call, v1::TensorDType dtype, v1::RunExpertsRequest* req,
                   bool encode_hidden = true) {
  const size_t T = std::max(call.num_tokens, 0), H = std::max(call.hidden, 0),
               k = std::max(call.top_k, 0);
  req->Clear();
  req->set_layer(call.layer);
  req->set_num_tokens(call.num_tokens);
  req->set_hidden_size(call.hidden);
  req->set_top_k(call.top_k);
  req->set_dtype(dtype);
  if (encode_hidden) EncodeTensor(call.x, T * H, dtype, req->mutable_hidden());
  if (T * k > 0) {
    req->mutable_expert_ids()->Add(call.expert_ids, call.expert_ids + T * k);
    req->mutable_weights()->Add(call.weights, call.weights + T * k);
  }
  return T * H * WireDTypeSize(dtype) + T * k * 8;
}
}  // namespace

WorkerClient::~WorkerClient() {
  {
    absl::MutexLock l(&stream_mu_);
    CloseStream();
  }
  {
    absl::MutexLock l(&dog_mu_);
    stopping_ = true;
  }
  dog_cv_.SignalAll();
  if (dog_.joinable()) dog_.join();
}

absl::Status WorkerClient::RunExperts(const ExpertBatch& call, float* out, absl::Time deadline) {
  if (options_.stream && !stream_unsupported_.load()) {
    if (stream_mu_.TryLock()) {
      absl::Status s = RunOnStream(call, out, deadline);
      stream_mu_.Unlock();
      return s;
    }
  }
  return RunUnary(call, out, deadline);
}

absl::Status WorkerClient::CheckAndDecode(const ExpertBatch& call, const v1::RunExpertsResponse& resp,
                                          const char* shm_out, float* out) const {
  const size_t T = std::max(call.num_tokens, 0), H = std::max(call.hidden, 0);
  const size_t esize = WireDTypeSize(options_.wire_dtype);
  const bool in_shm = resp.output_in_shm();
  if (resp.num_tokens() != call.num_tokens || resp.dtype() != options_.wire_dtype ||
      (in_shm && (shm_out == nullptr || !resp.output().empty())) ||
      (!in_shm && resp.output().size() != T * H * esize)) {
    return Annotate(absl::InternalError(absl::StrCat(
        "malformed RunExperts response: num_tokens ", resp.num_tokens(), " dtype ",
        resp.dtype(), " output ", resp.output().size(), " bytes", in_shm ? " (and in shared memory)" : "",
        "; expected ", T, " tokens of ", H, " x ", esize, " bytes")));
  }
  if (T * H == 0) return absl::OkStatus();
  DecodeTensorInto(in_shm ? shm_out : resp.output().data(), T * H, options_.wire_dtype, out,
                   options_.copy_pool.get());
  return absl::OkStatus();
}

// Bytes from now on, said once per client: operators see why a same-host worker's calls went
// back to the gRPC messages (also mxserve:expert_shared_memory = 0).
void WorkerClient::GiveUpSharedMemory(absl::string_view why) {
  shm_unsupported_ = true;
  fprintf(stderr, "mxserve-coordinator: worker %s at %s: no shared memory (%.*s); tensors in the gRPC messages\n",
          name_.c_str(), address().c_str(), static_cast<int>(why.size()), why.data());
}

const char* WorkerClient::FillShared(const ExpertBatch& call, v1::RunExpertsRequest* req) {
  const size_t T = std::max(call.num_tokens, 0), H = std::max(call.hidden, 0);
  const size_t slot = (T * H * WireDTypeSize(options_.wire_dtype) + 63) / 64 * 64;  // offsets 64-aligned
  if (region_ == nullptr || region_->size() < 2 * slot) {
    // Grown to twice the need so that a few larger batches do not make a new object each.
    const size_t size = std::max<size_t>(2 * slot * (region_ == nullptr ? 1 : 2), 64 << 10);
    region_.reset();
    absl::StatusOr<std::unique_ptr<SharedRegion>> r = SharedRegion::Create(size);
    if (!r.ok()) {  // no shared memory here (e.g. /dev/shm full)
      GiveUpSharedMemory(r.status().message());
      return nullptr;
    }
    region_ = *std::move(r);
  }
  EncodeTensorTo(call.x, T * H, options_.wire_dtype, region_->data(), options_.copy_pool.get());
  req->set_shm_name(region_->name());
  req->set_shm_in_offset(0);
  req->set_shm_out_offset(region_->size() / 2 / 64 * 64);
  return region_->data() + req->shm_out_offset();
}

absl::Status WorkerClient::RunUnary(const ExpertBatch& call, float* out, absl::Time deadline) {
  ++unary_calls_;
  // Reused per thread (the router calls each backend from its own long-lived thread): the
  // multi-MB bytes fields keep their capacity instead of being faulted in afresh every layer.
  thread_local v1::RunExpertsRequest req;
  thread_local v1::RunExpertsResponse resp;
  const size_t payload = FillRequest(call, options_.wire_dtype, &req);
  resp.Clear();
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  AddWorkerToken(options_.auth, &ctx);
  const std::shared_ptr<const Conn> c = conn();
  bytes_sent_ += payload;
  grpc::Status gs = c->stub->RunExperts(&ctx, req, &resp);
  if (!gs.ok()) return Annotate(FromGrpcStatus(gs));
  bytes_received_ += resp.output().size();
  return CheckAndDecode(call, resp, nullptr, out);
}

void WorkerClient::CloseStream() {
  if (!stream_) return;
  stream_->ctx->TryCancel();
  stream_->rw->Finish().IgnoreError();
  stream_.reset();
}

absl::Status WorkerClient::RunOnStream(const ExpertBatch& call, float* out, absl::Time deadline) {
  // Reused per thread (one stream call at a time per client): buffers keep their capacity.
  thread_local v1::ExpertStreamRequest req;
  thread_local v1::ExpertStreamResponse resp;
  const size_t n = size_t(std::max(call.num_tokens, 0)) * std::max(call.hidden, 0);  // activations
  const size_t payload = FillRequest(call, options_.wire_dtype, req.mutable_request(), /*encode_hidden=*/false);
  // Where a shared-memory answer will lie; nullptr: the activations go as bytes.
  const char* shm_out = using_shared_memory() ? FillShared(call, req.mutable_request()) : nullptr;
  if (shm_out == nullptr) EncodeTensor(call.x, n, options_.wire_dtype, req.mutable_request()->mutable_hidden());
  for (int attempt = 0;; ++attempt) {
    const std::shared_ptr<const Conn> c = conn();
    if (stream_ && stream_->conn != c) CloseStream();  // Reconnect: the old channel's stream goes
    const bool fresh = !stream_;
    if (fresh) {
      auto st = std::make_unique<Stream>();
      st->conn = c;
      st->ctx = std::make_unique<grpc::ClientContext>();
      AddWorkerToken(options_.auth, st->ctx.get());
      st->rw = c->stub->RunExpertsStream(st->ctx.get());
      stream_ = std::move(st);
      ++stream_opens_;
    }
    req.set_id(++next_id_);
    resp.Clear();
    bytes_sent_ += payload;
    Arm(stream_->ctx.get(), deadline);
    const bool ok = stream_->rw->Write(req) && stream_->rw->Read(&resp);
    const bool fired = Disarm();
    if (ok) {
      if (fired) CloseStream();  // answered, but the watchdog cancelled the stream meanwhile
      if (resp.id() != req.id()) {
        CloseStream();
        return Annotate(absl::InternalError(absl::StrCat("RunExperts stream answered call ", resp.id(),
                                                         " to call ", req.id())));
      }
      if (resp.code() == static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION) && shm_out != nullptr) {
        // A worker without --allow_shared_memory: the same call as bytes, and bytes from now on.
        GiveUpSharedMemory(resp.message());
        return RunOnStream(call, out, deadline);
      }
      if (resp.code() != 0) {
        return Annotate(FromGrpcStatus(
            grpc::Status(static_cast<grpc::StatusCode>(resp.code()), resp.message())));
      }
      bytes_received_ += resp.response().output_in_shm() ? n * WireDTypeSize(options_.wire_dtype)
                                                         : resp.response().output().size();
      return CheckAndDecode(call, resp.response(), shm_out, out);
    }
    // The stream is gone: say why, and open a new one on the next call.
    const grpc::Status gs = stream_->rw->Finish();
    stream_.reset();
    if (fired) {
      return Annotate(absl::DeadlineExceededError("Deadline Exceeded: no RunExperts answer by the call's deadline"));
    }
    switch (gs.error_code()) {
      case grpc::StatusCode::UNIMPLEMENTED:  // a worker without the stream: unary from now on
        stream_unsupported_ = true;
        return RunUnary(call, out, deadline);
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
        return Annotate(FromGrpcStatus(gs));
      default:
        break;
    }
    // A stream that broke while idle (the worker restarted, or drained and shut down) had not
    // seen this call: once more on a new stream (expert calls are idempotent). Otherwise the
    // worker is unreachable: UNAVAILABLE, so the router retries elsewhere.
    if (!fresh && attempt == 0 && absl::Now() < deadline) continue;
    return Annotate(absl::UnavailableError(absl::StrCat(
        "RunExperts stream failed: ", gs.ok() ? std::string("ended by the worker") : gs.error_message())));
  }
}

void WorkerClient::Arm(grpc::ClientContext* ctx, absl::Time deadline) {
  absl::MutexLock l(&dog_mu_);
  if (!dog_.joinable()) dog_ = std::thread([this] { WatchdogLoop(); });
  armed_ = ctx;
  armed_deadline_ = deadline;
  fired_ = false;
  dog_cv_.SignalAll();
}

bool WorkerClient::Disarm() {
  absl::MutexLock l(&dog_mu_);
  armed_ = nullptr;
  dog_cv_.SignalAll();
  return fired_;
}

void WorkerClient::WatchdogLoop() {
  absl::MutexLock l(&dog_mu_);
  while (!stopping_) {
    if (armed_ == nullptr) {
      dog_cv_.Wait(&dog_mu_);
      continue;
    }
    if (absl::Now() >= armed_deadline_) {
      armed_->TryCancel();  // the blocked Write/Read returns false
      fired_ = true;
      armed_ = nullptr;
      continue;
    }
    if (armed_deadline_ == absl::InfiniteFuture()) {
      dog_cv_.Wait(&dog_mu_);
    } else {
      dog_cv_.WaitWithDeadline(&dog_mu_, armed_deadline_);
    }
  }
}

absl::StatusOr<bool> WorkerClient::IsServing(absl::Time deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(kServiceName);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status gs = conn()->health->Check(&ctx, req, &resp);
  if (!gs.ok()) return Annotate(FromGrpcStatus(gs));
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::Status WorkerClient::WaitReady(absl::Time deadline) {
  std::string last = "no answer yet";
  absl::Duration backoff = absl::Milliseconds(20);
  while (true) {
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::StatusOr<bool> serving = IsServing(std::min(deadline, now + absl::Seconds(2)));
    if (serving.ok() && *serving) return absl::OkStatus();
    if (!serving.ok() && serving.status().code() == absl::StatusCode::kUnimplemented) {
      return serving.status();  // no health service: waiting will not help
    }
    last = serving.ok() ? "NOT_SERVING" : std::string(serving.status().message());
    absl::SleepFor(std::min(backoff, deadline - absl::Now()));
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
  return Annotate(absl::DeadlineExceededError(
      absl::StrCat("not SERVING by the deadline (last: ", last, ")")));
}

absl::StatusOr<v1::DescribeResponse> WorkerClient::Describe(absl::Time deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  AddWorkerToken(options_.auth, &ctx);
  v1::DescribeResponse resp;
  grpc::Status gs = conn()->stub->Describe(&ctx, v1::DescribeRequest(), &resp);
  if (!gs.ok()) return Annotate(FromGrpcStatus(gs));
  return resp;
}

}  // namespace mxserve

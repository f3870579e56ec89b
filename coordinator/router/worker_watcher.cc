#include "coordinator/router/worker_watcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxserve {

namespace {
constexpr char kServiceName[] = "mxserve.v1.ExpertWorker";
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
}  // namespace

WorkerWatcher::WorkerWatcher(std::vector<WorkerClient*> workers, HealthSink* sink,
                             WorkerWatcherOptions options)
    : sink_(sink), options_(options), slots_(workers.size()) {
  for (size_t i = 0; i < workers.size(); ++i) slots_[i].client = workers[i];
  for (size_t i = 0; i < workers.size(); ++i) {
    slots_[i].thread = std::thread([this, i] { Loop(static_cast<int>(i)); });
  }
}

WorkerWatcher::~WorkerWatcher() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;  // wakes every Sleep
    for (Slot& s : slots_) {
      if (s.ctx != nullptr) s.ctx->TryCancel();
    }
  }
  for (Slot& s : slots_) s.thread.join();
}

void WorkerWatcher::Poke(int i) {
  absl::MutexLock l(&mu_);
  if (i < 0 || i >= static_cast<int>(slots_.size())) return;
  slots_[i].poked = true;
  if (slots_[i].ctx != nullptr) slots_[i].ctx->TryCancel();
}

bool WorkerWatcher::Sleep(absl::Duration d) {
  absl::MutexLock l(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stop_), d);
  return !stop_;
}

void WorkerWatcher::Loop(int i) {
  Slot& slot = slots_[i];
  absl::Duration backoff = options_.backoff_initial;
  // Registers ctx as the call to cancel on Poke/stop; false if already stopping.
  auto begin = [&](grpc::ClientContext* ctx) {
    absl::MutexLock l(&mu_);
    if (stop_) return false;
    slot.ctx = ctx;
    slot.poked = false;
    return true;
  };
  auto end = [&] {
    absl::MutexLock l(&mu_);
    slot.ctx = nullptr;
    return slot.poked;
  };
  HealthCheckRequest req;
  req.set_service(kServiceName);
  while (true) {
    auto health = slot.client->health_stub();
    // 1. A bounded probe: a hung worker is told apart from a gone one here.
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.probe_timeout));
      if (!begin(&ctx)) return;
      HealthCheckResponse resp;
      grpc::Status gs = health->Check(&ctx, req, &resp);
      const bool poked = end();
      if (!gs.ok()) {
        const bool late = gs.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        sink_->OnWorkerHealth(i, false, true,
                              late ? absl::StrCat("no answer to a health check within ",
                                                  absl::FormatDuration(options_.probe_timeout))
                                   : absl::StrCat("unreachable: ", gs.error_message()));
        if (!Sleep(poked ? absl::ZeroDuration() : backoff)) return;
        backoff = std::min(backoff * 2, options_.backoff_max);
        continue;
      }
    }
    // 2. The stream: its first message is the current status, then one per change.
    grpc::ClientContext ctx;
    if (!begin(&ctx)) return;
    std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader = health->Watch(&ctx, req);
    HealthCheckResponse resp;
    while (reader->Read(&resp)) {
      if (resp.status() == HealthCheckResponse::SERVING) {
        sink_->OnWorkerHealth(i, true, false, "SERVING");
        backoff = options_.backoff_initial;
      } else {
        sink_->OnWorkerHealth(i, false, false,
                              absl::StrCat("reports ", HealthCheckResponse::ServingStatus_Name(resp.status())));
      }
    }
    grpc::Status gs = reader->Finish();
    const bool poked = end();
    {
      absl::MutexLock l(&mu_);
      if (stop_) return;
    }
    if (poked) continue;  // whoever poked has already said why it is down
    sink_->OnWorkerHealth(i, false, true,
                          absl::StrCat("health stream ended: ", gs.error_message()));
    if (!Sleep(backoff)) return;
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

}  // namespace mxserve

#include "coordinator/frontends/request_deadline.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxserve::frontends {

// One submitted request. `timed_out` is set by the timer before it cancels, so the abort the
// cancel produces is reported as the deadline, not as a client that went away.
struct DeadlineGenerationService::Pending {
  std::string request_id;
  std::atomic<bool> finished{false};
  std::atomic<bool> timed_out{false};
};

DeadlineGenerationService::DeadlineGenerationService(GenerationService* inner,
                                                     absl::Duration timeout)
    : inner_(inner), timeout_(timeout) {
  if (timeout_ > absl::ZeroDuration()) timer_ = std::thread([this] { TimerLoop(); });
}

DeadlineGenerationService::~DeadlineGenerationService() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (timer_.joinable()) timer_.join();
}

int64_t DeadlineGenerationService::timed_out() const {
  absl::MutexLock lock(&mu_);
  return timed_out_;
}

absl::Status DeadlineGenerationService::Submit(GenerateRequest request, EventCallback callback) {
  if (timeout_ <= absl::ZeroDuration()) return inner_->Submit(std::move(request), std::move(callback));
  auto pending = std::make_shared<Pending>();
  pending->request_id = request.request_id;
  const absl::Duration timeout = timeout_;
  EventCallback wrapped = [pending, timeout, cb = std::move(callback)](GenerationEvent ev) {
    if (ev.finished) {
      pending->finished.store(true);
      if (pending->timed_out.load() && ev.finish_reason == FinishReason::kAbort) {
        ev.finish_reason = FinishReason::kError;
        ev.error = absl::DeadlineExceededError(absl::StrCat(
            "the request ran longer than the server's limit of ", absl::FormatDuration(timeout),
            " (--request-timeout-s) and was stopped"));
      }
    }
    cb(std::move(ev));
  };
  {
    absl::MutexLock lock(&mu_);
    heap_.push(Entry{absl::Now() + timeout_, pending});
  }
  cv_.SignalAll();
  absl::Status s = inner_->Submit(std::move(request), std::move(wrapped));
  if (!s.ok()) pending->finished.store(true);  // the heap entry expires harmlessly
  return s;
}

void DeadlineGenerationService::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (heap_.empty()) {
      cv_.Wait(&mu_);
      continue;
    }
    const absl::Time next = heap_.top().deadline;
    if (next > absl::Now()) {
      cv_.WaitWithDeadline(&mu_, next);
      continue;
    }
    std::shared_ptr<Pending> p = heap_.top().pending.lock();
    heap_.pop();
    if (!p || p->finished.load()) continue;
    p->timed_out.store(true);
    ++timed_out_;
    mu_.Unlock();
    inner_->Cancel(p->request_id);  // the engine answers with a final kAbort event
    mu_.Lock();
  }
}

}  // namespace mxserve::frontends

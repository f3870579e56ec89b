// A per-request deadline (--request-timeout-s) in front of the engine: a request still running
// when its time is up is cancelled through the engine (its sequence and KV blocks are freed)
// and ends with DEADLINE_EXCEEDED: HTTP 504 (or an SSE error event once streaming), gRPC
// DEADLINE_EXCEEDED. Both front doors submit through it.
#pragma once

#include <cstdint>
#include <memory>
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/engine/request.h"

namespace mxserve::frontends {

class DeadlineGenerationService final : public GenerationService {
 public:
  // `inner` must outlive this. timeout <= 0: no deadline (calls pass straight through).
  DeadlineGenerationService(GenerationService* inner, absl::Duration timeout);
  ~DeadlineGenerationService() override;  // stops the timer thread (cancels nothing)

  absl::Status Submit(GenerateRequest request, EventCallback callback) override;
  void Cancel(const std::string& request_id) override { inner_->Cancel(request_id); }

  // Requests ended by the deadline so far (for tests and metrics).
  int64_t timed_out() const;

 private:
  struct Pending;
  struct Entry {
    absl::Time deadline;
    std::weak_ptr<Pending> pending;
    bool operator>(const Entry& o) const { return deadline > o.deadline; }
  };
  void TimerLoop();

  GenerationService* const inner_;
  const absl::Duration timeout_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  int64_t timed_out_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread timer_;
};

}  // namespace mxserve::frontends

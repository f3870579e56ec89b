// A MoeExecutor in front of the expert router that remembers the MoE call in flight (layer,
// start time, which expert groups it needs), so a health check can say what a stuck step is
// waiting on ("in layer 3 expert call to worker 1 ...") without reaching into the router.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/models/moe_executor.h"
#include "coordinator/router/placement.h"

namespace mxserve {

struct MoeCallActivity {
  int layer = 0;
  int num_tokens = 0;
  absl::Time started;
  std::vector<int> groups;  // the placement's expert groups this call needs, ascending
  std::vector<int> hosts;   // every backend hosting one of them (only one per group is called)
  std::vector<uint64_t> hosts_progress;  // answered(host) when the call started
};

class MoeCallProbe final : public MoeExecutor {
 public:
  // `inner` and `placement` must outlive the probe. `answered(b)` (optional) is a cheap counter
  // that moves whenever backend b answers a call (its received bytes): a host whose counter
  // has not moved since the call started is one the call is still waiting on.
  MoeCallProbe(MoeExecutor* inner, const Placement* placement,
               std::function<uint64_t(int backend)> answered = nullptr);

  absl::Status Run(const ExpertBatch& batch, float* out) override;

  // The call in flight, if any.
  std::optional<MoeCallActivity> Current() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t calls() const ABSL_LOCKS_EXCLUDED(mu_);
  // Of a's hosts, those that have not answered since it started (all of them without
  // `answered`).
  std::vector<int> Waiting(const MoeCallActivity& a) const;

 private:
  MoeExecutor* const inner_;
  const Placement* const placement_;
  const std::function<uint64_t(int)> answered_;
  mutable absl::Mutex mu_;
  std::optional<MoeCallActivity> current_ ABSL_GUARDED_BY(mu_);
  int64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mxserve

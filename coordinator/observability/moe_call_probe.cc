#include "coordinator/observability/moe_call_probe.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace mxserve {

MoeCallProbe::MoeCallProbe(MoeExecutor* inner, const Placement* placement,
                           std::function<uint64_t(int)> answered)
    : inner_(inner), placement_(placement), answered_(std::move(answered)) {}

absl::Status MoeCallProbe::Run(const ExpertBatch& batch, float* out) {
  MoeCallActivity a;
  a.layer = batch.layer;
  a.num_tokens = batch.num_tokens;
  a.started = absl::Now();
  const int E = placement_->num_experts();
  std::vector<char> seen(placement_->num_groups(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(batch.num_tokens) * batch.top_k; ++i) {
    const int e = batch.expert_ids[i];
    if (e < 0 || e >= E) continue;  // the router rejects it with a clear error
    const int g = placement_->GroupOf(e);
    if (!seen[g]) {
      seen[g] = 1;
      a.groups.push_back(g);
    }
  }
  std::sort(a.groups.begin(), a.groups.end());
  for (int g : a.groups) {
    for (int b : placement_->GroupHosts(g)) {
      if (std::find(a.hosts.begin(), a.hosts.end(), b) != a.hosts.end()) continue;
      a.hosts.push_back(b);
      a.hosts_progress.push_back(answered_ ? answered_(b) : 0);
    }
  }
  {
    absl::MutexLock l(&mu_);
    current_ = std::move(a);
    ++calls_;
  }
  absl::Status s = inner_->Run(batch, out);
  absl::MutexLock l(&mu_);
  current_.reset();
  return s;
}

std::optional<MoeCallActivity> MoeCallProbe::Current() const {
  absl::MutexLock l(&mu_);
  return current_;
}

std::vector<int> MoeCallProbe::Waiting(const MoeCallActivity& a) const {
  std::vector<int> out;
  for (size_t i = 0; i < a.hosts.size(); ++i) {
    if (!answered_ || answered_(a.hosts[i]) == a.hosts_progress[i]) out.push_back(a.hosts[i]);
  }
  return out;
}

int64_t MoeCallProbe::calls() const {
  absl::MutexLock l(&mu_);
  return calls_;
}

}  // namespace mxserve

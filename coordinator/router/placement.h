// Which backend(s) host each expert. Today: a contiguous split of the experts over N backends,
// one copy each. The expert -> list-of-backends shape leaves room for replicas (the first
// entry is the primary; later ones are where a call is retried).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

// Backend b of n gets experts [begin, end): sizes differ by at most one, larger ones first.
std::pair<int, int> ContiguousRange(int num_experts, int num_backends, int b);

class Placement {
 public:
  // Every expert on exactly one backend, contiguous ranges (ContiguousRange). Needs
  // 1 <= num_backends <= num_experts.
  static absl::StatusOr<Placement> Contiguous(int num_experts, int num_backends);
  // From explicit lists: hosts[e] = backends holding expert e (each in [0, num_backends), at
  // least one per expert, no repeats).
  static absl::StatusOr<Placement> FromLists(int num_backends, std::vector<std::vector<int>> hosts);

  int num_experts() const { return static_cast<int>(hosts_.size()); }
  int num_backends() const { return num_backends_; }
  const std::vector<int>& BackendsOf(int expert) const { return hosts_[expert]; }
  int Primary(int expert) const { return hosts_[expert].front(); }
  std::vector<int> ExpertsOf(int backend) const;  // sorted
  std::string DebugString() const;                // "backend 0: 0-15; backend 1: 16-31"

 private:
  int num_backends_ = 0;
  std::vector<std::vector<int>> hosts_;
};

}  // namespace mxserve

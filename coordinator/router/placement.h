// Which backend(s) host each expert (the first entry is the primary; later ones are replicas a
// call fails over to), and the expert groups the router calls as a unit: a group's partial sum
// is computed whole by one of its hosts, so the layer result is the same bit for bit whichever
// replica computed it (the groups and their summation order do not depend on health).
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
  // Groups are the maximal runs of consecutive experts with the same host set.
  static absl::StatusOr<Placement> FromLists(int num_backends, std::vector<std::vector<int>> hosts);
  // --expert-replicas R: group g is ContiguousRange(g) and lives on backends g, g-1, ..., g-R+1
  // (mod n; g first), i.e. backend b holds its own range and the next R-1 ranges, wrapping.
  // Needs 1 <= replicas <= num_backends <= num_experts.
  static absl::StatusOr<Placement> Replicated(int num_experts, int num_backends, int replicas);

  int num_experts() const { return static_cast<int>(hosts_.size()); }
  int num_backends() const { return num_backends_; }
  const std::vector<int>& BackendsOf(int expert) const { return hosts_[expert]; }
  int Primary(int expert) const { return hosts_[expert].front(); }
  std::vector<int> ExpertsOf(int backend) const;  // sorted
  int num_groups() const { return static_cast<int>(group_begin_.size()); }
  int GroupOf(int expert) const { return group_of_[expert]; }
  std::pair<int, int> GroupRange(int g) const {  // [begin, end) of experts
    return {group_begin_[g], g + 1 < num_groups() ? group_begin_[g + 1] : num_experts()};
  }
  const std::vector<int>& GroupHosts(int g) const { return hosts_[group_begin_[g]]; }
  int MinReplicas() const;  // fewest hosts of any expert
  std::string DebugString() const;                // "backend 0: 0-15; backend 1: 16-31"

 private:
  int num_backends_ = 0;
  std::vector<std::vector<int>> hosts_;
  std::vector<int> group_of_;     // by expert
  std::vector<int> group_begin_;  // first expert of each group (groups are contiguous)
};

}  // namespace mxserve

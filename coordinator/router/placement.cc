#include "coordinator/router/placement.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mxserve {

std::pair<int, int> ContiguousRange(int num_experts, int num_backends, int b) {
  const int base = num_experts / num_backends, extra = num_experts % num_backends;
  const int begin = b * base + std::min(b, extra);
  return {begin, begin + base + (b < extra ? 1 : 0)};
}

absl::StatusOr<Placement> Placement::Contiguous(int num_experts, int num_backends) {
  if (num_backends < 1) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", num_backends, " backends (< 1)"));
  }
  if (num_experts < num_backends) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", num_experts,
                                                   " experts cannot be split over ",
                                                   num_backends, " backends"));
  }
  std::vector<std::vector<int>> hosts(num_experts);
  for (int b = 0; b < num_backends; ++b) {
    auto [begin, end] = ContiguousRange(num_experts, num_backends, b);
    for (int e = begin; e < end; ++e) hosts[e] = {b};
  }
  return FromLists(num_backends, std::move(hosts));
}

absl::StatusOr<Placement> Placement::FromLists(int num_backends,
                                               std::vector<std::vector<int>> hosts) {
  if (num_backends < 1) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", num_backends, " backends (< 1)"));
  }
  if (hosts.empty()) return absl::InvalidArgumentError("placement: no experts");
  for (size_t e = 0; e < hosts.size(); ++e) {
    if (hosts[e].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("placement: expert ", e, " has no backend"));
    }
    for (size_t i = 0; i < hosts[e].size(); ++i) {
      const int b = hosts[e][i];
      if (b < 0 || b >= num_backends) {
        return absl::InvalidArgumentError(absl::StrCat("placement: expert ", e, " on backend ", b,
                                                       ", not in [0, ", num_backends, ")"));
      }
      if (std::count(hosts[e].begin(), hosts[e].end(), b) > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("placement: expert ", e, " lists backend ", b, " twice"));
      }
    }
  }
  Placement p;
  p.num_backends_ = num_backends;
  p.hosts_ = std::move(hosts);
  auto same_set = [](std::vector<int> a, std::vector<int> b) {
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    return a == b;
  };
  for (int e = 0; e < p.num_experts(); ++e) {
    if (e == 0 || !same_set(p.hosts_[e], p.hosts_[e - 1])) p.group_begin_.push_back(e);
    p.group_of_.push_back(static_cast<int>(p.group_begin_.size()) - 1);
  }
  return p;
}

absl::StatusOr<Placement> Placement::Replicated(int num_experts, int num_backends, int replicas) {
  if (replicas < 1 || replicas > num_backends) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", replicas,
                                                   " replicas need 1..", num_backends,
                                                   " backends"));
  }
  if (num_backends < 1 || num_experts < num_backends) {
    return absl::InvalidArgumentError(absl::StrCat("placement: ", num_experts,
                                                   " experts cannot be split over ",
                                                   num_backends, " backends"));
  }
  std::vector<std::vector<int>> hosts(num_experts);
  for (int g = 0; g < num_backends; ++g) {
    auto [begin, end] = ContiguousRange(num_experts, num_backends, g);
    for (int e = begin; e < end; ++e) {
      for (int r = 0; r < replicas; ++r) hosts[e].push_back(((g - r) % num_backends + num_backends) % num_backends);
    }
  }
  ASSIGN_OR_RETURN(Placement p, FromLists(num_backends, std::move(hosts)));
  // One group per range even where neighbouring ranges share a host set (replicas == n).
  p.group_begin_.clear();
  for (int g = 0; g < num_backends; ++g) {
    p.group_begin_.push_back(ContiguousRange(num_experts, num_backends, g).first);
    for (int e = p.group_begin_.back(); e < ContiguousRange(num_experts, num_backends, g).second; ++e)
      p.group_of_[e] = g;
  }
  return p;
}

int Placement::MinReplicas() const {
  size_t m = hosts_.empty() ? 0 : hosts_[0].size();
  for (const auto& h : hosts_) m = std::min(m, h.size());
  return static_cast<int>(m);
}

std::vector<int> Placement::ExpertsOf(int backend) const {
  std::vector<int> out;
  for (int e = 0; e < num_experts(); ++e) {
    if (std::find(hosts_[e].begin(), hosts_[e].end(), backend) != hosts_[e].end()) out.push_back(e);
  }
  return out;
}

std::string Placement::DebugString() const {
  std::string s;
  for (int b = 0; b < num_backends_; ++b) {
    std::vector<int> ex = ExpertsOf(b);
    absl::StrAppend(&s, b ? "; " : "", "backend ", b, ":");
    // Print runs of consecutive ids as ranges.
    for (size_t i = 0; i < ex.size();) {
      size_t j = i;
      while (j + 1 < ex.size() && ex[j + 1] == ex[j] + 1) ++j;
      absl::StrAppend(&s, i ? "," : " ", ex[i]);
      if (j > i) absl::StrAppend(&s, "-", ex[j]);
      i = j + 1;
    }
  }
  return s;
}

}  // namespace mxserve

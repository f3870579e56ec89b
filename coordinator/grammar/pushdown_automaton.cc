#include "coordinator/grammar/pushdown_automaton.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace mxserve::grammar {

PushdownAutomaton::PushdownAutomaton(const Grammar* grammar, int max_depth)
    : grammar_(grammar), max_depth_(max_depth) {
  start_ = Closure({NodeId(grammar_->rule_start(grammar_->root()), -1)});
}

int32_t PushdownAutomaton::NodeId(int32_t gstate, int32_t parent) {
  auto [it, inserted] = node_ids_.try_emplace({gstate, parent}, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({gstate, parent, parent < 0 ? 1 : nodes_[parent].depth + 1});
  return it->second;
}

int32_t PushdownAutomaton::Closure(const std::vector<int32_t>& seeds) {
  absl::flat_hash_set<int32_t> seen;
  std::vector<int32_t> work;
  auto visit = [&](int32_t n) {
    if (seen.insert(n).second) work.push_back(n);
  };
  for (int32_t n : seeds) visit(n);
  std::vector<int32_t> live;
  bool accepting = false;
  while (!work.empty()) {
    const int32_t n = work.back();
    work.pop_back();
    const Node node = nodes_[n];
    const GrammarState& gs = grammar_->state(node.gstate);
    if (!gs.bytes.empty()) live.push_back(n);
    for (int32_t t : gs.eps) visit(NodeId(t, node.parent));
    for (const CallEdge& c : gs.calls) {
      if (node.depth >= max_depth_) continue;
      const int32_t ret = NodeId(c.ret, node.parent);
      visit(NodeId(grammar_->rule_start(c.rule), ret));
    }
    if (gs.final) {
      if (node.parent < 0) {
        accepting = true;
      } else {
        visit(node.parent);
      }
    }
  }
  if (live.empty() && !accepting) return kDead;
  std::sort(live.begin(), live.end());
  auto key = std::make_pair(std::move(live), accepting);
  auto it = state_ids_.find(key);
  if (it != state_ids_.end()) return it->second;
  const auto id = static_cast<int32_t>(states_.size());
  State s;
  s.nodes = key.first;
  s.accepting = accepting;
  states_.push_back(std::move(s));
  state_ids_.emplace(std::move(key), id);
  return id;
}

int32_t PushdownAutomaton::Step(int32_t state, uint8_t byte) {
  if (state == kDead) return kDead;
  if (!states_[state].next) {
    states_[state].next = std::make_unique<std::array<int32_t, 256>>();
    states_[state].next->fill(-2);
  }
  const int32_t cached = (*states_[state].next)[byte];
  if (cached != -2) return cached;
  std::vector<int32_t> seeds;
  for (int32_t n : states_[state].nodes) {
    const Node node = nodes_[n];
    for (const ByteEdge& e : grammar_->state(node.gstate).bytes) {
      if (byte >= e.lo && byte <= e.hi) seeds.push_back(NodeId(e.target, node.parent));
    }
  }
  const int32_t next = seeds.empty() ? kDead : Closure(seeds);
  (*states_[state].next)[byte] = next;  // states_ may have grown: index again
  return next;
}

}  // namespace mxserve::grammar

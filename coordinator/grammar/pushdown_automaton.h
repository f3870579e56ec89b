// PushdownAutomaton: runs a Grammar byte by byte. A configuration is a stack of grammar states
// (the top is where matching is, the rest are return states), interned as a node of a shared
// tree; an automaton state is the set of configurations the bytes so far can be in, interned
// and determinized lazily, so that a byte step on a state seen before is one table lookup.
// Not thread-safe: CompiledGrammar serializes access.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "coordinator/grammar/grammar.h"

namespace mxserve::grammar {

class PushdownAutomaton {
 public:
  static constexpr int32_t kDead = -1;
  // Stacks deeper than max_depth are dropped (bounds nesting, and ends left recursion).
  explicit PushdownAutomaton(const Grammar* grammar, int max_depth = 64);

  int32_t start() const { return start_; }
  // The state after `byte`, or kDead when no configuration can take it.
  int32_t Step(int32_t state, uint8_t byte);
  // The bytes so far are a complete sentence of the grammar.
  bool accepting(int32_t state) const { return states_[state].accepting; }
  // Some byte may still follow.
  bool can_continue(int32_t state) const { return !states_[state].nodes.empty(); }
  int num_states() const { return static_cast<int>(states_.size()); }

 private:
  struct Node {
    int32_t gstate;
    int32_t parent;  // -1: bottom of the stack
    int32_t depth;
  };
  struct State {
    std::vector<int32_t> nodes;  // sorted; only nodes whose grammar state has byte edges
    bool accepting = false;
    std::unique_ptr<std::array<int32_t, 256>> next;  // -2: not computed yet
  };
  int32_t NodeId(int32_t gstate, int32_t parent);
  // The state reached from `seeds` by epsilon moves, calls and returns.
  int32_t Closure(const std::vector<int32_t>& seeds);

  const Grammar* grammar_;
  const int max_depth_;
  std::vector<Node> nodes_;
  absl::flat_hash_map<std::pair<int32_t, int32_t>, int32_t> node_ids_;
  std::vector<State> states_;
  absl::flat_hash_map<std::pair<std::vector<int32_t>, bool>, int32_t> state_ids_;
  int32_t start_ = kDead;
};

}  // namespace mxserve::grammar

// Helpers shared by the grammar tests: running a CompiledGrammar on whole strings and random
// walks through its automaton.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "coordinator/grammar/compiled_grammar.h"
#include "coordinator/grammar/pushdown_automaton.h"

namespace mxserve::grammar {

inline bool Accepts(CompiledGrammar& g, const std::string& s) {
  const int32_t state = g.Advance(g.start(), s);
  return state != PushdownAutomaton::kDead && g.accepting(state);
}

// A random sentence of the grammar: random allowed bytes, stopping (when accepting) with
// probability p_stop per byte. Empty optional when the walk got stuck or ran past max_len.
inline std::optional<std::string> RandomSentence(CompiledGrammar& g, std::mt19937_64& rng,
                                                 double p_stop, size_t max_len) {
  std::string out;
  int32_t state = g.start();
  std::map<int32_t, std::vector<uint8_t>> allowed_in;  // the automaton's states repeat
  while (out.size() < max_len) {
    if (g.accepting(state) &&
        (!g.can_continue(state) || std::bernoulli_distribution(p_stop)(rng))) {
      return out;
    }
    auto [it, fresh] = allowed_in.try_emplace(state);
    std::vector<uint8_t>& allowed = it->second;
    for (int b = 0; fresh && b < 256; ++b) {
      if (g.Advance(state, std::string(1, static_cast<char>(b))) != PushdownAutomaton::kDead) {
        allowed.push_back(static_cast<uint8_t>(b));
      }
    }
    if (allowed.empty()) return std::nullopt;
    const uint8_t b = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    out.push_back(static_cast<char>(b));
    state = g.Advance(state, std::string(1, static_cast<char>(b)));
  }
  return std::nullopt;
}

}  // namespace mxserve::grammar

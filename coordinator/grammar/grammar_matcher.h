// GrammarMatcher: one sequence's position in a CompiledGrammar — the automaton state after the
// bytes of the tokens it has accepted, and the token mask for what may come next.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "coordinator/grammar/compiled_grammar.h"

namespace mxserve::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar)
      : grammar_(std::move(grammar)), state_(grammar_->start()) {}
  // False (and no change) when the bytes cannot continue the grammar.
  bool Accept(std::string_view bytes);
  // The output so far is a complete sentence (EOS may come now).
  bool accepting() const { return grammar_->accepting(state_); }
  // Complete and nothing may follow: generation is over.
  bool terminated() const { return accepting() && !grammar_->can_continue(state_); }
  std::shared_ptr<const TokenBitmask> Mask(const VocabTrie& trie) const {
    return grammar_->Mask(state_, trie);
  }
  int32_t state() const { return state_; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  int32_t state_;
};

}  // namespace mxserve::grammar

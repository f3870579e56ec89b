#include "coordinator/grammar/compiled_grammar.h"

#include <utility>

namespace mxserve::grammar {

CompiledGrammar::CompiledGrammar(std::unique_ptr<Grammar> grammar, std::string description)
    : grammar_(std::move(grammar)), description_(std::move(description)), pda_(grammar_.get()) {
  absl::MutexLock lock(&mu_);
  start_ = pda_.start();
}

int32_t CompiledGrammar::Advance(int32_t state, std::string_view bytes) {
  absl::MutexLock lock(&mu_);
  for (char c : bytes) {
    state = pda_.Step(state, static_cast<uint8_t>(c));
    if (state == PushdownAutomaton::kDead) break;
  }
  return state;
}

bool CompiledGrammar::accepting(int32_t state) {
  if (state == PushdownAutomaton::kDead) return false;
  absl::MutexLock lock(&mu_);
  return pda_.accepting(state);
}

bool CompiledGrammar::can_continue(int32_t state) {
  if (state == PushdownAutomaton::kDead) return false;
  absl::MutexLock lock(&mu_);
  return pda_.can_continue(state);
}

std::shared_ptr<const TokenBitmask> CompiledGrammar::Mask(int32_t state, const VocabTrie& trie) {
  absl::MutexLock lock(&mu_);
  if (!masks_) masks_ = std::make_unique<TokenMaskCache>(&trie);
  if (masks_->trie() == &trie) return masks_->Get(pda_, state);
  return TokenMaskCache(&trie).Get(pda_, state);
}

int CompiledGrammar::num_cached_masks() {
  absl::MutexLock lock(&mu_);
  return masks_ ? masks_->size() : 0;
}

int CompiledGrammar::num_automaton_states() {
  absl::MutexLock lock(&mu_);
  return pda_.num_states();
}
}  // namespace mxserve::grammar

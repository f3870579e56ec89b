// CompiledGrammar: a Grammar with its automaton and per-state token masks, shared by every
// sequence that uses it (front doors compile; the engine's matchers and mask thread use it).
// One mutex serializes the lazily built automaton and mask cache.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/grammar/grammar.h"
#include "coordinator/grammar/pushdown_automaton.h"
#include "coordinator/grammar/token_mask_cache.h"
#include "coordinator/grammar/vocab_trie.h"

namespace mxserve::grammar {

class CompiledGrammar {
 public:
  // `description` names the grammar in errors and logs ("json_schema", "regex"...).
  CompiledGrammar(std::unique_ptr<Grammar> grammar, std::string description);
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const std::string& description() const { return description_; }
  int32_t start() const { return start_; }
  // The state after `bytes` from `state`; PushdownAutomaton::kDead once a byte is refused.
  int32_t Advance(int32_t state, std::string_view bytes);
  bool accepting(int32_t state);
  bool can_continue(int32_t state);
  // The tokens allowed in `state` over `trie`'s vocabulary (one trie per grammar: the first
  // caller's; a later call with another trie is answered for that trie without caching).
  std::shared_ptr<const TokenBitmask> Mask(int32_t state, const VocabTrie& trie);
  int num_automaton_states();
  int num_cached_masks();

 private:
  const std::unique_ptr<Grammar> grammar_;
  const std::string description_;
  absl::Mutex mu_;
  PushdownAutomaton pda_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<TokenMaskCache> masks_ ABSL_GUARDED_BY(mu_);
  int32_t start_;
};

}  // namespace mxserve::grammar

// TokenMaskCache: which tokens may come next in an automaton state — a bitmask over the model's
// vocabulary from one walk of the vocabulary trie against the automaton (a dead byte prunes
// the token's whole subtree), the EOS ids added when the state accepts. Masks are kept per
// automaton state: states repeat (inside a string, between members), so most steps are a
// lookup. Not thread-safe: CompiledGrammar serializes access.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "coordinator/grammar/pushdown_automaton.h"
#include "coordinator/grammar/vocab_trie.h"

namespace mxserve::grammar {

// Bit t of word t / 64 set: token t is allowed.
struct TokenBitmask {
  std::vector<uint64_t> words;
  bool allowed(int32_t t) const { return (words[t >> 6] >> (t & 63)) & 1; }
  void allow(int32_t t) { words[t >> 6] |= uint64_t{1} << (t & 63); }
  bool any() const;
  int count() const;
};

class TokenMaskCache {
 public:
  explicit TokenMaskCache(const VocabTrie* trie) : trie_(trie) {}
  const VocabTrie* trie() const { return trie_; }
  std::shared_ptr<const TokenBitmask> Get(PushdownAutomaton& pda, int32_t state);
  int size() const { return static_cast<int>(cache_.size()); }

 private:
  std::shared_ptr<const TokenBitmask> Compute(PushdownAutomaton& pda, int32_t state);

  const VocabTrie* trie_;
  absl::flat_hash_map<int32_t, std::shared_ptr<const TokenBitmask>> cache_;
  std::vector<int32_t> stack_;  // automaton state per trie depth, reused across walks
};

}  // namespace mxserve::grammar

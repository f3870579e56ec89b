#include "coordinator/grammar/token_mask_cache.h"

#include <bit>

namespace mxserve::grammar {

bool TokenBitmask::any() const {
  for (uint64_t w : words) {
    if (w != 0) return true;
  }
  return false;
}

int TokenBitmask::count() const {
  int n = 0;
  for (uint64_t w : words) n += std::popcount(w);
  return n;
}

std::shared_ptr<const TokenBitmask> TokenMaskCache::Get(PushdownAutomaton& pda, int32_t state) {
  auto it = cache_.find(state);
  if (it != cache_.end()) return it->second;
  auto mask = Compute(pda, state);
  cache_.emplace(state, mask);
  return mask;
}

std::shared_ptr<const TokenBitmask> TokenMaskCache::Compute(PushdownAutomaton& pda,
                                                           int32_t state) {
  auto mask = std::make_shared<TokenBitmask>();
  mask->words.assign((trie_->mask_size() + 63) / 64, 0);
  if (state == PushdownAutomaton::kDead) return mask;
  if (pda.accepting(state)) {
    for (int32_t eos : trie_->eos_ids()) {
      if (eos >= 0 && eos < trie_->mask_size()) mask->allow(eos);
    }
  }
  if (!pda.can_continue(state)) return mask;
  stack_.assign(trie_->max_depth() + 1, PushdownAutomaton::kDead);
  stack_[0] = state;
  const int n = trie_->num_nodes();
  for (int i = 0; i < n;) {
    const int d = trie_->depth(i);
    const int32_t next = pda.Step(stack_[d - 1], trie_->byte(i));
    if (next == PushdownAutomaton::kDead) {
      i = trie_->subtree_end(i);
      continue;
    }
    stack_[d] = next;
    for (const int32_t* t = trie_->tokens_begin(i); t != trie_->tokens_end(i); ++t) mask->allow(*t);
    ++i;
  }
  return mask;
}

}  // namespace mxserve::grammar

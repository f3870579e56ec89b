// GrammarMasks: the token masks of a step's grammar-constrained chunks, computed on a worker
// thread while the forward pass runs (the matchers do not move until the step's tokens are
// appended, after the sampler). The vocabulary trie is built on first use.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "coordinator/engine/scheduler.h"
#include "coordinator/grammar/token_mask_cache.h"
#include "coordinator/grammar/vocab_trie.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

using TokenMasks = std::vector<std::shared_ptr<const grammar::TokenBitmask>>;

class GrammarMasks {
 public:
  // `tokenizer` (may be null: then no request has a grammar) must outlive this.
  GrammarMasks(const Tokenizer* tokenizer, int mask_size, std::vector<int32_t> eos_ids);
  ~GrammarMasks();

  // Starts computing masks for the chunks of `batch` that sample with a grammar; does nothing
  // (no thread) when there are none. `batch` must stay alive and unchanged until Wait.
  void Start(const ScheduledBatch& batch);
  // The masks Start computed, one per chunk (null: unconstrained); empty when none.
  TokenMasks Wait();

 private:
  TokenMasks Compute(const ScheduledBatch& batch);

  const Tokenizer* const tokenizer_;
  const int mask_size_;
  const std::vector<int32_t> eos_ids_;
  std::unique_ptr<grammar::VocabTrie> trie_;  // the worker's while a computation runs
  std::future<TokenMasks> pending_;
};

}  // namespace mxserve

#include "coordinator/engine/grammar_masks.h"

#include <utility>

#include "coordinator/engine/sequence.h"

namespace mxserve {

GrammarMasks::GrammarMasks(const Tokenizer* tokenizer, int mask_size,
                           std::vector<int32_t> eos_ids)
    : tokenizer_(tokenizer), mask_size_(mask_size), eos_ids_(std::move(eos_ids)) {}

GrammarMasks::~GrammarMasks() {
  if (pending_.valid()) pending_.wait();
}

void GrammarMasks::Start(const ScheduledBatch& batch) {
  bool any = false;
  for (const ScheduledChunk& c : batch.seqs) any = any || (c.sample && c.seq->matcher() != nullptr);
  if (!any || tokenizer_ == nullptr) return;
  pending_ = std::async(std::launch::async, [this, &batch] { return Compute(batch); });
}

TokenMasks GrammarMasks::Wait() {
  if (!pending_.valid()) return {};
  return pending_.get();
}

TokenMasks GrammarMasks::Compute(const ScheduledBatch& batch) {
  if (!trie_) trie_ = grammar::VocabTrie::Build(*tokenizer_, mask_size_, eos_ids_);
  TokenMasks masks(batch.seqs.size());
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const ScheduledChunk& c = batch.seqs[i];
    if (c.sample && c.seq->matcher() != nullptr) masks[i] = c.seq->matcher()->Mask(*trie_);
  }
  return masks;
}

}  // namespace mxserve

#include "coordinator/engine/scheduler.h"

#include <algorithm>
#include <utility>

namespace mxserve {

Scheduler::Scheduler(const SchedulerOptions& options, int num_blocks, int block_size,
                     std::vector<int32_t> eos_ids)
    : options_(options),
      eos_ids_(std::move(eos_ids)),
      blocks_(num_blocks, block_size, options.enable_prefix_caching) {}

void Scheduler::Add(std::shared_ptr<Sequence> seq) {
  seq->set_status(SequenceStatus::kWaiting);
  waiting_.push_back(std::move(seq));
}

bool Scheduler::IsScheduled(const Sequence* seq, const ScheduledBatch& batch) const {
  for (const ScheduledChunk& c : batch.seqs) {
    if (c.seq.get() == seq) return true;
  }
  return false;
}

void Scheduler::Preempt(size_t i) {
  std::shared_ptr<Sequence> seq = std::move(running_[i]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  blocks_.Free(&seq->block_table());
  // Recompute: prompt + output so far are prefilled again (but for what the cache still has).
  seq->set_num_computed_tokens(0);
  seq->set_num_cached_blocks(0);
  seq->set_status(SequenceStatus::kWaiting);
  seq->count_preemption();
  ++num_preemptions_;
  waiting_.push_front(std::move(seq));
}

bool Scheduler::ReserveBlocks(size_t i, int num_tokens, const ScheduledBatch& batch) {
  while (!blocks_.AppendSlot(&running_[i]->block_table(), num_tokens)) {
    // The newest running sequence that has no chunk in this step gives its blocks back.
    size_t victim = running_.size();
    for (size_t j = running_.size(); j-- > i + 1;) {
      if (!IsScheduled(running_[j].get(), batch)) {
        victim = j;
        break;
      }
    }
    if (victim == running_.size()) return false;
    Preempt(victim);
  }
  return true;
}

void Scheduler::AddChunk(const std::shared_ptr<Sequence>& seq, int num_tokens,
                         ScheduledBatch* batch) {
  const int start = seq->num_computed_tokens();
  SequenceChunk chunk;
  chunk.seq_id = seq->seq_id();
  chunk.tokens.assign(seq->tokens().begin() + start, seq->tokens().begin() + start + num_tokens);
  chunk.start_pos = start;
  chunk.block_table = seq->block_table();
  // Rows at prompt positions p < prompt_len - 1 carry the logprob of prompt token p + 1.
  chunk.all_logits = seq->WantsPromptLogprobs() && start < seq->num_prompt_tokens() - 1;
  const bool sample = start + num_tokens == seq->num_tokens();
  const SamplingParams& p = seq->params();
  // A grammar needs the logits: the token is chosen among the ones its mask allows.
  chunk.argmax_only = sample && !chunk.all_logits && p.temperature == 0 && p.logprobs < 0 &&
                      !p.ChangesGreedyChoice(seq->num_output_tokens()) && p.grammar == nullptr;
  if (num_tokens == 1 && sample) {
    ++batch->num_decode_chunks;
  } else {
    ++batch->num_prefill_chunks;
  }
  batch->num_batched_tokens += num_tokens;
  batch->forward.chunks.push_back(std::move(chunk));
  batch->seqs.push_back(ScheduledChunk{seq, sample});
}

ScheduledBatch Scheduler::Schedule() {
  ScheduledBatch batch;
  int budget = options_.max_num_batched_tokens;

  // 1. Every running sequence that is past its prefill gets its decode token.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    if (running_[i]->num_uncomputed_tokens() != 1) {
      ++i;
      continue;
    }
    const std::shared_ptr<Sequence> seq = running_[i];
    if (!ReserveBlocks(i, seq->num_tokens(), batch)) {
      Preempt(i);  // nothing newer left to evict: this one waits and recomputes later
      continue;
    }
    AddChunk(seq, 1, &batch);
    --budget;
    ++i;
  }

  // 2. Partially prefilled sequences continue, oldest first.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const std::shared_ptr<Sequence> seq = running_[i];
    if (seq->num_uncomputed_tokens() <= 1 || IsScheduled(seq.get(), batch)) continue;
    const int computed = seq->num_computed_tokens();
    if (!ReserveBlocks(i, computed + 1, batch)) continue;  // retried next step
    const int capacity =
        (static_cast<int>(seq->block_table().size()) + blocks_.num_free_blocks()) *
            blocks_.block_size() -
        computed;
    const int n = std::min({seq->num_uncomputed_tokens(), budget, capacity});
    if (!blocks_.AppendSlot(&seq->block_table(), computed + n)) continue;  // cannot happen
    AddChunk(seq, n, &batch);
    budget -= n;
  }

  // 3. Admit waiting sequences in arrival order while budget, seats and blocks last.
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < options_.max_num_seqs) {
    const int before = batch.num_batched_tokens;
    if (!Admit(budget, &batch)) break;  // FCFS: nobody overtakes the head of the queue
    budget -= batch.num_batched_tokens - before;
  }
  return batch;
}

void Scheduler::HashBlocks(Sequence* seq, int n) {
  std::vector<uint64_t>& keys = seq->block_hashes();
  const int bs = blocks_.block_size();
  for (int i = static_cast<int>(keys.size()); i < n; ++i) {
    const uint64_t parent = i == 0 ? BlockManager::kRootHash : keys[i - 1];
    keys.push_back(BlockManager::HashBlock(
        parent, std::span<const int32_t>(seq->tokens().data() + static_cast<size_t>(i) * bs, bs)));
  }
}

bool Scheduler::Admit(int budget, ScheduledBatch* batch) {
  const std::shared_ptr<Sequence> seq = waiting_.front();
  // A waiting sequence holds no blocks and has nothing computed (new, or preempted).
  std::vector<int32_t> hits;
  // Prompt logprobs need the logits of every prompt position: such a request computes them
  // all (as vLLM skips the cache for it); its blocks are still cached for others.
  if (blocks_.prefix_caching() && !seq->WantsPromptLogprobs()) {
    // At least the last token is computed: its logits pick the next token.
    const int max_blocks = (seq->num_tokens() - 1) / blocks_.block_size();
    HashBlocks(seq.get(), max_blocks);
    hits = blocks_.FindCached(std::span<const uint64_t>(seq->block_hashes().data(), max_blocks),
                              seq->tokens());
  }
  const int cached = static_cast<int>(hits.size()) * blocks_.block_size();
  const int n = std::min(seq->num_tokens() - cached, budget);
  const int need = blocks_.BlocksFor(cached + n) - static_cast<int>(hits.size());
  if (!blocks_.CanAllocate(need + blocks_.NumFree(hits))) return false;
  waiting_.pop_front();
  blocks_.Share(hits, &seq->block_table());
  blocks_.Allocate(need, &seq->block_table());
  seq->set_num_computed_tokens(cached);
  seq->set_num_cached_blocks(static_cast<int>(hits.size()));
  if (blocks_.prefix_caching()) {
    prefix_cache_queries_ += seq->num_tokens();
    prefix_cache_hits_ += cached;
  }
  seq->set_status(SequenceStatus::kRunning);
  running_.push_back(seq);
  AddChunk(seq, n, batch);
  return true;
}

void Scheduler::CacheComputedBlocks(Sequence* seq) {
  if (!blocks_.prefix_caching()) return;
  const int bs = blocks_.block_size();
  const int full = std::min(seq->num_computed_tokens() / bs,
                            static_cast<int>(seq->block_table().size()));
  if (full <= seq->num_cached_blocks()) return;
  HashBlocks(seq, full);
  for (int i = seq->num_cached_blocks(); i < full; ++i) {
    blocks_.Register(seq->block_table()[i], seq->block_hashes()[i],
                     std::span<const int32_t>(seq->tokens().data() + static_cast<size_t>(i) * bs,
                                              bs));
  }
  seq->set_num_cached_blocks(full);
}

void Scheduler::RemoveRunning(const Sequence* seq) {
  auto it = std::find_if(running_.begin(), running_.end(),
                         [seq](const std::shared_ptr<Sequence>& s) { return s.get() == seq; });
  if (it != running_.end()) running_.erase(it);
}

std::vector<StepOutput> Scheduler::Postprocess(const ScheduledBatch& batch,
                                               const std::vector<SampledChunk>& sampled) {
  std::vector<StepOutput> out;
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    const std::shared_ptr<Sequence>& seq = batch.seqs[i].seq;
    if (seq->finished()) continue;
    const SequenceChunk& chunk = batch.forward.chunks[i];
    seq->set_num_computed_tokens(chunk.start_pos + static_cast<int>(chunk.tokens.size()));
    CacheComputedBlocks(seq.get());  // only now: this step's KV exists once the step succeeded
    for (const TokenLogprob& lp : sampled[i].prompt_logprobs) seq->AddPromptLogprob(lp);
    if (!batch.seqs[i].sample) continue;
    GenerationEvent ev = seq->AppendToken(sampled[i].token, sampled[i].logprob, eos_ids_,
                                          options_.max_model_len);
    if (ev.finished) {
      RemoveRunning(seq.get());
      blocks_.Free(&seq->block_table());
    }
    out.push_back(StepOutput{seq, std::move(ev)});
  }
  return out;
}

StepOutput Scheduler::FinishExternally(std::shared_ptr<Sequence> seq, FinishReason reason,
                                       absl::Status error) {
  blocks_.Free(&seq->block_table());
  GenerationEvent ev = seq->Finish(reason, std::move(error));
  return StepOutput{std::move(seq), std::move(ev)};
}

std::vector<StepOutput> Scheduler::FailBatch(const ScheduledBatch& batch,
                                             const absl::Status& error) {
  std::vector<StepOutput> out;
  for (const ScheduledChunk& c : batch.seqs) {
    if (c.seq->finished()) continue;
    RemoveRunning(c.seq.get());
    out.push_back(FinishExternally(c.seq, FinishReason::kError, error));
  }
  return out;
}

std::optional<StepOutput> Scheduler::Abort(const std::string& request_id) {
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i]->request_id() == request_id) {
      std::shared_ptr<Sequence> seq = std::move(running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      return FinishExternally(std::move(seq), FinishReason::kAbort, absl::OkStatus());
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->request_id() == request_id) {
      std::shared_ptr<Sequence> seq = std::move(*it);
      waiting_.erase(it);
      return FinishExternally(std::move(seq), FinishReason::kAbort, absl::OkStatus());
    }
  }
  return std::nullopt;
}

std::vector<StepOutput> Scheduler::AbortAll() {
  std::vector<StepOutput> out;
  for (std::shared_ptr<Sequence>& seq : running_) {
    out.push_back(FinishExternally(std::move(seq), FinishReason::kAbort, absl::OkStatus()));
  }
  running_.clear();
  for (std::shared_ptr<Sequence>& seq : waiting_) {
    out.push_back(FinishExternally(std::move(seq), FinishReason::kAbort, absl::OkStatus()));
  }
  waiting_.clear();
  return out;
}

}  // namespace mxserve

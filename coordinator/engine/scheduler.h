// Scheduler: continuous batching. Each step it picks which sequence chunks run — every running
// sequence's decode token first, then chunked prefill of partially-prefilled and newly admitted
// (FCFS) sequences within the per-step token budget — hands out KV blocks, preempts the newest
// running sequence when blocks run out (recompute later), and afterwards applies the sampled
// tokens (stop rules, finishing, freeing).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/engine/block_manager.h"
#include "coordinator/engine/model_runner.h"
#include "coordinator/engine/request.h"
#include "coordinator/engine/sequence.h"

namespace mxserve {

struct SchedulerOptions {
  int max_num_seqs = 256;             // running sequences at once
  int max_num_batched_tokens = 8192;  // tokens per step (decode + prefill chunks)
  int max_model_len = 0;              // prompt + output; 0 = the runner's (and the KV pool's)
  int max_waiting = 1024;             // queued requests before Submit says ResourceExhausted
  // Automatic prefix caching: a sequence starts its prefill after the longest run of full KV
  // blocks already computed for the same leading tokens (--enable-prefix-caching).
  bool enable_prefix_caching = true;
};

struct ScheduledChunk {
  std::shared_ptr<Sequence> seq;
  bool sample = false;  // the chunk reaches the end of the known tokens: it yields a new token
};

// One step's work: forward.chunks[i] belongs to seqs[i].
struct ScheduledBatch {
  ForwardBatch forward;
  std::vector<ScheduledChunk> seqs;
  int num_batched_tokens = 0;
  int num_prefill_chunks = 0;
  int num_decode_chunks = 0;
  bool empty() const { return seqs.empty(); }
};

// What the sampler produced for chunk i of a batch.
struct SampledChunk {
  int32_t token = -1;                          // -1 when the chunk does not sample
  std::optional<TokenLogprob> logprob;         // when the request asked for logprobs
  std::vector<TokenLogprob> prompt_logprobs;   // next entries of the request's prompt logprobs
};

// An event to deliver, and to whom.
struct StepOutput {
  std::shared_ptr<Sequence> seq;
  GenerationEvent event;
};

class Scheduler {
 public:
  // `max_model_len` in options must already be resolved by the caller: > 0 and at most
  // num_blocks * block_size, so that one sequence alone always fits (Engine::Create does this).
  Scheduler(const SchedulerOptions& options, int num_blocks, int block_size,
            std::vector<int32_t> eos_ids);

  const SchedulerOptions& options() const { return options_; }
  void Add(std::shared_ptr<Sequence> seq);
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }

  ScheduledBatch Schedule();
  // Applies one step's sampled tokens; returns the events to stream (finished ones included,
  // already removed and their blocks freed).
  std::vector<StepOutput> Postprocess(const ScheduledBatch& batch,
                                      const std::vector<SampledChunk>& sampled);
  // The step failed: every sequence in it ends with kError.
  std::vector<StepOutput> FailBatch(const ScheduledBatch& batch, const absl::Status& error);
  // Removes the request (waiting or running) with a final kAbort event; nullopt if unknown.
  std::optional<StepOutput> Abort(const std::string& request_id);
  std::vector<StepOutput> AbortAll();

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // As vLLM's prefix cache counters: tokens of admitted sequences looked up in the cache, and
  // those found (admissions after a preemption count again).
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }
  const BlockManager& block_manager() const { return blocks_; }

 private:
  // Makes running_[i]'s block table cover `num_tokens` positions, preempting newer running
  // sequences that have no chunk in this step yet. False when that is not enough.
  bool ReserveBlocks(size_t i, int num_tokens, const ScheduledBatch& batch);
  void Preempt(size_t i);
  // Admits the head of the waiting queue with at most `budget` new tokens, taking its cached
  // prefix blocks first. False (nothing changed) when the blocks do not fit.
  bool Admit(int budget, ScheduledBatch* batch);
  // The keys of seq's first `n` full blocks (extends seq->block_hashes()).
  void HashBlocks(Sequence* seq, int n);
  // Registers the blocks that became full and computed.
  void CacheComputedBlocks(Sequence* seq);
  void AddChunk(const std::shared_ptr<Sequence>& seq, int num_tokens, ScheduledBatch* batch);
  void RemoveRunning(const Sequence* seq);
  bool IsScheduled(const Sequence* seq, const ScheduledBatch& batch) const;
  StepOutput FinishExternally(std::shared_ptr<Sequence> seq, FinishReason reason,
                              absl::Status error);

  const SchedulerOptions options_;
  const std::vector<int32_t> eos_ids_;
  BlockManager blocks_;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::vector<std::shared_ptr<Sequence>> running_;  // in admission order; newest last
  int64_t num_preemptions_ = 0;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
};

}  // namespace mxserve

// Sequence: one request's state inside the engine — its tokens (prompt + output), how many of
// them have KV in the cache, its KV block table, its RNG, and the streaming state that turns new
// tokens into GenerationEvents (incremental detokenizing, stop strings held back until resolved).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/engine/request.h"
#include "coordinator/grammar/grammar_matcher.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

// Each bad word as the token sequences it may be written with (vLLM's bad_words).
std::vector<std::vector<int32_t>> BadWordsTokenIds(const std::vector<std::string>& words,
                                                   const Tokenizer& tok);

enum class SequenceStatus { kWaiting, kRunning, kFinished };

class Sequence {
 public:
  // `tok` may be null (then no text is produced; stop strings and bad words are not allowed:
  // the engine rejects them before a Sequence is made).
  Sequence(int64_t seq_id, GenerateRequest request, EventCallback callback, const Tokenizer* tok);
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  int64_t seq_id() const { return seq_id_; }
  const std::string& request_id() const { return request_id_; }
  const SamplingParams& params() const { return params_; }
  const EventCallback& callback() const { return callback_; }

  const std::vector<int32_t>& tokens() const { return tokens_; }
  int num_tokens() const { return static_cast<int>(tokens_.size()); }
  int num_prompt_tokens() const { return num_prompt_tokens_; }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }

  // Tokens whose KV is in the cache. Chunked prefill advances it by chunks; preemption resets it
  // to 0 (recompute: the prompt and the output so far are prefilled again).
  int num_computed_tokens() const { return num_computed_tokens_; }
  void set_num_computed_tokens(int n) { num_computed_tokens_ = n; }
  int num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens_; }

  std::vector<int32_t>& block_table() { return block_table_; }
  const std::vector<int32_t>& block_table() const { return block_table_; }

  SequenceStatus status() const { return status_; }
  void set_status(SequenceStatus s) { status_ = s; }
  bool finished() const { return status_ == SequenceStatus::kFinished; }
  int num_preemptions() const { return num_preemptions_; }
  void count_preemption() { ++num_preemptions_; }

  std::mt19937_64& rng() { return rng_; }
  // Where the output is in the request's grammar; null without one.
  const grammar::GrammarMatcher* matcher() const {
    return matcher_.has_value() ? &*matcher_ : nullptr;
  }

  // Prefix caching: keys of the sequence's full blocks of tokens (a hash chain; a pure function
  // of the tokens, so it survives preemption), and how many of block_table() are registered in
  // (or were taken from) the cache.
  std::vector<uint64_t>& block_hashes() { return block_hashes_; }
  int num_cached_blocks() const { return num_cached_blocks_; }
  void set_num_cached_blocks(int n) { num_cached_blocks_ = n; }

  // Sampling state: how often each token appears in the output (penalties), the distinct prompt
  // tokens (repetition_penalty only; else empty), the bad words as token ids.
  const absl::flat_hash_map<int32_t, int>& output_counts() const { return output_counts_; }
  const std::vector<int32_t>& prompt_token_set() const { return prompt_token_set_; }
  const std::vector<std::vector<int32_t>>& bad_words_ids() const { return bad_words_ids_; }

  // Prompt logprobs: position p's entry (p >= 1) comes from the logits row at p - 1. Recorded
  // once; a recompute after preemption does not record them again.
  bool WantsPromptLogprobs() const;
  int num_prompt_logprobs() const { return static_cast<int>(prompt_logprobs_.size()); }
  // `entry` is the logprob of prompt token at position num_prompt_logprobs().
  void AddPromptLogprob(TokenLogprob entry) { prompt_logprobs_.push_back(std::move(entry)); }

  // Appends one sampled token and checks every stop rule (eos_ids unless ignore_eos,
  // stop_token_ids, stop strings, max_tokens, max_model_len, a grammar that is complete with
  // nothing more allowed; a token the grammar refuses ends it with kError). Returns the event to stream: the
  // token, the text that is now safe to show, and, when it finished, the final fields.
  GenerationEvent AppendToken(int32_t token, std::optional<TokenLogprob> logprob,
                              const std::vector<int32_t>& eos_ids, int max_model_len);

  // Ends the sequence from outside (cancel, shutdown, runner error) and returns the final event.
  // Text that was held back is dropped: an aborted stream is incomplete anyway.
  GenerationEvent Finish(FinishReason reason, absl::Status error = absl::OkStatus());

  FinishReason finish_reason() const { return finish_reason_; }
  const std::string& output_text() const { return text_; }  // after any stop-string cut

  absl::Time arrival_time() const { return arrival_time_; }
  std::optional<absl::Time> first_token_time() const { return first_token_time_; }
  std::optional<absl::Time> finish_time() const { return finish_time_; }

 private:
  // Text from one token, never splitting a UTF-8 character.
  std::string DetokenizeNext(int32_t token);
  std::string FlushDetokenizer();
  // Looks for a stop string that ends in text appended since `old_size`; cuts the text there.
  bool MatchStopString(size_t old_size);
  // Bytes at the end of text_ that might begin a stop string (not yet safe to emit).
  size_t HeldBackBytes() const;
  void FillFinal(GenerationEvent* ev, FinishReason reason);

  const int64_t seq_id_;
  const std::string request_id_;
  const SamplingParams params_;
  const EventCallback callback_;
  const Tokenizer* const tok_;

  std::vector<int32_t> tokens_;
  const int num_prompt_tokens_;
  int num_computed_tokens_ = 0;
  std::vector<int32_t> block_table_;
  std::vector<uint64_t> block_hashes_;
  int num_cached_blocks_ = 0;
  absl::flat_hash_map<int32_t, int> output_counts_;
  std::vector<int32_t> prompt_token_set_;    // sorted, distinct
  std::vector<std::vector<int32_t>> bad_words_ids_;
  SequenceStatus status_ = SequenceStatus::kWaiting;
  int num_preemptions_ = 0;
  std::mt19937_64 rng_;

  std::vector<TokenLogprob> prompt_logprobs_;
  bool prompt_logprobs_sent_ = false;

  std::optional<IncrementalDetokenizer> detok_;  // absent without a tokenizer
  std::optional<grammar::GrammarMatcher> matcher_;  // present with a grammar
  std::string text_;          // generated text so far (cut at a matched stop string)
  size_t emitted_bytes_ = 0;  // prefix of text_ already streamed
  size_t max_stop_len_ = 0;
  std::string matched_stop_;
  FinishReason finish_reason_ = FinishReason::kNone;

  absl::Time arrival_time_;
  std::optional<absl::Time> first_token_time_;
  std::optional<absl::Time> finish_time_;
};

}  // namespace mxserve

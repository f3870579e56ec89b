// Sampler: turns a step's logits rows into tokens — after bad words, min_tokens, logit bias
// and penalties, greedy at temperature 0, otherwise temperature / min-p / top-k / top-p sampling with each sequence's own RNG, so a seeded
// request gets the same tokens whatever else shares its batch — plus the logprobs requested
// (log_softmax of the raw logits, as vLLM reports by default).
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine/model_runner.h"
#include "coordinator/engine/request.h"
#include "coordinator/engine/scheduler.h"
#include "coordinator/grammar/token_mask_cache.h"

namespace mxserve {

class Sampler {
 public:
  // `eos_ids`: the model's end-of-sequence ids, masked (with stop_token_ids) before min_tokens.
  explicit Sampler(std::vector<int32_t> eos_ids = {}) : eos_ids_(std::move(eos_ids)) {}

  // One SampledChunk per chunk of `batch`. Error when `out` does not have the rows the batch
  // needs (a runner bug; the engine fails that step's requests).
  // masks[i] (when present and non-null) limits chunk i's token to the ones it allows (the
  // others' logits count as -inf; logprobs stay those of the raw logits).
  absl::StatusOr<std::vector<SampledChunk>> Sample(
      const ScheduledBatch& batch, const ForwardOutput& out,
      std::span<const std::shared_ptr<const grammar::TokenBitmask>> masks = {}) const;

  // Building blocks, public for tests.
  // The tokens of a batch whose runner answered with argmax ids (every chunk argmax_only).
  static absl::StatusOr<std::vector<SampledChunk>> FromArgmax(const ScheduledBatch& batch,
                                                             const ForwardOutput& out);
  // Lowest id among the largest logits.
  static int32_t Argmax(std::span<const float> logits);
  // The distribution actually sampled from after temperature, top_k and top_p: (id, prob)
  // pairs with probabilities summing to 1, sorted by probability descending (ties: lower id).
  static std::vector<std::pair<int32_t, double>> FilteredDistribution(
      std::span<const float> logits, const SamplingParams& params);
  static int32_t SampleRow(std::span<const float> logits, const SamplingParams& params,
                           std::mt19937_64& rng);
  // Whether ProcessLogits would change anything for `seq` now.
  static bool NeedsProcessing(const Sequence& seq);
  // vLLM's logits processing before sampling, in its order: bad words, min_tokens (EOS unless
  // ignore_eos, and stop_token_ids, to -inf), logit_bias, then repetition, frequency and
  // presence penalties. Touches only the tokens concerned.
  static void ProcessLogits(std::span<float> logits, const Sequence& seq,
                            const std::vector<int32_t>& eos_ids);
  // log_softmax(logits)[token] and the `top_n` most likely tokens (ties: lower id first).
  static TokenLogprob Logprob(std::span<const float> logits, int32_t token, int top_n);
  // `logits` with the tokens `mask` refuses at -inf; unchanged when it allows none (the
  // sequence then ends with an error when the token reaches its grammar).
  static std::vector<float> ApplyMask(std::span<const float> logits,
                                      const grammar::TokenBitmask& mask);

 private:
  const std::vector<int32_t> eos_ids_;
};

}  // namespace mxserve

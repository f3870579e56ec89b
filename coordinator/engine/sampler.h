// Sampler: turns a step's logits rows into tokens — greedy at temperature 0, otherwise
// temperature / top-k / top-p (nucleus) sampling with each sequence's own RNG, so a seeded
// request gets the same tokens whatever else shares its batch — plus the logprobs requested
// (log_softmax of the raw logits, as vLLM reports by default).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine/model_runner.h"
#include "coordinator/engine/request.h"
#include "coordinator/engine/scheduler.h"

namespace mxserve {

class Sampler {
 public:
  // One SampledChunk per chunk of `batch`. Error when `out` does not have the rows the batch
  // needs (a runner bug; the engine fails that step's requests).
  absl::StatusOr<std::vector<SampledChunk>> Sample(const ScheduledBatch& batch,
                                                   const ForwardOutput& out) const;

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
  // log_softmax(logits)[token] and the `top_n` most likely tokens (ties: lower id first).
  static TokenLogprob Logprob(std::span<const float> logits, int32_t token, int top_n);
};

}  // namespace mxserve

// What a front door hands the engine, and what the engine streams back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace mxserve {

namespace grammar {
class CompiledGrammar;
}  // namespace grammar

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy (deterministic)
  float top_p = 1.0f;              // (0, 1]
  int top_k = 0;                   // 0 = off
  std::optional<uint64_t> seed;    // reproducible sampling when set
  int max_tokens = 16;             // >= 1, already bounded by the context by the front door
  std::vector<std::string> stop;   // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  bool ignore_eos = false;
  int logprobs = -1;               // -1 = none; 0..20 = sampled token's logprob + this many top
  int prompt_logprobs = -1;        // -1 = none; else as logprobs, for every prompt token (echo)
  // vLLM's semantics (vllm/v1/sample): applied to the raw logits in this order — bad_words,
  // min_tokens, logit_bias, then repetition, frequency and presence penalties — before greedy
  // or random sampling; logprobs stay those of the raw logits.
  float presence_penalty = 0;      // [-2, 2]: minus this for every token already in the output
  float frequency_penalty = 0;     // [-2, 2]: minus this times the token's count in the output
  float repetition_penalty = 1;    // (0, 2]: tokens in prompt or output: positive logits divided
                                   // by it, negative ones multiplied
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the token's logit
  float min_p = 0;                 // [0, 1]: drop tokens below min_p times the top probability
  int min_tokens = 0;              // no EOS / stop token / stop string before this many tokens
  std::vector<std::string> bad_words;  // never completed: the last token of each is banned
                                       // when the output ends with the ones before it
  bool skip_special_tokens = true; // output text leaves special tokens out
  bool include_stop_str_in_output = false;  // the matched stop string (or token) stays in text

  // Whether some field may change which token is the argmax of the raw logits (then a runner
  // must return logits rows, not argmax ids). `num_output_tokens` so far (min_tokens).
  bool ChangesGreedyChoice(int num_output_tokens) const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1 ||
           !logit_bias.empty() || !bad_words.empty() || num_output_tokens < min_tokens;
  }
  // Structured output: every sampled token keeps the output a prefix of the grammar's
  // language; EOS only once it is complete; generation ends when nothing more may follow.
  std::shared_ptr<grammar::CompiledGrammar> grammar;
};

struct GenerateRequest {
  std::string request_id;
  std::vector<int32_t> prompt_tokens;  // non-empty
  SamplingParams params;
};

struct TopLogprob {
  int32_t token_id = 0;
  float logprob = 0;
};
struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0;               // NaN for the first prompt token (no context)
  std::vector<TopLogprob> top;     // sorted by logprob, descending
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
// "stop", "length", "abort", "error"; "none" while running. Metrics label values and (but for
// kNone) the OpenAI finish_reason strings.
constexpr const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

// One streamed event. Tokens, text and logprobs are deltas since the previous event.
struct GenerationEvent {
  std::vector<int32_t> token_ids;
  std::string text;                      // complete UTF-8 only; stop strings are cut off
  std::vector<TokenLogprob> logprobs;    // one per token id when requested
  std::vector<TokenLogprob> prompt_logprobs;  // on the first event only, when requested
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;               // the stop string or token that matched, if any
  int prompt_tokens = 0;                 // set on the final event
  int completion_tokens = 0;             // set on the final event
  absl::Status error;                    // set when finish_reason == kError
};

// Called on the engine thread; must return quickly and not block (queue the work elsewhere).
// After an event with finished == true it is never called again.
using EventCallback = std::function<void(GenerationEvent)>;

// What front doors submit to (implemented by Engine; faked in front-door tests).
class GenerationService {
 public:
  virtual ~GenerationService() = default;
  // Non-OK = rejected before it started (InvalidArgument: bad request; ResourceExhausted: queue
  // full; Unavailable: draining/not ready). OK = callback will be called until finished.
  virtual absl::Status Submit(GenerateRequest request, EventCallback callback) = 0;
  // Stops a request (client went away); its callback gets a final kAbort event. Unknown id: no-op.
  virtual void Cancel(const std::string& request_id) = 0;
};

}  // namespace mxserve

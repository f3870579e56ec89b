// What the engine reports as it runs, for metrics (coordinator/observability implements it):
// one call per step, per request's first token, per later batch of tokens, per finished request.
// Called on the engine's loop thread (or the thread calling Step/Shutdown): keep it quick.
#pragma once

#include <cstdint>

#include "absl/time/time.h"
#include "coordinator/engine/request.h"

namespace mxserve {

struct StepRecord {
  absl::Duration duration;     // schedule → run → sample → postprocess → events handed out
  int num_tokens = 0;          // tokens the batch ran (prefill chunks + decode tokens)
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
  int num_seqs = 0;
  bool ok = true;              // false: the step failed and its requests ended with an error
};

struct FinishedRequest {
  FinishReason reason = FinishReason::kNone;
  int prompt_tokens = 0;
  int generation_tokens = 0;
  absl::Duration e2e;          // Submit → final event
  bool had_first_token = false;
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;
  virtual void OnStep(const StepRecord& step) = 0;
  // A request's first output token: time since Submit (TTFT), and its prompt length.
  virtual void OnFirstToken(absl::Duration ttft, int prompt_tokens) = 0;
  // `n` more output tokens arrived `since_previous` after the request's previous ones (each of
  // the n counts as one inter-token interval of since_previous / n).
  virtual void OnNextTokens(int n, absl::Duration since_previous) = 0;
  virtual void OnRequestFinished(const FinishedRequest& request) = 0;
  // Submit refused a valid request: "draining" (StopAccepting) or "queue_full" (max_waiting).
  // Called on the submitting thread.
  virtual void OnRejected(const char* reason) {}
};

}  // namespace mxserve

// Engine: the GenerationService front doors submit to. Owns the Scheduler and a loop thread
// that runs Step() — schedule → run → sample → postprocess → stream events — while there is
// work, and sleeps on a condition variable when there is none.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "coordinator/engine/engine_observer.h"
#include "coordinator/engine/grammar_masks.h"
#include "coordinator/engine/model_runner.h"
#include "coordinator/engine/request.h"
#include "coordinator/engine/sampler.h"
#include "coordinator/engine/scheduler.h"
#include "coordinator/engine/sequence.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

struct EngineOptions {
  SchedulerOptions scheduler;
  // false: no loop thread; the owner calls Step() itself (deterministic tests, tools).
  bool start_loop = true;
  // Called on the loop thread at every iteration, and at least every `tick_interval` while idle
  // (systemd's WATCHDOG=1 comes from here: a loop that is stuck stops calling it).
  std::function<void()> on_loop_tick;
  absl::Duration tick_interval = absl::InfiniteDuration();
  // Not owned; outlives the engine. Null = no per-request/per-step timings.
  EngineObserver* observer = nullptr;
};

// A snapshot for /metrics.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;          // in the scheduler's queue plus submitted, not yet picked up
  int64_t num_steps = 0;        // steps that ran a batch
  int64_t num_preemptions = 0;
  int64_t num_generated_tokens = 0;
  int64_t num_prompt_tokens_computed = 0;  // prefill tokens run (recomputes included)
  int64_t num_failed_steps = 0;
  int64_t prefix_cache_queries = 0;  // tokens looked up in the prefix cache at admission
  int64_t prefix_cache_hits = 0;     // of those, tokens found cached (not computed again)
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  int max_model_len = 0;
  // Progress, for health checks ("is the scheduler stepping?").
  bool in_step = false;             // a batch is running now
  absl::Time step_started;          // when the current (or last) batch started
  absl::Time last_progress;         // last step finished, or work arrived at an idle engine
  absl::Time loop_heartbeat;        // the loop thread's last iteration (ticks while idle)
  bool accepting = true;            // false after StopAccepting
};

class Engine : public GenerationService {
 public:
  // `runner` and `tokenizer` must outlive the engine; `tokenizer` may be null (no text, no stop
  // strings). `eos_ids` end generation unless a request sets ignore_eos.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(EngineOptions options,
                                                        ModelRunner* runner,
                                                        const Tokenizer* tokenizer,
                                                        std::vector<int32_t> eos_ids);
  ~Engine() override;

  absl::Status Submit(GenerateRequest request, EventCallback callback) override;
  void Cancel(const std::string& request_id) override;

  // One iteration: picks up submissions and cancels, then runs one batch. Returns whether
  // there was anything to run. Called by the loop thread, or by the owner when start_loop is
  // false (never both).
  bool Step();

  // Stops the loop, then aborts everything pending (final kAbort events, delivered on the
  // caller's thread). Submit afterwards returns Unavailable. Idempotent; the destructor calls
  // it. Not from inside an EventCallback (it joins the thread that runs them).
  void Shutdown();

  EngineStats stats() const;
  // Drain: from now on Submit returns Unavailable(reason); requests already in keep running.
  void StopAccepting(std::string reason);
  // Ends every pending request with kError carrying `error` (drain grace expired). Applied by
  // the loop thread at its next iteration (after the step now running, if any).
  void FailAll(absl::Status error);
  // Requests submitted and not yet finished (inbox, waiting and running).
  bool HasPendingRequests() const;
  int max_model_len() const { return max_model_len_; }

 private:
  Engine(EngineOptions options, ModelRunner* runner, const Tokenizer* tokenizer,
         std::vector<int32_t> eos_ids, int max_model_len);
  absl::Status Validate(const GenerateRequest& request) const;
  absl::Status ValidateLogitsParams(const SamplingParams& params) const;
  void Loop();
  // Moves new submissions into the scheduler and applies cancels (loop thread only).
  void DrainInbox();
  void Emit(std::vector<StepOutput> outputs);
  void Observe(const Sequence& seq, const GenerationEvent& ev, absl::Time now);
  void UpdateStats(const ScheduledBatch* batch, bool ok);
  absl::StatusOr<ForwardOutput> RunBatch(const ForwardBatch& batch);

  const EngineOptions options_;
  ModelRunner* const runner_;
  const Tokenizer* const tokenizer_;
  const int max_model_len_;
  const int vocab_size_;

  // Only the thread running Step() touches these.
  Scheduler scheduler_;
  Sampler sampler_;
  GrammarMasks grammar_masks_;

  mutable absl::Mutex mu_;
  absl::CondVar work_cv_;
  std::deque<std::shared_ptr<Sequence>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> cancels_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> live_ids_ ABSL_GUARDED_BY(mu_);  // submitted and not yet finished
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string not_accepting_ ABSL_GUARDED_BY(mu_);  // non-empty: StopAccepting reason
  absl::Status fail_all_ ABSL_GUARDED_BY(mu_);      // non-OK: FailAll pending
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;        // submitted, final event not yet emitted
  bool scheduler_busy_ ABSL_GUARDED_BY(mu_) = false;     // the scheduler still has work
  int64_t next_seq_id_ ABSL_GUARDED_BY(mu_) = 1;
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  // Loop thread only: when each request last received tokens (for inter-token latency).
  absl::flat_hash_map<int64_t, absl::Time> last_token_at_;
  std::thread loop_;
  absl::Mutex shutdown_mu_;
  bool joined_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace mxserve

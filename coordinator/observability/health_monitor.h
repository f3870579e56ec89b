// The coordinator's health in three levels that do not lie:
//   liveness  - the process answers (the HTTP/gRPC threads serve the probe themselves);
//   readiness - serving (loaded, not draining), every expert has a healthy host, and the
//               scheduler loop is running;
//   progress  - while requests are in flight, a step completed within progress_timeout.
// Check() turns a snapshot of those inputs into a report (ready or not, and why, as JSON) and
// logs every change, naming what is stuck. Time comes from a clock function (fake in tests).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace mxserve {

enum class ServingPhase { kStarting, kServing, kDraining, kStopped };
const char* ServingPhaseName(ServingPhase p);

// What readiness is computed from; gathered fresh for every Check().
struct HealthInputs {
  // Engine (EngineStats).
  int running = 0;
  int waiting = 0;
  bool in_step = false;
  absl::Time step_started = absl::InfinitePast();
  absl::Time last_progress = absl::InfinitePast();  // last step done, or work arrived at idle
  absl::Time loop_heartbeat = absl::InfinitePast();
  // Experts: false when some expert has no healthy host; the reason names them and why.
  bool experts_served = true;
  std::string experts_reason;
};

struct HealthReport {
  bool ready = false;
  ServingPhase phase = ServingPhase::kStarting;
  std::vector<std::string> reasons;  // empty when ready
  bool stalled = false;              // the progress rule failed
  std::string Json() const;          // {"status":"ready"|"not ready","phase":...,"reasons":[...]}
};

struct HealthMonitorOptions {
  // Requests in flight and no step completed for this long: not ready ("stuck").
  absl::Duration progress_timeout = absl::Seconds(30);
  // Idle, and the loop thread has not iterated for this long: not ready. It wakes at least
  // every EngineOptions::tick_interval, so this must be well above that.
  absl::Duration loop_timeout = absl::Seconds(30);
  // While not ready for the same reasons, repeat the log line this often.
  absl::Duration relog_every = absl::Seconds(10);
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  std::function<void(const std::string&)> log;  // one line per call; empty = stderr
};

class HealthMonitor {
 public:
  // `inputs` is called on every Check(); `describe_activity` (may be empty) says what the
  // running step is doing, e.g. "in layer 3 expert call to worker 1 (127.0.0.1:4567, up)".
  HealthMonitor(HealthMonitorOptions options, std::function<HealthInputs()> inputs,
                std::function<std::string()> describe_activity = nullptr);

  void SetPhase(ServingPhase phase) ABSL_LOCKS_EXCLUDED(mu_);
  ServingPhase phase() const ABSL_LOCKS_EXCLUDED(mu_);
  // Thread-safe; logs when readiness or its reasons change.
  HealthReport Check() ABSL_LOCKS_EXCLUDED(mu_);
  // The pure rule, without logging: what Check() reports for these inputs at `now`.
  static HealthReport Evaluate(ServingPhase phase, const HealthInputs& in, absl::Time now,
                               const HealthMonitorOptions& options,
                               const std::function<std::string()>& describe_activity);

 private:
  void Log(const std::string& line) const;
  const HealthMonitorOptions options_;
  const std::function<HealthInputs()> inputs_;
  const std::function<std::string()> describe_;
  mutable absl::Mutex mu_;
  ServingPhase phase_ ABSL_GUARDED_BY(mu_) = ServingPhase::kStarting;
  int last_ready_ ABSL_GUARDED_BY(mu_) = -1;
  std::string last_key_ ABSL_GUARDED_BY(mu_);  // reasons, without the changing numbers
  absl::Time last_log_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace mxserve

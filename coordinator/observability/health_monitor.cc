#include "coordinator/observability/health_monitor.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace mxserve {

const char* ServingPhaseName(ServingPhase p) {
  switch (p) {
    case ServingPhase::kStarting: return "starting";
    case ServingPhase::kServing: return "serving";
    case ServingPhase::kDraining: return "draining";
    case ServingPhase::kStopped: return "stopped";
  }
  return "unknown";
}

std::string HealthReport::Json() const {
  nlohmann::json j = {{"status", ready ? "ready" : "not ready"},
                      {"phase", ServingPhaseName(phase)},
                      {"reasons", reasons}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {
std::string Secs(absl::Duration d) { return absl::StrFormat("%.1f s", absl::ToDoubleSeconds(d)); }
std::string Clock(absl::Time t) {
  return absl::FormatTime("%H:%M:%E3S UTC", t, absl::UTCTimeZone());
}
}  // namespace

HealthMonitor::HealthMonitor(HealthMonitorOptions options, std::function<HealthInputs()> inputs,
                             std::function<std::string()> describe_activity)
    : options_(std::move(options)), inputs_(std::move(inputs)), describe_(std::move(describe_activity)) {}

void HealthMonitor::SetPhase(ServingPhase phase) {
  absl::MutexLock l(&mu_);
  phase_ = phase;
}

ServingPhase HealthMonitor::phase() const {
  absl::MutexLock l(&mu_);
  return phase_;
}

HealthReport HealthMonitor::Evaluate(ServingPhase phase, const HealthInputs& in, absl::Time now,
                                     const HealthMonitorOptions& options,
                                     const std::function<std::string()>& describe) {
  HealthReport r;
  r.phase = phase;
  switch (phase) {
    case ServingPhase::kStarting:
      r.reasons.push_back("starting: the model and workers are still loading");
      break;
    case ServingPhase::kDraining:
      r.reasons.push_back("draining: shutting down, new requests are refused");
      break;
    case ServingPhase::kStopped:
      r.reasons.push_back("stopped");
      break;
    case ServingPhase::kServing:
      break;
  }
  if (!in.experts_served) {
    r.reasons.push_back(in.experts_reason.empty() ? "some experts have no healthy worker"
                                                  : in.experts_reason);
  }
  const bool busy = in.running + in.waiting > 0;
  if (phase != ServingPhase::kStarting && busy && now - in.last_progress > options.progress_timeout) {
    r.stalled = true;
    std::string what = absl::StrCat("no step completed for ", Secs(now - in.last_progress), " with ",
                                    in.running, " running request", in.running == 1 ? "" : "s",
                                    " (", in.waiting, " waiting)");
    if (in.in_step) {
      absl::StrAppend(&what, "; the step started at ", Clock(in.step_started), " (",
                      Secs(now - in.step_started), " ago) is still running");
      const std::string activity = describe ? describe() : "";
      if (!activity.empty()) absl::StrAppend(&what, ", ", activity);
    } else {
      absl::StrAppend(&what, "; no step is running: the scheduler loop last ran at ",
                      Clock(in.loop_heartbeat));
    }
    r.reasons.push_back(std::move(what));
  } else if (phase == ServingPhase::kServing && !busy &&
             now - in.loop_heartbeat > options.loop_timeout) {
    r.reasons.push_back(absl::StrCat("the scheduler loop has not run for ",
                                     Secs(now - in.loop_heartbeat), " (last at ",
                                     Clock(in.loop_heartbeat), ")"));
  }
  r.ready = r.reasons.empty();
  return r;
}

HealthReport HealthMonitor::Check() {
  const HealthInputs in = inputs_ ? inputs_() : HealthInputs{};
  const absl::Time now = options_.clock();
  ServingPhase phase;
  {
    absl::MutexLock l(&mu_);
    phase = phase_;
  }
  HealthReport r = Evaluate(phase, in, now, options_, describe_);
  // What changed is the kind of reason, not its numbers ("31.2 s" becomes "31.3 s").
  std::string key = absl::StrCat(ServingPhaseName(phase), in.experts_served ? "" : "|experts",
                                 in.experts_served ? "" : in.experts_reason,
                                 r.stalled ? "|stalled" : "", r.ready ? "|ready" : "");
  std::string line;
  {
    absl::MutexLock l(&mu_);
    const bool changed = last_ready_ != static_cast<int>(r.ready) || key != last_key_;
    const bool relog = !r.ready && now - last_log_ >= options_.relog_every;
    if (changed || relog) {
      // Starting is expected: say nothing until the first real verdict.
      if (!(last_ready_ == -1 && phase == ServingPhase::kStarting)) {
        line = r.ready ? "health: ready"
                       : absl::StrCat("health: NOT READY: ", absl::StrJoin(r.reasons, "; "));
      }
      last_ready_ = r.ready;
      last_key_ = std::move(key);
      last_log_ = now;
    }
  }
  if (!line.empty()) Log(line);
  return r;
}

void HealthMonitor::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    fprintf(stderr, "mxserve-coordinator: %s\n", line.c_str());
  }
}

}  // namespace mxserve

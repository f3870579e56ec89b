#include "coordinator/supervision/supervisor.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxserve {

namespace {
constexpr int kExitConfig = 78;

void Log(const std::string& msg) {
  fprintf(stderr, "mxserve-coordinator: %s %s\n",
          absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::UTCTimeZone()).c_str(), msg.c_str());
}
}  // namespace

const char* Supervisor::PhaseName(Phase p) {
  switch (p) {
    case Phase::kRunning: return "running";
    case Phase::kKilling: return "killing";
    case Phase::kBackoff: return "backoff";
    case Phase::kStarting: return "starting";
    case Phase::kFailed: return "failed";
  }
  return "?";
}

Supervisor::Supervisor(LocalWorkerPool* pool, ExpertRouter* router, SupervisorOptions options)
    : pool_(pool), router_(router), options_(options) {
  {
    absl::MutexLock l(&mu_);
    workers_.resize(pool_->workers().size());
    for (size_t i = 0; i < workers_.size(); ++i) {
      workers_[i].stats.index = static_cast<int>(i);
      workers_[i].stats.pid = pool_->workers()[i].pid;
      workers_[i].started = absl::Now();
    }
  }
  thread_ = std::thread([this] { Loop(); });
}

Supervisor::~Supervisor() {
  {
    absl::MutexLock l(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void Supervisor::Loop() {
  absl::MutexLock l(&mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < workers_.size(); ++i) Tick(static_cast<int>(i), now);
    mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.poll);
  }
}

void Supervisor::OnExit(int i, int wstatus, absl::Time now) {
  Worker& w = workers_[i];
  const std::string how = LocalWorkerPool::DescribeExit(wstatus);
  const pid_t old_pid = w.stats.pid;
  w.stats.pid = -1;
  w.stats.last_exit = how;
  if (w.phase != Phase::kKilling) ++w.stats.crashes;
  if (w.phase == Phase::kStarting) ++w.failed_starts;
  router_->MarkDown(i, absl::StrCat("process ", old_pid, " ", how));
  std::string verdict;
  if (!options_.restart) {
    w.phase = Phase::kFailed;
    verdict = "restarts are disabled: it stays down";
  } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == kExitConfig) {
    w.phase = Phase::kFailed;
    verdict = "bad configuration (EX_CONFIG): not restarting";
  } else {
    while (!w.restarts.empty() && now - w.restarts.front() > options_.restart_window) {
      w.restarts.pop_front();
    }
    if (static_cast<int>(w.restarts.size()) >= options_.max_restarts) {
      w.phase = Phase::kFailed;
      verdict = absl::StrCat("crash loop: ", w.restarts.size(), " restarts within ",
                             absl::FormatDuration(options_.restart_window), "; it stays down");
    } else {
      absl::Duration delay = options_.backoff_initial;
      for (int n = 0; n < w.failed_starts && delay < options_.backoff_max; ++n) delay *= 2;
      delay = std::min(delay, options_.backoff_max);
      w.phase = Phase::kBackoff;
      w.restart_at = now + delay;
      verdict = absl::StrCat("restarting in ", absl::FormatDuration(delay));
    }
  }
  w.stats.state = PhaseName(w.phase);
  Log(absl::StrCat("worker ", i, " (pid ", old_pid, ") ", how, "; ", verdict));
}

void Supervisor::Tick(int i, absl::Time now) {
  Worker& w = workers_[i];
  if (std::optional<int> wstatus = pool_->Reap(i)) {
    OnExit(i, *wstatus, now);
    return;
  }
  switch (w.phase) {
    case Phase::kRunning: {
      std::optional<absl::Time> hung = router_->UnresponsiveSince(i);
      if (hung.has_value() && now - *hung >= options_.hang_grace) {
        Log(absl::StrCat("worker ", i, " (pid ", w.stats.pid, ") does not answer (down for ",
                         absl::FormatDuration(now - *hung), "): SIGKILL"));
        pool_->Signal(i, SIGKILL);
        ++w.stats.hang_kills;
        w.phase = Phase::kKilling;
      }
      break;
    }
    case Phase::kBackoff:
      if (now >= w.restart_at) {
        absl::Status s = pool_->Respawn(i);
        w.restarts.push_back(now);
        ++w.stats.restarts;
        if (!s.ok()) {
          Log(absl::StrCat("worker ", i, ": restart failed: ", s.message()));
          ++w.failed_starts;
          w.restart_at = now + options_.backoff_max;
          break;
        }
        w.stats.pid = pool_->workers()[i].pid;
        w.phase = Phase::kStarting;
        w.started = now;
        w.reconnected = false;
        const std::string& device = pool_->workers()[i].device;
        Log(absl::StrCat("worker ", i, " restarted as pid ", w.stats.pid,
                         device.empty() ? "" : " on ", device, " (restart ", w.stats.restarts,
                         ")"));
      }
      break;
    case Phase::kStarting: {
      if (!w.reconnected) {
        const std::string address = pool_->PollAddress(i);
        if (!address.empty()) {
          absl::Status s = router_->ReconnectBackend(i, address);
          if (!s.ok()) Log(absl::StrCat("worker ", i, ": ", s.message()));
          w.reconnected = true;
        }
      } else if (router_->IsUp(i)) {
        w.phase = Phase::kRunning;
        w.failed_starts = 0;
        Log(absl::StrCat("worker ", i, " (pid ", w.stats.pid, ") SERVING again after ",
                         absl::FormatDuration(absl::Trunc(now - w.started, absl::Milliseconds(1)))));
        break;
      }
      if (now - w.started > options_.startup_timeout) {
        Log(absl::StrCat("worker ", i, " (pid ", w.stats.pid, ") not SERVING within ",
                         absl::FormatDuration(options_.startup_timeout), ": SIGKILL"));
        pool_->Signal(i, SIGKILL);
        w.phase = Phase::kKilling;
        ++w.failed_starts;
      }
      break;
    }
    case Phase::kKilling:
    case Phase::kFailed:
      break;
  }
  w.stats.state = PhaseName(w.phase);
}

SupervisorStats Supervisor::Stats() const {
  absl::MutexLock l(&mu_);
  SupervisorStats s;
  s.restarts_enabled = options_.restart;
  for (const Worker& w : workers_) s.workers.push_back(w.stats);
  return s;
}

}  // namespace mxserve

#include "worker/worker_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxserve {

SystemdNotifier::~SystemdNotifier() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void SystemdNotifier::Ready(const std::string& status) {
  sd_notify(0, absl::StrCat("READY=1\nSTATUS=", status).c_str());
}

void SystemdNotifier::Status(const std::string& status) {
  sd_notify(0, absl::StrCat("STATUS=", status).c_str());
}

void SystemdNotifier::ExtendTimeout(absl::Duration more) {
  sd_notify(0, absl::StrCat("EXTEND_TIMEOUT_USEC=", absl::ToInt64Microseconds(more)).c_str());
}

void SystemdNotifier::Stopping() { sd_notify(0, "STOPPING=1"); }

void SystemdNotifier::StartWatchdog(std::function<bool()> alive) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0 || thread_.joinable()) return;
  const absl::Duration period = absl::Microseconds(usec) / 2;
  thread_ = std::thread([this, period, alive = std::move(alive)] {
    absl::Time next = absl::Now();
    while (!stop_) {
      if (absl::Now() >= next) {
        if (alive()) sd_notify(0, "WATCHDOG=1");
        next = absl::Now() + period;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
}

}  // namespace mxserve

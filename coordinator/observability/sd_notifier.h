// sd_notify(3) for a Type=notify systemd unit: EXTEND_TIMEOUT_USEC= while loading, READY=1
// once serving, WATCHDOG=1 from the engine loop (so a stuck loop stops the pings), STOPPING=1
// on drain, STATUS= lines. Every call does nothing when NOTIFY_SOCKET is unset.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace mxserve {

class SdNotifier {
 public:
  // Reads NOTIFY_SOCKET and WATCHDOG_USEC (sd_watchdog_enabled) from the environment.
  SdNotifier();
  bool enabled() const { return enabled_; }
  // WatchdogSec= as exported (WATCHDOG_USEC); zero when there is no watchdog.
  absl::Duration watchdog_interval() const { return watchdog_; }

  void Ready(const std::string& status);
  void Stopping(const std::string& status);
  void Status(const std::string& status);
  // "Give me `d` more" (start-up, and stop when draining).
  void ExtendTimeout(absl::Duration d, const std::string& status = "");
  // WATCHDOG=1, sent at most every watchdog_interval/4 however often it is called. Call it
  // from the loop whose liveness it vouches for.
  void WatchdogPing();
  int64_t watchdog_pings() const { return pings_.load(); }

 private:
  void Send(const std::string& message);
  bool enabled_ = false;
  absl::Duration watchdog_ = absl::ZeroDuration();
  std::atomic<int64_t> last_ping_ns_{0};
  std::atomic<int64_t> pings_{0};
};

}  // namespace mxserve

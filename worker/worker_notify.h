// systemd integration of mxserve-worker (Type=notify units, deploy/systemd): READY=1 once the
// weights are resident and health says SERVING, EXTEND_TIMEOUT_USEC while loading (so a long
// load does not hit TimeoutStartSec), WATCHDOG=1 only while the worker's own gRPC health check
// answers, STOPPING=1 on shutdown. Every call is a no-op outside systemd (no NOTIFY_SOCKET).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace mxserve {

class SystemdNotifier {
 public:
  SystemdNotifier() = default;
  ~SystemdNotifier();  // stops the watchdog thread

  static void Ready(const std::string& status);
  static void Status(const std::string& status);
  // Asks systemd for `more` beyond now before the start (or stop) timeout fires.
  static void ExtendTimeout(absl::Duration more);
  static void Stopping();

  // If the unit has WatchdogSec=, pings every half interval while `alive()` is true; a wedged
  // worker stops pinging and systemd restarts it. `alive` must finish well within the interval.
  void StartWatchdog(std::function<bool()> alive);

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mxserve

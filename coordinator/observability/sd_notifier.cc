#include "coordinator/observability/sd_notifier.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxserve {

SdNotifier::SdNotifier() {
  const char* socket = getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  if (enabled_ && sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 && usec > 0) {
    watchdog_ = absl::Microseconds(static_cast<int64_t>(usec));
  }
}

void SdNotifier::Send(const std::string& message) {
  if (!enabled_) return;
  sd_notify(/*unset_environment=*/0, message.c_str());
}

void SdNotifier::Ready(const std::string& status) {
  Send(absl::StrCat("READY=1\nSTATUS=", status));
}

void SdNotifier::Stopping(const std::string& status) {
  Send(absl::StrCat("STOPPING=1\nSTATUS=", status));
}

void SdNotifier::Status(const std::string& status) { Send(absl::StrCat("STATUS=", status)); }

void SdNotifier::ExtendTimeout(absl::Duration d, const std::string& status) {
  std::string msg = absl::StrCat("EXTEND_TIMEOUT_USEC=", absl::ToInt64Microseconds(d));
  if (!status.empty()) absl::StrAppend(&msg, "\nSTATUS=", status);
  Send(msg);
}

void SdNotifier::WatchdogPing() {
  if (!enabled_ || watchdog_ <= absl::ZeroDuration()) return;
  const int64_t now = absl::GetCurrentTimeNanos();
  const int64_t last = last_ping_ns_.load(std::memory_order_relaxed);
  if (last != 0 && now - last < absl::ToInt64Nanoseconds(watchdog_ / 4)) return;
  last_ping_ns_.store(now, std::memory_order_relaxed);
  pings_.fetch_add(1);
  Send("WATCHDOG=1");
}

}  // namespace mxserve

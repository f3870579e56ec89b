// SdNotifier against a fake NOTIFY_SOCKET (a unix datagram socket this test binds): the
// messages arrive as sd_notify(3) sends them, WATCHDOG=1 is rate-limited to WATCHDOG_USEC/4, and
// nothing is sent (or breaks) without NOTIFY_SOCKET.
#include "coordinator/observability/sd_notifier.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace mxserve::testing {
namespace {

class FakeNotifySocket {
 public:
  FakeNotifySocket() {
    path_ = "/tmp/mxserve-notify-" + std::to_string(getpid()) + "-" + std::to_string(rand());
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path_.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  }
  ~FakeNotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }
  // Messages received within `wait`.
  std::vector<std::string> Drain(int wait_ms = 100) {
    std::vector<std::string> out;
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, wait_ms) <= 0) break;
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      out.emplace_back(buf, n);
      wait_ms = 20;
    }
    return out;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(SdNotifier, SendsTheLifecycleToNotifySocket) {
  FakeNotifySocket sock;
  setenv("NOTIFY_SOCKET", sock.path().c_str(), 1);
  setenv("WATCHDOG_USEC", "400000", 1);
  unsetenv("WATCHDOG_PID");
  SdNotifier n;  // sd_notify reads NOTIFY_SOCKET at each call: keep it set until the end
  ASSERT_TRUE(n.enabled());
  EXPECT_EQ(n.watchdog_interval(), absl::Milliseconds(400));
  n.ExtendTimeout(absl::Seconds(90), "loading: experts");
  n.Ready("serving");
  n.Status("serving: ready");
  n.Stopping("draining");
  EXPECT_EQ(sock.Drain(), (std::vector<std::string>{
                              "EXTEND_TIMEOUT_USEC=90000000\nSTATUS=loading: experts",
                              "READY=1\nSTATUS=serving", "STATUS=serving: ready",
                              "STOPPING=1\nSTATUS=draining"}));
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
}

TEST(SdNotifier, WatchdogPingsAreRateLimited) {
  FakeNotifySocket sock;
  setenv("NOTIFY_SOCKET", sock.path().c_str(), 1);
  setenv("WATCHDOG_USEC", "200000", 1);  // pings at most every 50 ms
  SdNotifier n;
  const absl::Time end = absl::Now() + absl::Milliseconds(300);
  int calls = 0;
  while (absl::Now() < end) {
    n.WatchdogPing();
    ++calls;
    absl::SleepFor(absl::Milliseconds(1));
  }
  std::vector<std::string> got = sock.Drain();
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  // 300 ms at one ping per 50 ms at most: 1..7 pings however many calls (bounds loose enough
  // for a loaded machine, tight enough to catch a missing rate limit).
  EXPECT_GT(calls, 10);
  EXPECT_GE(got.size(), 1u);
  EXPECT_LE(got.size(), 7u);
  EXPECT_LT(got.size(), static_cast<size_t>(calls));
  for (const std::string& m : got) EXPECT_EQ(m, "WATCHDOG=1");
  EXPECT_EQ(n.watchdog_pings(), static_cast<int64_t>(got.size()));
}

TEST(SdNotifier, HarmlessWithoutNotifySocket) {
  unsetenv("NOTIFY_SOCKET");
  SdNotifier n;
  EXPECT_FALSE(n.enabled());
  EXPECT_EQ(n.watchdog_interval(), absl::ZeroDuration());
  n.Ready("x");
  n.WatchdogPing();
  n.Stopping("y");
  EXPECT_EQ(n.watchdog_pings(), 0);
}

}  // namespace
}  // namespace mxserve::testing

// HealthMonitor with a fake clock: starting → ready → stalled (names what is stuck) → ready →
// experts without a host → ready → draining; logs once per change, repeats while stuck.
#include "coordinator/observability/health_monitor.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mxserve::testing {
namespace {

class HealthMonitorTest : public ::testing::Test {
 protected:
  HealthMonitorTest() {
    now_ = absl::FromUnixSeconds(1'800'000'000);
    in_.last_progress = in_.loop_heartbeat = now_;
    HealthMonitorOptions o;
    o.progress_timeout = absl::Seconds(30);
    o.loop_timeout = absl::Seconds(30);
    o.relog_every = absl::Seconds(10);
    o.clock = [this] { return now_; };
    o.log = [this](const std::string& l) { logs_.push_back(l); };
    monitor_ = std::make_unique<HealthMonitor>(
        o, [this] { return in_; }, [this] { return activity_; });
  }
  void Advance(absl::Duration d) {
    now_ += d;
    in_.loop_heartbeat = now_;  // the loop keeps iterating unless a test says otherwise
  }

  absl::Time now_;
  HealthInputs in_;
  std::string activity_ = "in layer 3 expert call (2 tokens, for 31.0 s) to worker 1 at 127.0.0.1:4567 (up)";
  std::vector<std::string> logs_;
  std::unique_ptr<HealthMonitor> monitor_;
};

TEST_F(HealthMonitorTest, StartingIsNotReadyAndQuiet) {
  HealthReport r = monitor_->Check();
  EXPECT_FALSE(r.ready);
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "starting"));
  EXPECT_TRUE(logs_.empty());
  auto j = nlohmann::json::parse(r.Json());
  EXPECT_EQ(j["status"], "not ready");
  EXPECT_EQ(j["phase"], "starting");
}

TEST_F(HealthMonitorTest, LoadStallRecoverDegradeDrain) {
  monitor_->SetPhase(ServingPhase::kServing);
  EXPECT_TRUE(monitor_->Check().ready);
  ASSERT_EQ(logs_.size(), 1u);
  EXPECT_EQ(logs_.back(), "health: ready");

  // Load: steps keep completing within the bound.
  in_.running = 3;
  for (int i = 0; i < 10; ++i) {
    Advance(absl::Seconds(5));
    in_.last_progress = now_;
    EXPECT_TRUE(monitor_->Check().ready);
  }
  EXPECT_EQ(logs_.size(), 1u);

  // Stall: a step started and never returned.
  in_.in_step = true;
  in_.step_started = now_;
  Advance(absl::Seconds(29));
  EXPECT_TRUE(monitor_->Check().ready);  // within the bound
  Advance(absl::Seconds(2));
  HealthReport r = monitor_->Check();
  EXPECT_FALSE(r.ready);
  EXPECT_TRUE(r.stalled);
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "no step completed for 31.0 s with 3 running requests"))
      << r.reasons[0];
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "in layer 3 expert call")) << r.reasons[0];
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "worker 1")) << r.reasons[0];
  ASSERT_EQ(logs_.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(logs_.back(), "health: NOT READY: no step completed")) << logs_.back();
  // Still stuck: the numbers change, the log repeats only every relog_every.
  Advance(absl::Seconds(1));
  EXPECT_FALSE(monitor_->Check().ready);
  EXPECT_EQ(logs_.size(), 2u);
  Advance(absl::Seconds(10));
  EXPECT_FALSE(monitor_->Check().ready);
  EXPECT_EQ(logs_.size(), 3u);
  auto j = nlohmann::json::parse(monitor_->Check().Json());
  EXPECT_EQ(j["status"], "not ready");
  EXPECT_EQ(j["reasons"].size(), 1u);

  // The step returns: ready again.
  in_.in_step = false;
  in_.last_progress = now_;
  EXPECT_TRUE(monitor_->Check().ready);
  EXPECT_EQ(logs_.back(), "health: ready");

  // A worker goes down (the router says so): not ready, reason from the router.
  in_.experts_served = false;
  in_.experts_reason = "experts 4-7: no healthy worker (worker 1 at 127.0.0.1:4567 down for 0.5 s: crashed)";
  r = monitor_->Check();
  EXPECT_FALSE(r.ready);
  EXPECT_FALSE(r.stalled);
  EXPECT_EQ(r.reasons, std::vector<std::string>{in_.experts_reason});
  in_.experts_served = true;
  EXPECT_TRUE(monitor_->Check().ready);

  // Idle and the loop stops iterating: not ready after loop_timeout.
  in_.running = 0;
  const absl::Time beat = now_;
  now_ += absl::Seconds(31);
  in_.loop_heartbeat = beat;
  r = monitor_->Check();
  EXPECT_FALSE(r.ready);
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "scheduler loop has not run for 31.0 s"));
  in_.loop_heartbeat = now_;
  in_.last_progress = now_;
  EXPECT_TRUE(monitor_->Check().ready);

  // Drain: not ready at once, whatever else holds.
  monitor_->SetPhase(ServingPhase::kDraining);
  r = monitor_->Check();
  EXPECT_FALSE(r.ready);
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "draining"));
  EXPECT_TRUE(absl::StrContains(logs_.back(), "draining"));
}

TEST_F(HealthMonitorTest, WorkArrivingAtAnIdleEngineIsNotAStall) {
  monitor_->SetPhase(ServingPhase::kServing);
  // Idle for an hour; the engine restarts the progress clock when work arrives.
  Advance(absl::Hours(1));
  in_.waiting = 1;
  in_.last_progress = now_;
  EXPECT_TRUE(monitor_->Check().ready);
  Advance(absl::Seconds(31));
  HealthReport r = monitor_->Check();
  EXPECT_FALSE(r.ready);
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "0 running requests (1 waiting)")) << r.reasons[0];
  EXPECT_TRUE(absl::StrContains(r.reasons[0], "no step is running")) << r.reasons[0];
}

}  // namespace
}  // namespace mxserve::testing

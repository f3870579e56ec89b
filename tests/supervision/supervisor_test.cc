// Supervisor with real mxserve-worker processes (next to this test binary), replicated local
// workers, the watching router: a SIGKILLed worker is restarted (after the backoff) and
// re-admitted at its new address, and answers as before; a SIGSTOPped one is found hung,
// SIGKILLed and restarted; the crash-loop limit and disabled restarts leave a worker down.
#include "coordinator/supervision/supervisor.h"

#include <signal.h>

#include <filesystem>

#include "absl/time/clock.h"
#include "coordinator/router/router_factory.h"
#include "coordinator/supervision/local_worker_pool.h"
#include "core/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/experts/test_checkpoint.h"

namespace mxserve {
namespace {

std::string WorkerBinary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "mxserve-worker").string();
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::NewTempDir();
    ASSERT_TRUE(testing::WriteExpertCheckpoint(dir_, spec_).ok());
  }
  void TearDown() override {
    supervisor_.reset();
    router_.reset();
    pool_.reset();
    std::filesystem::remove_all(dir_);
  }
  // num_workers workers holding `replicas` copies of each expert, watched and supervised.
  void Start(int num_workers, int replicas, SupervisorOptions so) {
    LocalWorkerPoolOptions lo;
    lo.worker_binary = WorkerBinary();
    lo.model_dir = dir_;
    lo.num_workers = num_workers;
    lo.num_experts = spec_.experts;
    lo.replicas = replicas;
    lo.startup_timeout = absl::Seconds(60);
    auto pool = LocalWorkerPool::Start(lo);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = std::move(*pool);
    auto config = ModelConfig::Load(dir_);
    ASSERT_TRUE(config.ok());
    RemoteWorkersOptions ro;
    ro.ready_timeout = absl::Seconds(30);
    ro.router.down_wait = absl::Seconds(20);
    ro.placement = *Placement::Replicated(spec_.experts, num_workers, replicas);
    auto router = ConnectToWorkers(pool_->addresses(), *config, ro);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = std::move(*router);
    supervisor_ = std::make_unique<Supervisor>(pool_.get(), router_.get(), so);
  }
  // Runs one layer over every expert; returns the output.
  std::vector<float> RunAll(int layer) {
    const int T = 8, H = spec_.hidden, k = spec_.top_k;
    std::vector<float> x = testing::RandomFloats(T * H, 11), w(T * k, 0.5f), out(T * H);
    std::vector<int32_t> ids;
    for (int t = 0; t < T; ++t) {
      ids.push_back(t % 8);
      ids.push_back((t + 3) % 8);
    }
    absl::Status s = router_->Run(ExpertBatch{{T, k, x.data(), ids.data(), w.data()}, layer, H}, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  // Waits (bounded) until worker i runs a process other than old_pid and is up.
  bool WaitRestarted(int i, pid_t old_pid, absl::Duration bound) {
    const absl::Time until = absl::Now() + bound;
    while (absl::Now() < until) {
      SupervisorStats st = supervisor_->Stats();
      if (st.workers[i].pid > 0 && st.workers[i].pid != old_pid && router_->IsUp(i) &&
          st.workers[i].state == "running")
        return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }
  template <typename Pred>
  bool WaitUntil(Pred pred, absl::Duration bound) {
    const absl::Time until = absl::Now() + bound;
    while (!pred() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(10));
    return pred();
  }

  testing::ExpertCheckpointSpec spec_;
  std::string dir_;
  std::unique_ptr<LocalWorkerPool> pool_;
  std::unique_ptr<ExpertRouter> router_;
  std::unique_ptr<Supervisor> supervisor_;
};

TEST_F(SupervisorTest, KilledWorkerIsRestartedAfterBackoffAndReadmitted) {
  SupervisorOptions so;
  so.backoff_initial = absl::Milliseconds(300);
  ASSERT_NO_FATAL_FAILURE(Start(2, 1, so));
  const std::vector<float> before = RunAll(1);
  const pid_t old_pid = supervisor_->Stats().workers[0].pid;
  const std::string old_address = router_->backend(0).address();
  ASSERT_GT(old_pid, 0);
  const absl::Time t0 = absl::Now();
  ASSERT_EQ(kill(old_pid, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return !router_->IsUp(0); }, absl::Seconds(1)));
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(800)) << "a crash shows at once";
  ASSERT_TRUE(WaitRestarted(0, old_pid, absl::Seconds(10)));
  const absl::Duration took = absl::Now() - t0;
  EXPECT_GE(took, absl::Milliseconds(300)) << "restarted before the backoff";
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_NE(router_->backend(0).address(), old_address);  // new port, found by the router
  SupervisorStats st = supervisor_->Stats();
  EXPECT_EQ(st.workers[0].restarts, 1u);
  EXPECT_EQ(st.workers[0].crashes, 1u);
  EXPECT_THAT(st.workers[0].last_exit, ::testing::HasSubstr("signal 9"));
  EXPECT_EQ(st.workers[1].restarts, 0u);
  EXPECT_EQ(RunAll(1), before);  // same experts, same bits
}

TEST_F(SupervisorTest, HungWorkerIsKilledAndRestartedWhileReplicasServe) {
  SupervisorOptions so;
  so.hang_grace = absl::Milliseconds(500);
  ASSERT_NO_FATAL_FAILURE(Start(2, 2, so));
  const std::vector<float> before = RunAll(0);
  const pid_t old_pid = supervisor_->Stats().workers[1].pid;
  const absl::Time t0 = absl::Now();
  ASSERT_EQ(kill(old_pid, SIGSTOP), 0);
  // Calls keep working meanwhile (the replica, or a failover after the call deadline).
  EXPECT_EQ(RunAll(0), before);
  ASSERT_TRUE(WaitUntil([&] { return !router_->IsUp(1); }, absl::Seconds(5)));
  const absl::Duration detected = absl::Now() - t0;
  EXPECT_LT(detected, absl::Seconds(4)) << "keepalive 1 s + 1 s (loose: ctest runs tests in parallel)";
  ASSERT_TRUE(WaitRestarted(1, old_pid, absl::Seconds(10)));
  EXPECT_EQ(supervisor_->Stats().workers[1].hang_kills, 1u);
  EXPECT_EQ(supervisor_->Stats().workers[1].crashes, 0u);
  EXPECT_EQ(RunAll(0), before);
  EXPECT_EQ(RunAll(1).size(), before.size());
}

TEST_F(SupervisorTest, CrashLoopLimitAndDisabledRestartsLeaveTheWorkerDown) {
  SupervisorOptions so;
  so.max_restarts = 1;
  so.backoff_initial = absl::Milliseconds(50);
  ASSERT_NO_FATAL_FAILURE(Start(2, 2, so));
  pid_t pid = supervisor_->Stats().workers[0].pid;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitRestarted(0, pid, absl::Seconds(10)));
  pid = supervisor_->Stats().workers[0].pid;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return supervisor_->Stats().workers[0].state == "failed"; },
                        absl::Seconds(5)));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(router_->IsUp(0));
  EXPECT_EQ(supervisor_->Stats().workers[0].pid, -1);
  EXPECT_EQ(supervisor_->Stats().workers[0].restarts, 1u);
  RunAll(2);  // the replica still serves everything

  TearDown();
  SetUp();
  so.restart = false;
  ASSERT_NO_FATAL_FAILURE(Start(2, 2, so));
  pid = supervisor_->Stats().workers[1].pid;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_TRUE(WaitUntil([&] { return supervisor_->Stats().workers[1].state == "failed"; },
                        absl::Seconds(5)));
  EXPECT_EQ(supervisor_->Stats().workers[1].restarts, 0u);
  EXPECT_FALSE(supervisor_->Stats().restarts_enabled);
  RunAll(2);
}

}  // namespace
}  // namespace mxserve

// Expert replicas and failover with scripted backends: Placement::Replicated and its groups;
// the router spreads groups over healthy replicas, re-issues a failed or late call on another
// replica with a bit-identical result, waits (bounded) for a group with no healthy host, and
// does not fail over errors that a replica cannot fix. Also the WorkerWatcher following a real
// gRPC worker's health.
#include <atomic>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/placement.h"
#include "coordinator/router/router_factory.h"
#include "core/model_config.h"
#include "experts/expert_executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/experts/test_checkpoint.h"
#include "tests/worker/test_worker.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;

TEST(ReplicatedPlacementTest, EachWorkerHoldsItsRangeAndTheNextOnes) {
  auto p = Placement::Replicated(8, 3, 2);  // ranges 0-2, 3-5, 6-7
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->ExpertsOf(0), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(p->ExpertsOf(1), (std::vector<int>{3, 4, 5, 6, 7}));
  EXPECT_EQ(p->ExpertsOf(2), (std::vector<int>{0, 1, 2, 6, 7}));
  ASSERT_EQ(p->num_groups(), 3);
  EXPECT_EQ(p->GroupHosts(0), (std::vector<int>{0, 2}));  // primary first
  EXPECT_EQ(p->GroupHosts(1), (std::vector<int>{1, 0}));
  EXPECT_EQ(p->GroupHosts(2), (std::vector<int>{2, 1}));
  EXPECT_EQ(p->GroupRange(2), (std::pair<int, int>{6, 8}));
  EXPECT_EQ(p->GroupOf(5), 1);
  EXPECT_EQ(p->MinReplicas(), 2);
  // Every expert on all three: still one group per range (parallel calls, same sums).
  auto all = Placement::Replicated(8, 3, 3);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->num_groups(), 3);
  for (int b = 0; b < 3; ++b) EXPECT_EQ(all->ExpertsOf(b).size(), 8u);
  // R = 1 is the contiguous split.
  auto one = Placement::Replicated(8, 3, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->DebugString(), Placement::Contiguous(8, 3)->DebugString());
  EXPECT_FALSE(Placement::Replicated(8, 3, 4).ok());
  EXPECT_FALSE(Placement::Replicated(8, 3, 0).ok());
  EXPECT_FALSE(Placement::Replicated(2, 3, 1).ok());
  // From lists: groups are runs of experts with the same host set.
  auto lists = Placement::FromLists(2, {{0}, {0}, {0, 1}, {1, 0}, {1}});
  ASSERT_TRUE(lists.ok());
  EXPECT_EQ(lists->num_groups(), 3);
  EXPECT_EQ(lists->GroupRange(1), (std::pair<int, int>{2, 4}));
  EXPECT_EQ(IdRanges({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
}

// Computes a fixed function of its slots (so any replica gives the same bits), or fails.
class ScriptedBackend final : public ExpertBackend {
 public:
  enum Mode { kOk, kUnavailable, kHang, kInvalid, kSlow };
  explicit ScriptedBackend(int index) : index_(index) {}
  absl::Status RunExperts(const ExpertBatch& call, float* out, absl::Time deadline) override {
    ++calls;
    {
      absl::MutexLock l(&mu_);
      for (int i = 0; i < call.num_tokens * call.top_k; ++i)
        if (call.expert_ids[i] >= 0) experts_seen.insert(call.expert_ids[i]);
    }
    switch (mode.load()) {
      case kUnavailable: return absl::UnavailableError(absl::StrCat("fake ", index_, ": gone"));
      case kHang:
        absl::SleepFor(deadline - absl::Now());
        return absl::DeadlineExceededError(absl::StrCat("fake ", index_, ": Deadline Exceeded"));
      case kInvalid: return absl::InvalidArgumentError(absl::StrCat("fake ", index_, ": bad"));
      case kSlow:  // takes slow_ms, or fails at the deadline if that comes first
        if (absl::Now() + absl::Milliseconds(slow_ms) > deadline) {
          absl::SleepFor(deadline - absl::Now());
          return absl::DeadlineExceededError(absl::StrCat("fake ", index_, ": Deadline Exceeded"));
        }
        absl::SleepFor(absl::Milliseconds(slow_ms));
        break;
      case kOk: break;
    }
    const int H = call.hidden, k = call.top_k;
    for (int t = 0; t < call.num_tokens; ++t) {
      for (int h = 0; h < H; ++h) {
        float acc = 0;
        for (int j = 0; j < k; ++j) {
          const int e = call.expert_ids[t * k + j];
          if (e < 0) continue;
          const float v = call.x[t * H + h];
          acc += call.weights[t * k + j] * (v * (1.f + 0.1f * e) + 0.01f * e * v * v);
        }
        out[t * H + h] = acc;
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return absl::StrCat("fake ", index_); }
  std::set<int> TakeExpertsSeen() {
    absl::MutexLock l(&mu_);
    std::set<int> s;
    s.swap(experts_seen);
    return s;
  }

  std::atomic<int> mode{kOk};
  int slow_ms = 0;
  std::atomic<int> calls{0};

 private:
  const int index_;
  absl::Mutex mu_;
  std::set<int> experts_seen ABSL_GUARDED_BY(mu_);
};

struct Rig {
  std::unique_ptr<ExpertRouter> router;
  std::vector<ScriptedBackend*> fakes;
};

Rig MakeRig(Placement placement, RouterOptions options) {
  Rig rig;
  std::vector<std::unique_ptr<ExpertBackend>> backends;
  for (int b = 0; b < placement.num_backends(); ++b) {
    auto f = std::make_unique<ScriptedBackend>(b);
    rig.fakes.push_back(f.get());
    backends.push_back(std::move(f));
  }
  options.log_state_changes = false;
  auto r = ExpertRouter::Create(std::move(backends), std::move(placement), options);
  EXPECT_TRUE(r.ok()) << r.status();
  if (r.ok()) rig.router = std::move(*r);
  return rig;
}

struct Batch {
  int T = 0, H = 0, k = 0;
  std::vector<float> x, w;
  std::vector<int32_t> ids;
};

Batch RandomBatch(int T, int H, int k, int E, uint32_t seed) {
  Batch b{T, H, k, testing::RandomFloats(T * H, seed), {}, {}};
  std::mt19937 rng(seed);
  for (int t = 0; t < T; ++t) {
    std::vector<int> perm(E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      b.ids.push_back(perm[j]);
      b.w.push_back(std::uniform_real_distribution<float>(0.1f, 1.f)(rng));
    }
  }
  return b;
}

absl::Status RunLayer(ExpertRouter& r, int layer, const Batch& b, std::vector<float>* out) {
  out->assign(static_cast<size_t>(b.T) * b.H, -1.f);
  return r.Run(ExpertBatch{{b.T, b.k, b.x.data(), b.ids.data(), b.w.data()}, layer, b.H}, out->data());
}

TEST(FailoverTest, FailedCallsGoToAReplicaWithBitIdenticalResults) {
  const Batch batch = RandomBatch(24, 16, 2, 8, 5);
  std::vector<std::vector<float>> want(4);
  {
    Rig healthy = MakeRig(*Placement::Replicated(8, 3, 2), {});
    for (int layer = 0; layer < 4; ++layer)
      ASSERT_TRUE(RunLayer(*healthy.router, layer, batch, &want[layer]).ok());
  }
  for (int victim = 0; victim < 3; ++victim) {
    for (int mode : {ScriptedBackend::kUnavailable, ScriptedBackend::kHang}) {
      SCOPED_TRACE(absl::StrCat("victim ", victim, " mode ", mode));
      Rig rig = MakeRig(*Placement::Replicated(8, 3, 2), {.call_timeout = absl::Milliseconds(100)});
      rig.fakes[victim]->mode = mode;
      for (int layer = 0; layer < 4; ++layer) {
        std::vector<float> got;
        const absl::Time t0 = absl::Now();
        ASSERT_TRUE(RunLayer(*rig.router, layer, batch, &got).ok());
        EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
        for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[layer][i]) << "layer " << layer << " at " << i;
      }
      EXPECT_FALSE(rig.router->IsUp(victim));
      EXPECT_TRUE(rig.router->UnresponsiveSince(victim).has_value());
      EXPECT_TRUE(rig.router->AllExpertsServed());
      // Only the first call found out; later layers avoid the down worker.
      EXPECT_EQ(rig.fakes[victim]->calls.load(), 1);
      RouterStats st = rig.router->Stats();
      EXPECT_EQ(st.failovers, 1u);
      EXPECT_EQ(st.retries, 1u);
      EXPECT_EQ(st.backends[victim].call_failures, 1u);
      EXPECT_EQ(st.backends[victim].state, BackendState::kDown);
      EXPECT_EQ(st.experts_without_host, 0);
      // Back up (the watcher saw SERVING): it takes calls again.
      rig.fakes[victim]->mode = ScriptedBackend::kOk;
      rig.router->OnWorkerHealth(victim, true, false, "SERVING");
      std::vector<float> got;
      ASSERT_TRUE(RunLayer(*rig.router, 0, batch, &got).ok());
      ASSERT_TRUE(RunLayer(*rig.router, 1, batch, &got).ok());
      EXPECT_EQ(rig.fakes[victim]->calls.load(), 3);
    }
  }
}

TEST(FailoverTest, LoadIsSpreadOverReplicasPerLayer) {
  Rig rig = MakeRig(*Placement::Replicated(8, 3, 2), {});
  const Batch batch = RandomBatch(32, 8, 2, 8, 9);
  std::vector<float> out;
  std::vector<std::set<int>> layer0(3), layer1(3);
  ASSERT_TRUE(RunLayer(*rig.router, 0, batch, &out).ok());
  for (int b = 0; b < 3; ++b) layer0[b] = rig.fakes[b]->TakeExpertsSeen();
  ASSERT_TRUE(RunLayer(*rig.router, 1, batch, &out).ok());
  for (int b = 0; b < 3; ++b) layer1[b] = rig.fakes[b]->TakeExpertsSeen();
  // Even layers: each group on its primary; odd layers: on the other replica. One call each.
  EXPECT_EQ(layer0[0], (std::set<int>{0, 1, 2}));
  EXPECT_EQ(layer0[1], (std::set<int>{3, 4, 5}));
  EXPECT_EQ(layer0[2], (std::set<int>{6, 7}));
  EXPECT_EQ(layer1[0], (std::set<int>{3, 4, 5}));
  EXPECT_EQ(layer1[1], (std::set<int>{6, 7}));
  EXPECT_EQ(layer1[2], (std::set<int>{0, 1, 2}));
  for (int b = 0; b < 3; ++b) EXPECT_EQ(rig.fakes[b]->calls.load(), 2);
}

TEST(FailoverTest, NoHostUpWaitsThenResumes) {
  Rig rig = MakeRig(*Placement::Contiguous(8, 2), {.down_wait = absl::Seconds(20)});
  rig.router->OnWorkerHealth(0, false, false, "process 1 was killed by signal 9");
  const Batch batch = RandomBatch(8, 8, 2, 8, 3);
  std::vector<float> want;
  {
    Rig healthy = MakeRig(*Placement::Contiguous(8, 2), {});
    ASSERT_TRUE(RunLayer(*healthy.router, 2, batch, &want).ok());
  }
  const absl::Time t0 = absl::Now();
  auto result = std::async(std::launch::async, [&] {
    std::vector<float> got;
    absl::Status s = RunLayer(*rig.router, 2, batch, &got);
    return std::make_pair(s, got);
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(result.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  rig.router->OnWorkerHealth(0, true, false, "SERVING");
  auto [status, got] = result.get();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(got, want);
  EXPECT_EQ(rig.router->Stats().waits, 1u);
}

TEST(FailoverTest, NoHostUpPastTheBoundIsUnavailable) {
  Rig rig = MakeRig(*Placement::Contiguous(8, 2), {.down_wait = absl::Milliseconds(300)});
  rig.router->OnWorkerHealth(0, false, false, "process 7 was killed by signal 9");
  const Batch batch = RandomBatch(8, 8, 2, 8, 3);
  std::vector<float> got;
  const absl::Time t0 = absl::Now();
  absl::Status s = RunLayer(*rig.router, 1, batch, &got);
  const absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("experts 0-3: no healthy worker within 300ms"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("worker 0: process 7 was killed by signal 9"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("layer 1"));
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(3));
  EXPECT_EQ(rig.fakes[0]->calls.load(), 0);
  EXPECT_FALSE(rig.router->AllExpertsServed());
  EXPECT_EQ(rig.router->Stats().experts_without_host, 4);
  EXPECT_EQ(rig.router->Stats().failed_calls, 1u);
}

// A worker slower than the call deadline but alive (the watcher keeps finding it SERVING):
// each retry gets twice the time, so the call gets through instead of failing forever.
TEST(FailoverTest, SlowButAliveWorkerGetsLongerDeadlines) {
  Rig rig = MakeRig(*Placement::Contiguous(8, 1), {.call_timeout = absl::Milliseconds(60),
                                                   .down_wait = absl::Seconds(10)});
  rig.fakes[0]->mode = ScriptedBackend::kSlow;
  rig.fakes[0]->slow_ms = 200;
  std::atomic<bool> stop{false};
  std::thread prober([&] {  // stands in for the watcher's probe answering SERVING
    while (!stop) {
      rig.router->OnWorkerHealth(0, true, false, "SERVING");
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  const Batch batch = RandomBatch(4, 8, 2, 8, 6);
  std::vector<float> got;
  absl::Status s = RunLayer(*rig.router, 0, batch, &got);
  stop = true;
  prober.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(rig.fakes[0]->calls.load(), 3);  // 60 ms, 120 ms, then 240 ms > 200 ms
  EXPECT_EQ(rig.router->Stats().retries, 2u);
  EXPECT_EQ(rig.router->Stats().failovers, 0u);
}

TEST(FailoverTest, ShutdownEndsAWaitAtOnce) {
  Rig rig = MakeRig(*Placement::Contiguous(8, 2), {.down_wait = absl::Seconds(30)});
  rig.router->OnWorkerHealth(1, false, false, "process 9 was killed by signal 9");
  const Batch batch = RandomBatch(8, 8, 2, 8, 3);
  const absl::Time t0 = absl::Now();
  auto result = std::async(std::launch::async, [&] {
    std::vector<float> got;
    return RunLayer(*rig.router, 0, batch, &got);
  });
  absl::SleepFor(absl::Milliseconds(100));
  rig.router->Shutdown();
  absl::Status s = result.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
}

TEST(FailoverTest, AllReplicasFailingGivesUpAfterTheBound) {
  Rig rig = MakeRig(*Placement::Replicated(8, 2, 2), {.call_timeout = absl::Milliseconds(50),
                                                      .down_wait = absl::Milliseconds(200)});
  rig.fakes[0]->mode = ScriptedBackend::kUnavailable;
  rig.fakes[1]->mode = ScriptedBackend::kHang;
  const Batch batch = RandomBatch(8, 8, 2, 8, 4);
  std::vector<float> got;
  const absl::Time t0 = absl::Now();
  absl::Status s = RunLayer(*rig.router, 0, batch, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  EXPECT_FALSE(rig.router->IsUp(0));
  EXPECT_FALSE(rig.router->IsUp(1));
}

TEST(FailoverTest, ErrorsAReplicaCannotFixAreReturnedAsIs) {
  Rig rig = MakeRig(*Placement::Replicated(8, 2, 2), {});
  rig.fakes[0]->mode = ScriptedBackend::kInvalid;
  rig.fakes[1]->mode = ScriptedBackend::kInvalid;
  const Batch batch = RandomBatch(4, 8, 2, 8, 4);
  std::vector<float> got;
  absl::Status s = RunLayer(*rig.router, 0, batch, &got);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(rig.router->IsUp(0));
  EXPECT_TRUE(rig.router->IsUp(1));
  EXPECT_EQ(rig.router->Stats().retries, 0u);
}

TEST(FailoverTest, PlacementJsonShowsStatesAndGroups) {
  Rig rig = MakeRig(*Placement::Replicated(8, 3, 2), {});
  rig.fakes[1]->mode = ScriptedBackend::kUnavailable;
  std::vector<float> got;
  ASSERT_TRUE(RunLayer(*rig.router, 0, RandomBatch(16, 8, 2, 8, 1), &got).ok());
  SupervisorStats sup;
  sup.workers.resize(3);
  sup.workers[1].pid = 4242;
  sup.workers[1].restarts = 2;
  auto j = nlohmann::json::parse(rig.router->PlacementJson(&sup));
  ASSERT_EQ(j["workers"].size(), 3u);
  EXPECT_EQ(j["workers"][1]["state"], "down");
  EXPECT_EQ(j["workers"][0]["state"], "up");
  EXPECT_EQ(j["workers"][1]["experts"], "3-7");
  EXPECT_EQ(j["workers"][1]["pid"], 4242);
  EXPECT_EQ(j["workers"][1]["restarts"], 2);
  EXPECT_EQ(j["groups"].size(), 3u);
  EXPECT_EQ(j["groups"][1]["hosts"], nlohmann::json({1, 0}));
  EXPECT_EQ(j["replicas"], 2);
  EXPECT_EQ(j["failovers"], 1);
}

// The watcher over a real worker server: NOT_SERVING and SERVING flips, then a shutdown.
TEST(WorkerWatcherTest, FollowsAWorkersHealth) {
  testing::ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  auto w0 = testing::StartWorker(dir, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(w0.ok()) << w0.status();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok());
  RemoteWorkersOptions opt;
  opt.ready_timeout = absl::Seconds(10);
  opt.router.log_state_changes = false;
  auto router = ConnectToWorkers({(*w0)->server->address()}, *config, opt);
  ASSERT_TRUE(router.ok()) << router.status();
  auto wait_for = [&](bool up) {
    const absl::Time until = absl::Now() + absl::Seconds(3);
    while ((*router)->IsUp(0) != up && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
    return (*router)->IsUp(0) == up;
  };
  ASSERT_TRUE(wait_for(true));
  (*w0)->server->SetServing(false);
  absl::Time t0 = absl::Now();
  ASSERT_TRUE(wait_for(false));
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(500));
  EXPECT_FALSE((*router)->UnresponsiveSince(0).has_value());  // it said so itself
  (*w0)->server->SetServing(true);
  t0 = absl::Now();
  ASSERT_TRUE(wait_for(true));
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(500));
  (*w0)->server->Shutdown(absl::ZeroDuration());
  t0 = absl::Now();
  ASSERT_TRUE(wait_for(false));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  router->reset();
  std::filesystem::remove_all(dir);
}

// Remote mode: a worker restarted elsewhere (systemd, kubelet) at the same address is
// re-admitted by the watcher, and calls go to it again.
TEST(WorkerWatcherTest, ReadmitsAWorkerBackAtTheSameAddress) {
  testing::ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  auto w0 = testing::StartWorker(dir, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(w0.ok()) << w0.status();
  const int port = (*w0)->server->port();
  auto config = ModelConfig::Load(dir);
  ASSERT_TRUE(config.ok());
  RemoteWorkersOptions opt;
  opt.ready_timeout = absl::Seconds(10);
  opt.router.log_state_changes = false;
  opt.router.down_wait = absl::Seconds(15);
  auto router = ConnectToWorkers({(*w0)->server->address()}, *config, opt);
  ASSERT_TRUE(router.ok()) << router.status();
  const Batch batch = RandomBatch(6, spec.hidden, spec.top_k, spec.experts, 21);
  std::vector<float> before, after;
  ASSERT_TRUE(RunLayer(**router, 1, batch, &before).ok());
  auto wait_for = [&](bool up, absl::Duration bound) {
    const absl::Time until = absl::Now() + bound;
    while ((*router)->IsUp(0) != up && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
    return (*router)->IsUp(0) == up;
  };
  std::shared_ptr<const ExpertShard> shard = (*w0)->shard;
  (*w0)->server->Shutdown(absl::ZeroDuration());
  w0->reset();
  ASSERT_TRUE(wait_for(false, absl::Seconds(2)));
  absl::SleepFor(absl::Milliseconds(300));  // a few failed reconnects, as after a crash
  auto service = std::make_shared<ExpertService>(testing::InfoFor(*config, shard->experts()));
  WorkerServerOptions so;
  so.port = port;
  auto again = WorkerServer::Start(so, service);
  ASSERT_TRUE(again.ok()) << again.status();
  service->SetReady(std::make_shared<ShardExecutor>(shard, nullptr));
  (*again)->SetServing(true);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(wait_for(true, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3)) << "reconnect backoff <= 1 s, watcher <= 1 s";
  ASSERT_TRUE(RunLayer(**router, 1, batch, &after).ok());
  EXPECT_EQ(after, before);
  router->reset();
  (*again)->Shutdown(absl::ZeroDuration());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mxserve

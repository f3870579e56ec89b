// LocalWorkerPool with real mxserve-worker processes (found next to this test binary):
// two workers start, answer RunExperts through the router like the reference, and are gone
// after Stop; a worker that cannot start is reported with its exit status.
#include "coordinator/supervision/local_worker_pool.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/time/clock.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/worker_client.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"
#include "tests/worker/test_checkpoint.h"
#include "worker/expert_shard.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;

std::string WorkerBinary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "mxserve-worker").string();
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(LocalWorkerPoolTest, TwoRealWorkersServeAndStop) {
  testing::ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  LocalWorkerPoolOptions opt;
  opt.worker_binary = WorkerBinary();
  opt.model_dir = dir;
  opt.num_workers = 2;
  opt.num_experts = spec.experts;
  opt.startup_timeout = absl::Seconds(60);
  auto pool = LocalWorkerPool::Start(opt);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ASSERT_EQ((*pool)->workers().size(), 2u);
  EXPECT_EQ((*pool)->workers()[0].first_expert, 0);
  EXPECT_EQ((*pool)->workers()[0].end_expert, 4);
  EXPECT_EQ((*pool)->workers()[1].first_expert, 4);
  std::vector<pid_t> pids;
  std::vector<std::unique_ptr<ExpertBackend>> backends;
  for (const auto& w : (*pool)->workers()) {
    pids.push_back(w.pid);
    EXPECT_TRUE(Alive(w.pid));
    auto c = WorkerClient::Create(w.address);
    ASSERT_TRUE(c.ok());
    auto d = (*c)->Describe(absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->ready());
    EXPECT_EQ(d->experts_size(), 4);
    EXPECT_EQ(d->experts(0), w.first_expert);
    backends.push_back(std::move(*c));
  }
  auto router = ExpertRouter::Create(std::move(backends), *Placement::Contiguous(spec.experts, 2),
                                     {.down_wait = absl::ZeroDuration()});
  ASSERT_TRUE(router.ok());

  auto config = ModelConfig::Load(dir);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(config.ok() && ckpt.ok());
  auto all = ExpertShard::Load(**ckpt, *config, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(all.ok());
  const int T = 9, H = spec.hidden, k = spec.top_k;
  std::vector<float> x = testing::RandomFloats(T * H, 3), w(T * k, 0.5f), out(T * H), ref(T * H);
  std::vector<int32_t> ids;
  for (int t = 0; t < T; ++t) {
    ids.push_back(t % 8);
    ids.push_back((t * 3 + 1) % 8 == t % 8 ? (t + 1) % 8 : (t * 3 + 1) % 8);
  }
  kernels::MoeBatch mb{T, k, x.data(), ids.data(), w.data()};
  ASSERT_TRUE(kernels::MoeForwardReference((*all)->layer(2), mb, ref.data()).ok());
  absl::Status s = (*router)->Run(2, T, H, k, x.data(), ids.data(), w.data(), out.data());
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < T * H; ++i) ASSERT_NEAR(out[i], ref[i], 1e-5 + 1e-5 * std::abs(ref[i]));

  const absl::Time t0 = absl::Now();
  (*pool)->Stop();
  // SIGTERM is enough (a clean exit well inside the 5 s grace before SIGKILL), also while
  // clients hold open connections.
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "worker pid " << pid << " still exists";
  s = (*router)->Run(2, T, H, k, x.data(), ids.data(), w.data(), out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  pool->reset();
  std::filesystem::remove_all(dir);
}

TEST(LocalWorkerPoolTest, StartupFailureNamesWorkerAndExitStatus) {
  LocalWorkerPoolOptions opt;
  opt.worker_binary = WorkerBinary();
  opt.model_dir = "/nonexistent/model";
  opt.num_workers = 2;
  opt.num_experts = 8;
  opt.startup_timeout = absl::Seconds(30);
  auto pool = LocalWorkerPool::Start(opt);
  ASSERT_FALSE(pool.ok());
  EXPECT_THAT(std::string(pool.status().message()), HasSubstr("exited with status 78"));
  EXPECT_THAT(std::string(pool.status().message()), HasSubstr("local worker"));

  opt.worker_binary = "/nonexistent/mxserve-worker";
  EXPECT_EQ(LocalWorkerPool::Start(opt).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mxserve

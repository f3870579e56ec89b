// LocalWorkerPool with real mxserve-worker processes (found next to this test binary):
// two workers start, answer RunExperts through the router like the reference, and are gone
// after Stop; a worker that cannot start is reported with its exit status; each worker's
// --device is the one assigned to it, on its first start and after a restart.
#include "coordinator/supervision/local_worker_pool.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/worker_client.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "experts/expert_shard.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"
#include "tests/experts/test_checkpoint.h"

namespace mxserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string WorkerBinary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "mxserve-worker").string();
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// Two real workers over the test checkpoint written to dir.
LocalWorkerPoolOptions TwoWorkers(const std::string& dir,
                                  const testing::ExpertCheckpointSpec& spec) {
  LocalWorkerPoolOptions opt;
  opt.worker_binary = WorkerBinary();
  opt.model_dir = dir;
  opt.num_workers = 2;
  opt.num_experts = spec.experts;
  opt.startup_timeout = absl::Seconds(60);
  return opt;
}

TEST(LocalWorkerPoolTest, TwoRealWorkersServeAndStop) {
  testing::ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  LocalWorkerPoolOptions opt = TwoWorkers(dir, spec);
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
  const ExpertBatch batch{{T, k, x.data(), ids.data(), w.data()}, /*layer=*/2, H};
  ASSERT_TRUE(kernels::MoeForwardReference((*all)->layer(2), batch, ref.data()).ok());
  absl::Status s = (*router)->Run(batch, out.data());
  ASSERT_TRUE(s.ok()) << s;
  for (int i = 0; i < T * H; ++i) ASSERT_NEAR(out[i], ref[i], 1e-5 + 1e-5 * std::abs(ref[i]));

  const absl::Time t0 = absl::Now();
  (*pool)->Stop();
  // SIGTERM is enough (a clean exit well inside the 5 s grace before SIGKILL), also while
  // clients hold open connections.
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  for (pid_t pid : pids) EXPECT_FALSE(Alive(pid)) << "worker pid " << pid << " still exists";
  s = (*router)->Run(batch, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  pool->reset();
  std::filesystem::remove_all(dir);
}

// The pool's worker token (the coordinator's --worker-token flag) reaches every worker it
// spawns, through the child's environment and never its command line: a caller without the
// token (or with one set in the coordinator's own environment) is refused, the pool's own
// readiness checks and a client holding the token get in.
std::string ReadProcFile(pid_t pid, const char* what) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/" + what, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

TEST(LocalWorkerPoolTest, WorkerTokenFromOptionsLocksEveryWorker) {
  testing::ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  setenv("MXSERVE_WORKER_TOKEN", "decoy-from-the-environment", 1);
  LocalWorkerPoolOptions opt = TwoWorkers(dir, spec);
  opt.auth.token = "pool-secret-7f3a";
  auto pool = LocalWorkerPool::Start(opt);
  unsetenv("MXSERVE_WORKER_TOKEN");
  ASSERT_TRUE(pool.ok()) << pool.status();
  for (const auto& w : (*pool)->workers()) {
    WorkerAuthOptions none, decoy, right;
    decoy.token = "decoy-from-the-environment";
    right.token = opt.auth.token;
    for (const WorkerAuthOptions* a : {&none, &decoy}) {
      auto c = WorkerClient::Create(w.address, {.auth = *a});
      ASSERT_TRUE(c.ok());
      auto d = (*c)->Describe(absl::Now() + absl::Seconds(5));
      EXPECT_EQ(d.status().code(), absl::StatusCode::kUnauthenticated) << w.address;
    }
    auto c = WorkerClient::Create(w.address, {.auth = right});
    ASSERT_TRUE(c.ok());
    auto d = (*c)->Describe(absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->ready());
    const std::string cmdline = ReadProcFile(w.pid, "cmdline");
    EXPECT_FALSE(cmdline.empty());
    EXPECT_EQ(cmdline.find("pool-secret"), std::string::npos) << "token on the command line";
    EXPECT_NE(ReadProcFile(w.pid, "environ").find("MXSERVE_WORKER_TOKEN=pool-secret-7f3a"),
              std::string::npos);
  }
  pool->reset();
  std::filesystem::remove_all(dir);
}

// Mutual TLS from the options: the workers listen with the coordinator's certificate and
// require a client certificate; the pool's readiness checks present it.
TEST(LocalWorkerPoolTest, TlsOptionsReachEveryWorker) {
  const std::string certs = testing::NewTempDir();
  const std::string cmd = std::string(MXSERVE_SOURCE_DIR) + "/tests/auth/make_test_certs.sh " +
                          certs + " >" + certs + "/log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl failed: see " << certs << "/log";
  testing::ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  LocalWorkerPoolOptions opt = TwoWorkers(dir, spec);
  opt.auth.tls_ca = certs + "/ca.pem";
  opt.auth.tls_cert = certs + "/both.pem";
  opt.auth.tls_key = certs + "/both.key";
  auto pool = LocalWorkerPool::Start(opt);
  ASSERT_TRUE(pool.ok()) << pool.status();
  for (const auto& w : (*pool)->workers()) {
    auto plain = WorkerClient::Create(w.address, {});
    ASSERT_TRUE(plain.ok());
    EXPECT_FALSE((*plain)->Describe(absl::Now() + absl::Seconds(3)).ok()) << "plaintext let in";
    auto tls = WorkerClient::Create(w.address, {.auth = opt.auth});
    ASSERT_TRUE(tls.ok());
    auto d = (*tls)->Describe(absl::Now() + absl::Seconds(5));
    EXPECT_TRUE(d.ok()) << d.status();
  }
  pool->reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(certs);
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
  // EX_CONFIG from a worker is a configuration error of the pool too (the coordinator exits 78).
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kFailedPrecondition);

  opt.worker_binary = "/nonexistent/mxserve-worker";
  EXPECT_EQ(LocalWorkerPool::Start(opt).status().code(), absl::StatusCode::kFailedPrecondition);
}

// The --device arguments among a command line's words.
std::vector<std::string> DeviceArgs(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args)
    if (absl::StartsWith(a, "--device")) out.push_back(a);
  return out;
}

TEST(LocalWorkerPoolTest, WorkerArgsCarryTheWorkersDevice) {
  LocalWorkerPoolOptions opt;
  opt.worker_binary = "/bin/mxserve-worker";
  opt.model_dir = "/m";
  opt.num_workers = 3;
  opt.num_experts = 6;
  EXPECT_THAT(DeviceArgs(LocalWorkerPool::WorkerArgs(opt, 1, "0-3", "/p")), ::testing::IsEmpty());
  opt.devices = {"cuda:2", "cpu", "cuda:0"};
  opt.extra_args = {"--allow_shared_memory"};
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::string> args = LocalWorkerPool::WorkerArgs(opt, i, "0-3", "/p");
    EXPECT_EQ(args.front(), opt.worker_binary);
    EXPECT_THAT(DeviceArgs(args), ElementsAre("--device=" + opt.devices[i]));
    EXPECT_EQ(args.back(), "--allow_shared_memory");
  }
  opt.devices = {"cpu"};  // one device for three workers: refused before anything starts
  auto pool = LocalWorkerPool::Start(opt);
  ASSERT_FALSE(pool.ok());
  EXPECT_THAT(std::string(pool.status().message()), HasSubstr("1 devices for 3 workers"));
}

// A stand-in mxserve-worker in dir: appends its command line (one word a line, then an empty
// line) to dir/<port file name>.argv, then runs the real worker with --device=cpu in place of
// the device it was given (this build may have no CUDA, this host no GPU), so that the pool
// sees a worker that serves.
std::string DeviceRecordingWorker(const std::string& dir) {
  const std::string path = dir + "/fake-mxserve-worker";
  std::ofstream f(path);
  f << "#!/bin/bash\n"
    << "keep=()\n"
    << "for a in \"$@\"; do\n"
    << "  case $a in --port-file=*) name=$(basename \"${a#--port-file=}\") ;; esac\n"
    << "  case $a in --device=*) ;; *) keep+=(\"$a\") ;; esac\n"
    << "done\n"
    << "printf '%s\\n' \"$@\" '' >> '" << dir << "'/\"$name.argv\"\n"
    << "exec '" << WorkerBinary() << "' \"${keep[@]}\" --device=cpu\n";
  f.close();
  chmod(path.c_str(), 0755);
  return path;
}

// The command lines worker i was started with, oldest first.
std::vector<std::vector<std::string>> StartsOf(const std::string& dir, int i) {
  std::ifstream f(dir + "/worker-" + std::to_string(i) + ".port.argv");
  std::vector<std::vector<std::string>> starts(1);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) {
      starts.emplace_back();
    } else {
      starts.back().push_back(line);
    }
  }
  starts.pop_back();
  return starts;
}

TEST(LocalWorkerPoolTest, EachWorkerKeepsItsDeviceAcrossARestart) {
  testing::ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  const std::string bin = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  LocalWorkerPoolOptions opt = TwoWorkers(dir, spec);
  opt.worker_binary = DeviceRecordingWorker(bin);
  opt.devices = {"cuda:3", "cuda:1"};
  auto pool = LocalWorkerPool::Start(opt);
  ASSERT_TRUE(pool.ok()) << pool.status();
  LocalWorkerPool& p = **pool;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(p.workers()[i].device, opt.devices[i]);
    const auto starts = StartsOf(bin, i);
    ASSERT_EQ(starts.size(), 1u) << "worker " << i;
    EXPECT_THAT(DeviceArgs(starts[0]), ElementsAre("--device=" + opt.devices[i]));
  }
  // Worker 1 dies; the supervisor's path back: reap, respawn, wait for its port.
  const pid_t old_pid = p.workers()[1].pid;
  p.Signal(1, SIGKILL);
  std::optional<int> wstatus;
  for (const absl::Time until = absl::Now() + absl::Seconds(10); !wstatus && absl::Now() < until;) {
    wstatus = p.Reap(1);
    if (!wstatus) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(wstatus.has_value()) << "worker 1 (pid " << old_pid << ") not reaped";
  ASSERT_TRUE(p.Respawn(1).ok());
  for (const absl::Time until = absl::Now() + absl::Seconds(60);
       p.PollAddress(1).empty() && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_FALSE(p.PollAddress(1).empty()) << "the restarted worker never listened";
  EXPECT_NE(p.workers()[1].pid, old_pid);
  EXPECT_EQ(p.workers()[1].device, "cuda:1");
  const auto starts = StartsOf(bin, 1);
  ASSERT_EQ(starts.size(), 2u);
  EXPECT_THAT(DeviceArgs(starts[1]), ElementsAre("--device=cuda:1"));
  EXPECT_EQ(starts[1], starts[0]) << "a restart runs the first start's command line";
  EXPECT_EQ(StartsOf(bin, 0).size(), 1u);
  pool->reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(bin);
}

}  // namespace
}  // namespace mxserve

// The mxserve-worker binary: bad flags/config exit 78 (EX_CONFIG) with a message; a good run
// writes its port file, goes SERVING, answers, and exits 0 on SIGTERM.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "coordinator/router/worker_client.h"
#include "gtest/gtest.h"
#include "tests/experts/test_checkpoint.h"

extern char** environ;

namespace mxserve {
namespace {

std::string WorkerBinary() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "mxserve-worker").string();
}

pid_t Spawn(std::vector<std::string> args) {
  args.insert(args.begin(), WorkerBinary());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ), 0);
  return pid;
}

// Exit code, or -signal; -1000 if it did not end within `limit`.
int WaitExit(pid_t pid, absl::Duration limit = absl::Seconds(30)) {
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    absl::SleepFor(absl::Milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1000;
}

class WorkerMainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::NewTempDir();
    ASSERT_TRUE(testing::WriteExpertCheckpoint(dir_, spec_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  testing::ExpertCheckpointSpec spec_;
};

TEST_F(WorkerMainTest, BadConfigExits78) {
  EXPECT_EQ(WaitExit(Spawn({"--model=" + dir_, "--no_such_flag=1"})), 78);
  EXPECT_EQ(WaitExit(Spawn({"--model=" + dir_, "--port=abc"})), 78);
  EXPECT_EQ(WaitExit(Spawn({"--model=" + dir_, "--port=70000"})), 78);
  EXPECT_EQ(WaitExit(Spawn({"--model=" + dir_, "--experts=0-8"})), 78);  // model has 8
  EXPECT_EQ(WaitExit(Spawn({"--model=" + dir_, "--experts=x"})), 78);
  EXPECT_EQ(WaitExit(Spawn({"--model=" + dir_ + "/missing"})), 78);
  EXPECT_EQ(WaitExit(Spawn({})), 78);  // --model is required
  EXPECT_EQ(WaitExit(Spawn({"--model=" + dir_, "stray"})), 78);
}

TEST_F(WorkerMainTest, CorruptCheckpointExits78) {
  testing::ExpertCheckpointSpec bad = spec_;
  bad.drop_tensor = "model.layers.2.mlp.experts.gate_up_proj_blocks";
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir_, bad).ok());
  EXPECT_EQ(WaitExit(Spawn({"--model=" + dir_, "--experts=0-3"})), 78);
}

TEST_F(WorkerMainTest, PortFileServingAndCleanSigterm) {
  const std::string port_file = dir_ + "/w.port";
  pid_t pid = Spawn({"--model=" + dir_, "--experts=2-5", "--port=0", "--port-file=" + port_file,
                     "--threads=1"});
  int port = 0;
  const absl::Time end = absl::Now() + absl::Seconds(30);
  while (port == 0 && absl::Now() < end) {
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, WNOHANG), 0) << "worker exited early, wait status " << st;
    std::ifstream f(port_file);
    std::string line;
    if (f && std::getline(f, line)) ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &port)) << line;
    if (port == 0) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(port, 0);
  auto client = WorkerClient::Create("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->WaitReady(absl::Now() + absl::Seconds(30)).ok());
  auto d = (*client)->Describe(absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->experts_size(), 4);
  EXPECT_EQ(d->experts(0), 2);
  const int H = spec_.hidden;
  std::vector<float> x = testing::RandomFloats(2 * H, 1), w = {1, 1, 1, 1}, out(2 * H);
  std::vector<int32_t> ids = {2, -1, 5, 3};
  ExpertBatch call{{2, 2, x.data(), ids.data(), w.data()}, 1, H};
  EXPECT_TRUE((*client)->RunExperts(call, out.data(), absl::Now() + absl::Seconds(10)).ok());
  ids[1] = 6;  // not held there
  EXPECT_EQ((*client)->RunExperts(call, out.data(), absl::Now() + absl::Seconds(10)).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Time t0 = absl::Now();
  kill(pid, SIGTERM);
  EXPECT_EQ(WaitExit(pid), 0);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));  // the client's open channel does not hold it
}

}  // namespace
}  // namespace mxserve

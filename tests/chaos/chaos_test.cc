// Chaos: real mxserve-coordinator processes with local workers on 127.0.0.1, workers SIGKILLed
// or SIGSTOPped under streaming load. Requests in flight complete with the fault-free output
// (temperature 0), killed workers are SERVING again within the stated bound, and with one copy
// of each expert and restarts off requests end with a clear error while the coordinator lives.
// Worker pids and states are read from the coordinator's log (one line per state change).
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace mxserve::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Bounds this test holds the implementation to (docs/PERFORMANCE.md, "Worker faults").
constexpr auto kRestartBound = std::chrono::seconds(5);  // kill -> SERVING again
// SIGSTOP -> DOWN: keepalive 1 s + 1 s (~2.1 s measured); slack for a shared 2-core box.
constexpr auto kHangDetectBound = std::chrono::seconds(4);

std::string ReadLog(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Latest pid of each worker, from "local worker pid P at ..." (start order = index) and
// "worker I restarted as pid P".
std::map<int, pid_t> WorkerPids(const std::string& log) {
  std::map<int, pid_t> pids;
  std::istringstream in(log);
  std::string line;
  int next = 0;
  static const std::regex start(R"(local worker pid (\d+) at )");
  static const std::regex restart(R"(worker (\d+) restarted as pid (\d+))");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, start)) pids[next++] = std::stoi(m[1]);
    if (std::regex_search(line, m, restart)) pids[std::stoi(m[1])] = std::stoi(m[2]);
  }
  return pids;
}

int CountLines(const std::string& log, const std::string& needle) {
  int n = 0;
  for (size_t p = log.find(needle); p != std::string::npos; p = log.find(needle, p + 1)) ++n;
  return n;
}

// Polls the log until `needle` occurs more than `before` times; returns the time it took.
std::optional<Clock::duration> WaitForLine(const std::string& log_path, const std::string& needle,
                                           int before, Clock::time_point since,
                                           Clock::duration bound) {
  while (Clock::now() - since < bound) {
    if (CountLines(ReadLog(log_path), needle) > before) return Clock::now() - since;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

std::vector<int> RandomPrompt(std::mt19937& rng, int len) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<int> p;
  for (int i = 0; i < len; ++i) p.push_back(d(rng));
  return p;
}

// One streaming greedy completion; returns its text, or "ERROR: ..." with what went wrong.
std::string StreamCompletion(int port, const std::vector<int>& prompt, int max_tokens) {
  json req = {{"model", "tiny"},     {"prompt", prompt}, {"max_tokens", max_tokens},
              {"temperature", 0.0},  {"stream", true},   {"ignore_eos", true}};
  auto r = HttpCall(port, "POST", "/v1/completions", req.dump());
  if (r.status != 200) return "ERROR: HTTP " + std::to_string(r.status) + " " + r.body;
  bool done = false;
  std::string text;
  for (const auto& ev : ParseSse(r.body, &done)) {
    if (ev.contains("error")) return "ERROR: " + ev["error"].dump();
    if (ev.contains("choices") && !ev["choices"].empty()) text += ev["choices"][0].value("text", "");
  }
  if (!done) return "ERROR: stream without [DONE]";
  return text;
}

struct Workload {
  std::vector<std::vector<int>> prompts;
  int max_tokens = 0;
};

Workload MakeWorkload(int n, int max_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  Workload w;
  w.max_tokens = max_tokens;
  for (int i = 0; i < n; ++i) w.prompts.push_back(RandomPrompt(rng, 3 + (i * 5) % 17));
  return w;
}

// All prompts at once, each on its own connection.
std::vector<std::string> RunWave(int port, const Workload& w) {
  std::vector<std::future<std::string>> f;
  for (const auto& p : w.prompts)
    f.push_back(std::async(std::launch::async, [&, port] { return StreamCompletion(port, p, w.max_tokens); }));
  std::vector<std::string> out;
  for (auto& x : f) out.push_back(x.get());
  return out;
}

bool Alive(pid_t pid) { return kill(pid, 0) == 0; }

// GET /v1/workers (ExpertRouter::PlacementJson with the supervisor's counters).
json Workers(int port) {
  auto r = HttpCall(port, "GET", "/v1/workers");
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body, nullptr, /*allow_exceptions=*/false);
}

class ChaosTest : public ::testing::Test {
 protected:
  void SetUp() override { logs_ = std::make_unique<TempDir>(); }
  std::optional<Coordinator> Start(std::vector<std::string> flags) {
    // Small enough to be quick on 2 cores; replica calls and restarts on loopback.
    flags.insert(flags.end(), {"--worker-threads", "1", "--threads", "1", "--max-restarts", "100"});
    return StartCoordinator(TinyModelDir(), flags, logs_->path());
  }
  std::unique_ptr<TempDir> logs_;
};

// 3 workers, 2 copies of each expert; waves of 24 concurrent streams while a random worker
// is SIGKILLed every ~1.5 s, 10 times: every request completes with the fault-free text and
// every killed worker is SERVING again within kRestartBound.
void SigkillUnderLoad(Coordinator* c);

// (Tensors in the gRPC messages here; the next test runs the default, shared memory.)
TEST_F(ChaosTest, SigkillUnderLoadLosesNothing) {
  auto c = Start({"--local-workers", "3", "--expert-replicas", "2", "--expert_shared_memory=false"});
  ASSERT_TRUE(c.has_value());
  SigkillUnderLoad(&*c);
}

// The same with the tensors in shared memory: a restarted worker maps its client's object again.
TEST_F(ChaosTest, SigkillUnderLoadLosesNothingWithSharedMemory) {
  auto c = Start({"--local-workers", "3", "--expert-replicas", "2"});
  ASSERT_TRUE(c.has_value());
  SigkillUnderLoad(&*c);
}

void SigkillUnderLoad(Coordinator* c) {
  const Workload w = MakeWorkload(24, 64, 2024);
  const std::vector<std::string> want = RunWave(c->http_port, w);
  for (const auto& t : want) ASSERT_EQ(t.rfind("ERROR", 0), std::string::npos) << t;

  std::atomic<bool> killing{true};
  std::vector<double> restart_s;
  std::string killer_error;
  std::thread killer([&] {
    std::mt19937 rng(77);
    for (int k = 0; k < 10; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1000 + rng() % 1000));
      const int victim = static_cast<int>(rng() % 3);
      const std::string log = ReadLog(c->log_path);
      const pid_t pid = WorkerPids(log)[victim];
      const std::string again = "worker " + std::to_string(victim) + " (pid ";
      const int served_before = CountLines(log, ") SERVING again");
      if (pid <= 0 || !Alive(pid)) {
        killer_error = "no live pid for worker " + std::to_string(victim);
        break;
      }
      const auto t0 = Clock::now();
      kill(pid, SIGKILL);
      auto took = WaitForLine(c->log_path, ") SERVING again", served_before, t0, kRestartBound);
      if (!took) {
        killer_error = "worker " + std::to_string(victim) + " not SERVING again within the bound";
        break;
      }
      restart_s.push_back(std::chrono::duration<double>(*took).count());
    }
    killing = false;
  });
  int waves = 0;
  while (killing) {
    std::vector<std::string> got = RunWave(c->http_port, w);
    ++waves;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "wave " << waves << " request " << i;
  }
  killer.join();
  EXPECT_EQ(killer_error, "");
  EXPECT_EQ(restart_s.size(), 10u);
  double worst = 0;
  for (double s : restart_s) worst = std::max(worst, s);
  std::cerr << "[chaos] " << waves << " waves of 24 streams; 10 SIGKILLs; worst kill->SERVING "
            << worst << " s" << std::endl;
  EXPECT_GE(waves, 2);
  const json workers = Workers(c->http_port);
  int restarts = 0;
  for (const auto& wk : workers["workers"]) {
    restarts += wk.value("restarts", 0);
    EXPECT_EQ(wk["state"], "up") << wk;
  }
  EXPECT_EQ(restarts, 10) << workers;
  EXPECT_EQ(HttpCall(c->http_port, "GET", "/health").status, 200);
  EXPECT_TRUE(c->process->Alive());
}

// A worker SIGSTOPped mid-run keeps its socket and answers nothing: marked down within
// kHangDetectBound, its calls fail over, it is SIGKILLed and restarted; nothing is lost.
TEST_F(ChaosTest, SigstopIsDetectedFailedOverAndRestarted) {
  auto c = Start({"--local-workers", "3", "--expert-replicas", "2"});
  ASSERT_TRUE(c.has_value());
  // Long enough (~1-2 s fault-free) that the stop lands mid-wave.
  const Workload w = MakeWorkload(24, 600, 31);
  const std::vector<std::string> want = RunWave(c->http_port, w);
  auto wave = std::async(std::launch::async, [&] { return RunWave(c->http_port, w); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const pid_t pid = WorkerPids(ReadLog(c->log_path))[1];
  ASSERT_GT(pid, 0);
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  auto down = WaitForLine(c->log_path, "worker 1 DOWN", 0, t0, kHangDetectBound);
  EXPECT_TRUE(down.has_value()) << ReadLog(c->log_path);
  auto killed = WaitForLine(c->log_path, "does not answer", 0, t0, std::chrono::seconds(5));
  EXPECT_TRUE(killed.has_value());
  auto back = WaitForLine(c->log_path, "worker 1 restarted as pid", 0, t0, std::chrono::seconds(5) + kRestartBound);
  EXPECT_TRUE(back.has_value());
  EXPECT_TRUE(WaitForLine(c->log_path, ") SERVING again", 0, t0, std::chrono::seconds(10)).has_value());
  const std::vector<std::string> got = wave.get();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
  EXPECT_FALSE(Alive(pid));
  const json workers = Workers(c->http_port);
  EXPECT_GE(workers.value("failovers", 0), 1) << workers;  // calls in flight moved over
  EXPECT_EQ(workers["workers"][1].value("hang_kills", 0), 1) << workers;
  EXPECT_EQ(workers["workers"][1].value("restarts", 0), 1) << workers;
  if (down) std::cerr << "[chaos] SIGSTOP -> DOWN in " << std::chrono::duration<double>(*down).count() << " s" << std::endl;
  // And it serves again, the restarted worker included.
  const std::vector<std::string> again = RunWave(c->http_port, w);
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i], want[i]) << "request " << i;
}

// One copy of each expert. With restarts on, requests pause while the only host of half the
// experts is restarted and then complete unchanged. With restarts off they end with a clear
// error after --worker-down-wait-ms (503 for a request not yet started, an error event for a
// stream), and the coordinator stays up.
TEST_F(ChaosTest, SingleCopyPausesAndResumesOrFailsClearly) {
  {
    auto c = Start({"--local-workers", "2"});
    ASSERT_TRUE(c.has_value());
    const Workload w = MakeWorkload(8, 600, 5);
    const std::vector<std::string> want = RunWave(c->http_port, w);
    auto wave = std::async(std::launch::async, [&] { return RunWave(c->http_port, w); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const pid_t pid = WorkerPids(ReadLog(c->log_path))[0];
    ASSERT_GT(pid, 0);
    kill(pid, SIGKILL);
    const std::vector<std::string> got = wave.get();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
    EXPECT_EQ(CountLines(ReadLog(c->log_path), "worker 0 restarted as pid"), 1);
    const json workers = Workers(c->http_port);
    EXPECT_GE(workers.value("waits", 0), 1) << "no step waited for the restart: " << workers;
    EXPECT_EQ(workers.value("failed_calls", -1), 0) << workers;
  }
  auto c = Start({"--local-workers", "2", "--no-restart", "--worker-down-wait-ms", "1500"});
  ASSERT_TRUE(c.has_value());
  const pid_t pid = WorkerPids(ReadLog(c->log_path))[0];
  ASSERT_GT(pid, 0);
  kill(pid, SIGKILL);
  ASSERT_TRUE(WaitForLine(c->log_path, "it stays down", 0, Clock::now(), std::chrono::seconds(5)));
  std::mt19937 rng(8);
  const auto t0 = Clock::now();
  const std::string streamed = StreamCompletion(c->http_port, RandomPrompt(rng, 8), 16);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(1400));
  EXPECT_NE(streamed.find("ERROR"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("no healthy worker"), std::string::npos) << streamed;
  json req = {{"model", "tiny"}, {"prompt", RandomPrompt(rng, 8)}, {"max_tokens", 8}, {"temperature", 0.0}};
  auto r = HttpCall(c->http_port, "POST", "/v1/completions", req.dump());
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("no healthy worker"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("killed by signal 9"), std::string::npos) << r.body;
  EXPECT_EQ(HttpCall(c->http_port, "GET", "/health").status, 200);
  EXPECT_TRUE(c->process->Alive());
}

}  // namespace
}  // namespace mxserve::testing

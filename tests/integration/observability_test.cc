// Health, drain, metrics and systemd notifications of a real mxserve-coordinator (with local
// mxserve-worker processes) on 127.0.0.1: readiness through load → ready → degraded (a worker
// SIGSTOPped mid-step; a worker killed) → ready; drain under load on SIGTERM; /metrics parsed
// back with counters that move; the sd_notify sequence seen on a fake NOTIFY_SOCKET.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"
#include "tests/observability/prom_text.h"

namespace mxserve::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string CompletionBody(int max_tokens, bool stream) {
  return json{{"model", "tiny"},       {"prompt", "hello"}, {"max_tokens", max_tokens},
              {"temperature", 0.0},    {"ignore_eos", true}, {"stream", stream}}
      .dump();
}

// A streamed completion ran to its end normally: finish_reason "length", [DONE], no error.
void ExpectCompleteStream(const HttpResponse& r) {
  ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
  bool done = false;
  std::vector<json> events = ParseSse(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  std::string finish;
  for (const json& e : events) {
    EXPECT_FALSE(e.contains("error")) << e.dump();
    if (e.contains("choices") && !e["choices"].empty() && e["choices"][0]["finish_reason"].is_string())
      finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(finish, "length");
}

std::future<HttpResponse> StreamAsync(int port, int max_tokens) {
  return std::async(std::launch::async, [port, max_tokens] {
    return HttpCall(port, "POST", "/v1/completions", CompletionBody(max_tokens, true));
  });
}

int WorkerPid(int port, int index) {
  HttpResponse r = HttpCall(port, "GET", "/v1/workers");
  json j = json::parse(r.body, nullptr, false);
  if (!j.is_object()) return -1;
  return j["workers"][index]["pid"].get<int>();
}

// Polls GET target until the status is `want` (bounded); returns the last response.
HttpResponse PollStatus(int port, const std::string& target, int want, std::chrono::milliseconds max,
                        std::chrono::milliseconds every = std::chrono::milliseconds(20)) {
  const auto until = Clock::now() + max;
  HttpResponse r;
  do {
    r = HttpCall(port, "GET", target);
    if (r.status == want) return r;
    std::this_thread::sleep_for(every);
  } while (Clock::now() < until);
  return r;
}

grpc::health::v1::HealthCheckResponse::ServingStatus GrpcHealth(int port, const std::string& service) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                     grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return grpc::health::v1::HealthCheckResponse::UNKNOWN;
  return resp.status();
}

int WaitExit(Process& p, std::chrono::seconds max) {
  const auto until = Clock::now() + max;
  while (p.Alive() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return p.Stop(std::chrono::milliseconds(100));  // already reaped: returns its status
}

std::string ReadLog(const std::string& path) {
  FILE* f = fopen(path.c_str(), "r");
  if (!f) return "";
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  fclose(f);
  return s;
}

TEST(Observability, MetricsParseAndCountersMove) {
  TempDir logs;
  auto c = StartCoordinator(TinyModelDir(), {"--local-workers", "2"}, logs.path());
  ASSERT_TRUE(c.has_value());
  HttpResponse m0 = HttpCall(c->http_port, "GET", "/metrics");
  ASSERT_EQ(m0.status, 200);
  EXPECT_NE(m0.headers["content-type"].find("version=0.0.4"), std::string::npos);
  PromPage before = ParsePrometheusText(m0.body);
  ASSERT_EQ(before.error, "") << m0.body.substr(0, 2000);
  for (int i = 0; i < 3; ++i) {
    HttpResponse r = HttpCall(c->http_port, "POST", "/v1/completions", CompletionBody(8, false));
    ASSERT_EQ(r.status, 200) << r.body;
  }
  ExpectCompleteStream(HttpCall(c->http_port, "POST", "/v1/completions", CompletionBody(8, true)));
  PromPage after = ParsePrometheusText(HttpCall(c->http_port, "GET", "/metrics").body);
  ASSERT_EQ(after.error, "");
  auto delta = [&](const std::string& name, const std::map<std::string, std::string>& l = {}) {
    return after.Sum(name, l) - before.Sum(name, l);
  };
  EXPECT_EQ(delta("mxserve:request_success_total", {{"finished_reason", "length"}}), 4);
  EXPECT_EQ(delta("mxserve:generation_tokens_total"), 32);
  EXPECT_GT(delta("mxserve:prompt_tokens_total"), 0);
  EXPECT_EQ(delta("mxserve:time_to_first_token_seconds_count"), 4);
  EXPECT_EQ(delta("mxserve:inter_token_latency_seconds_count"), 28);
  EXPECT_EQ(delta("mxserve:e2e_request_latency_seconds_count"), 4);
  EXPECT_GE(delta("mxserve:iteration_tokens_total_count"), 8);
  EXPECT_GE(delta("mxserve:step_duration_seconds_count"), 8);
  EXPECT_GT(delta("mxserve:expert_calls_total"), 0);
  EXPECT_GT(delta("mxserve:expert_call_sent_bytes_total"), 0);
  EXPECT_GT(delta("mxserve:expert_call_received_bytes_total"), 0);
  EXPECT_GT(delta("mxserve:expert_call_latency_seconds_count"), 0);
  EXPECT_EQ(after.Get("mxserve:worker_up", {{"worker", "worker0"}}), 1);
  EXPECT_EQ(after.Get("mxserve:worker_up", {{"worker", "worker1"}}), 1);
  EXPECT_EQ(after.Get("mxserve:num_requests_running"), 0);
  EXPECT_EQ(after.Get("mxserve:ready"), 1);
  EXPECT_EQ(after.Get("mxserve:worker_restarts_total", {{"worker", "worker1"}}), 0);
  // The admin view: both workers up, placement listed.
  json w = json::parse(HttpCall(c->http_port, "GET", "/v1/workers").body, nullptr, false);
  ASSERT_TRUE(w.is_object());
  ASSERT_EQ(w["workers"].size(), 2u);
  EXPECT_EQ(w["workers"][0]["state"], "up");
  EXPECT_EQ(w["workers"][1]["state"], "up");
  EXPECT_EQ(w["groups"].size(), 2u);
}

// load → ready; a worker stops answering mid-step → not ready within the progress bound, the
// reason names the worker; it resumes → ready again, and the requests complete normally.
TEST(Observability, HealthThroughLoadStallAndRecovery) {
  TempDir logs;
  // Long router/watcher timeouts: the progress rule, not failover, is what must notice.
  auto c = StartCoordinator(TinyModelDir(),
                            {"--local-workers", "2", "--progress-timeout-s", "1",
                             "--expert-call-timeout-ms", "60000", "--worker-keepalive-ms", "60000",
                             "--health-probe-timeout-ms", "60000"},
                            logs.path());
  ASSERT_TRUE(c.has_value());
  const int port = c->http_port;
  EXPECT_EQ(PollStatus(port, "/health/ready", 200, std::chrono::seconds(5)).status, 200);
  EXPECT_EQ(HttpCall(port, "GET", "/v2/health/ready").status, 200);
  EXPECT_EQ(HttpCall(port, "GET", "/v2/models/tiny/ready").status, 200);
  EXPECT_EQ(GrpcHealth(c->grpc_port, ""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(GrpcHealth(c->grpc_port, "mxserve.v1.Inference"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  const int worker1 = WorkerPid(port, 1);
  ASSERT_GT(worker1, 0);

  std::vector<std::future<HttpResponse>> load;
  for (int i = 0; i < 3; ++i) load.push_back(StreamAsync(port, 1500));
  // Under load, steps complete: still ready.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  HttpResponse under_load = HttpCall(port, "GET", "/health/ready");
  EXPECT_EQ(under_load.status, 200) << under_load.body;

  ASSERT_EQ(kill(worker1, SIGSTOP), 0);
  const auto stopped = Clock::now();
  HttpResponse stalled = PollStatus(port, "/health/ready", 503, std::chrono::seconds(10));
  const double detect_s = std::chrono::duration<double>(Clock::now() - stopped).count();
  ASSERT_EQ(stalled.status, 503) << stalled.body;
  json why = json::parse(stalled.body, nullptr, false);
  ASSERT_TRUE(why.is_object()) << stalled.body;
  EXPECT_EQ(why["status"], "not ready");
  const std::string reason = why["reasons"].dump();
  EXPECT_NE(reason.find("no step completed for"), std::string::npos) << reason;
  EXPECT_NE(reason.find("running request"), std::string::npos) << reason;
  EXPECT_NE(reason.find("expert call"), std::string::npos) << reason;
  EXPECT_NE(reason.find("waiting on worker 1"), std::string::npos) << reason;
  EXPECT_LT(detect_s, 5.0);
  EXPECT_EQ(HttpCall(port, "GET", "/v2/health/ready").status, 503);
  // Liveness does not follow: the process answers, restarting it would only lose the requests.
  EXPECT_EQ(HttpCall(port, "GET", "/health/live").status, 200);
  EXPECT_EQ(HttpCall(port, "GET", "/health").status, 200);
  // gRPC health follows readiness (polled every 500 ms).
  auto grpc_until = Clock::now() + std::chrono::seconds(3);
  auto st = GrpcHealth(c->grpc_port, "mxserve.v1.Inference");
  while (st != grpc::health::v1::HealthCheckResponse::NOT_SERVING && Clock::now() < grpc_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    st = GrpcHealth(c->grpc_port, "mxserve.v1.Inference");
  }
  EXPECT_EQ(st, grpc::health::v1::HealthCheckResponse::NOT_SERVING);

  ASSERT_EQ(kill(worker1, SIGCONT), 0);
  EXPECT_EQ(PollStatus(port, "/health/ready", 200, std::chrono::seconds(10)).status, 200);
  for (auto& f : load) ExpectCompleteStream(f.get());
  EXPECT_EQ(PollStatus(port, "/health/ready", 200, std::chrono::seconds(5)).status, 200);
  const std::string log = ReadLog(c->log_path);
  EXPECT_NE(log.find("health: NOT READY: no step completed"), std::string::npos) << log;
  EXPECT_NE(log.find("waiting on worker 1"), std::string::npos);
  EXPECT_NE(log.find("health: ready"), std::string::npos);
  fprintf(stderr, "stall detected after %.2f s (progress timeout 1 s)\n", detect_s);
}

// A worker killed: the router marks it down → readiness says which experts have no host; the
// supervisor restarts it → ready again.
TEST(Observability, DegradedWhileAWorkerIsDownThenReadyAgain) {
  TempDir logs;
  auto c = StartCoordinator(TinyModelDir(), {"--local-workers", "2"}, logs.path());
  ASSERT_TRUE(c.has_value());
  const int port = c->http_port;
  ASSERT_EQ(PollStatus(port, "/health/ready", 200, std::chrono::seconds(5)).status, 200);
  const int worker1 = WorkerPid(port, 1);
  ASSERT_GT(worker1, 0);
  ASSERT_EQ(kill(worker1, SIGKILL), 0);
  HttpResponse down = PollStatus(port, "/health/ready", 503, std::chrono::seconds(10),
                                 std::chrono::milliseconds(5));
  ASSERT_EQ(down.status, 503) << down.body;
  EXPECT_NE(down.body.find("no healthy worker"), std::string::npos) << down.body;
  EXPECT_NE(down.body.find("worker 1"), std::string::npos) << down.body;
  EXPECT_EQ(HttpCall(port, "GET", "/health/live").status, 200);
  EXPECT_EQ(PollStatus(port, "/health/ready", 200, std::chrono::seconds(30)).status, 200);
  PromPage m = ParsePrometheusText(HttpCall(port, "GET", "/metrics").body);
  ASSERT_EQ(m.error, "");
  EXPECT_GE(m.Sum("mxserve:worker_restarts_total", {{"worker", "worker1"}}), 1);
  EXPECT_GE(m.Sum("mxserve:worker_state_changes_total", {{"worker", "worker1"}}), 2);
  EXPECT_EQ(m.Get("mxserve:worker_up", {{"worker", "worker1"}}), 1);
  EXPECT_NE(WorkerPid(port, 1), worker1);
  ExpectCompleteStream(HttpCall(port, "POST", "/v1/completions", CompletionBody(16, true)));
}

// SIGTERM under load: readiness 503 at once, new requests 503 + Retry-After, the streams in
// flight run to their end, exit status 0.
TEST(Observability, DrainUnderLoad) {
  TempDir logs;
  // One seat: at SIGTERM one request runs and three wait; the drain must finish all four.
  auto c = StartCoordinator(TinyModelDir(),
                            {"--local-workers", "2", "--drain-grace-s", "60", "--max-num-seqs", "1"},
                            logs.path());
  ASSERT_TRUE(c.has_value());
  const int port = c->http_port;
  std::vector<std::future<HttpResponse>> load;
  for (int i = 0; i < 4; ++i) load.push_back(StreamAsync(port, 1500));
  // Wait until they are all in the engine.
  const auto until = Clock::now() + std::chrono::seconds(10);
  double running = 0;
  while (Clock::now() < until) {
    PromPage m = ParsePrometheusText(HttpCall(port, "GET", "/metrics").body);
    running = m.Sum("mxserve:num_requests_running") + m.Sum("mxserve:num_requests_waiting");
    if (running >= 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(running, 4);
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(c->process->pid(), SIGTERM), 0);
  HttpResponse ready = PollStatus(port, "/health/ready", 503, std::chrono::seconds(2), std::chrono::milliseconds(5));
  const double flip_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  ASSERT_EQ(ready.status, 503);
  EXPECT_NE(ready.body.find("draining"), std::string::npos) << ready.body;
  EXPECT_LT(flip_ms, 1000);
  int still_running = 0;
  for (auto& f : load)
    still_running += f.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  EXPECT_GT(still_running, 0) << "the load finished before the drain began; the test proves nothing";
  HttpResponse refused = HttpCall(port, "POST", "/v1/completions", CompletionBody(4, false));
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.headers["retry-after"], "1");
  EXPECT_NE(refused.body.find("draining"), std::string::npos) << refused.body;
  json err = json::parse(refused.body, nullptr, false);
  EXPECT_TRUE(err.is_object() && err.contains("error")) << refused.body;
  EXPECT_EQ(HttpCall(port, "GET", "/health/live").status, 200);
  PromPage during = ParsePrometheusText(HttpCall(port, "GET", "/metrics").body);
  EXPECT_EQ(during.error, "");
  EXPECT_GE(during.Sum("mxserve:requests_rejected_total", {{"reason", "draining"}}), 1);
  EXPECT_EQ(during.Get("mxserve:accepting_requests"), 0);
  EXPECT_EQ(during.Get("mxserve:ready"), 0);
  for (auto& f : load) ExpectCompleteStream(f.get());
  const int status = WaitExit(*c->process, std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const std::string log = ReadLog(c->log_path);
  EXPECT_NE(log.find("draining: "), std::string::npos) << log;
  EXPECT_NE(log.find("drained in"), std::string::npos) << log;
  fprintf(stderr, "readiness 503 %.1f ms after SIGTERM; %d of 4 streams were still running\n",
          flip_ms, still_running);
}

// Past the grace the requests in flight end with a clear error event; exit is still 0. A second
// signal during a drain exits at once.
TEST(Observability, DrainGraceExpiresAndSecondSignalExitsAtOnce) {
  TempDir logs;
  {
    auto c = StartCoordinator(TinyModelDir(), {"--drain-grace-s", "0.2"}, logs.path());
    ASSERT_TRUE(c.has_value());
    auto f = StreamAsync(c->http_port, 4000);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_EQ(kill(c->process->pid(), SIGTERM), 0);
    HttpResponse r = f.get();
    bool done = false;
    std::vector<json> events = ParseSse(r.body, &done);
    ASSERT_FALSE(events.empty());
    EXPECT_TRUE(events.back().contains("error")) << events.back().dump();
    EXPECT_NE(events.back().dump().find("drain grace period"), std::string::npos) << events.back();
    const int status = WaitExit(*c->process, std::chrono::seconds(30));
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  {
    auto c = StartCoordinator(TinyModelDir(), {"--drain-grace-s", "60"}, logs.path());
    ASSERT_TRUE(c.has_value());
    auto f = StreamAsync(c->http_port, 4000);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_EQ(kill(c->process->pid(), SIGTERM), 0);
    PollStatus(c->http_port, "/health/ready", 503, std::chrono::seconds(2), std::chrono::milliseconds(5));
    const auto t0 = Clock::now();
    ASSERT_EQ(kill(c->process->pid(), SIGINT), 0);
    const int status = WaitExit(*c->process, std::chrono::seconds(5));
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
    f.get();
  }
}

// A fake systemd: a unix datagram socket as NOTIFY_SOCKET, read all the time on a thread (as
// systemd does: a full datagram queue would block the senders). Messages are kept with the
// sender's pid (SCM_CREDENTIALS), since local workers inherit the variable and speak too.
class FakeSystemd {
 public:
  struct Message {
    pid_t pid;
    std::string text;
  };
  FakeSystemd() {
    path_ = "/tmp/mxserve-notify-it-" + std::to_string(getpid());
    unlink(path_.c_str());
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path_.c_str());
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    reader_ = std::thread([this] { Read(); });
  }
  ~FakeSystemd() {
    stop_.store(true);
    reader_.join();
    close(fd_);
    unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }
  // Waits `d`, then returns everything that arrived since the last call.
  std::vector<Message> Receive(std::chrono::milliseconds d) {
    std::this_thread::sleep_for(d);
    std::lock_guard<std::mutex> l(mu_);
    return std::exchange(messages_, {});
  }

 private:
  void Read() {
    while (!stop_.load()) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      char cbuf[CMSG_SPACE(sizeof(ucred))];
      iovec iov{buf, sizeof(buf)};
      msghdr mh{};
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      mh.msg_control = cbuf;
      mh.msg_controllen = sizeof(cbuf);
      ssize_t n = recvmsg(fd_, &mh, 0);
      if (n <= 0) continue;
      pid_t pid = -1;
      for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS)
          pid = reinterpret_cast<ucred*>(CMSG_DATA(c))->pid;
      }
      std::lock_guard<std::mutex> l(mu_);
      messages_.push_back({pid, std::string(buf, n)});
    }
  }

  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Message> messages_;
  std::thread reader_;
};

std::vector<std::string> From(const std::vector<FakeSystemd::Message>& all, pid_t pid) {
  std::vector<std::string> out;
  for (const auto& m : all)
    if (m.pid == pid) out.push_back(m.text);
  return out;
}
int CountPrefix(const std::vector<std::string>& v, const std::string& prefix) {
  int n = 0;
  for (const auto& s : v) n += s.rfind(prefix, 0) == 0;
  return n;
}

TEST(Observability, SystemdNotifySequence) {
  FakeSystemd systemd;
  ASSERT_TRUE(systemd.bound());
  TempDir logs;
  setenv("NOTIFY_SOCKET", systemd.path().c_str(), 1);
  setenv("WATCHDOG_USEC", "2000000", 1);  // 2 s: the coordinator pings every 0.5 s at most
  // Long call timeouts so a stopped worker stalls the step (the watchdog must go quiet).
  auto c = StartCoordinator(TinyModelDir(),
                            {"--local-workers", "2", "--expert-call-timeout-ms", "60000",
                             "--worker-keepalive-ms", "60000", "--health-probe-timeout-ms", "60000",
                             "--worker-down-wait-ms", "100"},
                            logs.path());
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  ASSERT_TRUE(c.has_value());
  const pid_t pid = c->process->pid();
  // Start-up and idle: EXTEND_TIMEOUT_USEC..., READY=1, then WATCHDOG=1 from the idle loop.
  std::vector<FakeSystemd::Message> all = systemd.Receive(std::chrono::milliseconds(1600));
  std::vector<std::string> mine = From(all, pid);
  ASSERT_FALSE(mine.empty());
  EXPECT_EQ(mine.front().rfind("EXTEND_TIMEOUT_USEC=", 0), 0u) << mine.front();
  EXPECT_GE(CountPrefix(mine, "EXTEND_TIMEOUT_USEC="), 3);
  size_t ready_at = mine.size();
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].rfind("READY=1", 0) == 0 && ready_at == mine.size()) ready_at = i;
  ASSERT_LT(ready_at, mine.size());
  EXPECT_NE(mine[ready_at].find("STATUS=serving"), std::string::npos) << mine[ready_at];
  for (size_t i = ready_at; i < mine.size(); ++i)
    EXPECT_NE(mine[i].rfind("EXTEND_TIMEOUT_USEC=", 0), 0u) << "extension after READY=1";
  EXPECT_GE(CountPrefix(mine, "WATCHDOG=1"), 2) << "idle loop must keep pinging";

  // A stuck step (worker 1 stopped mid-call): the loop stops pinging.
  const int worker1 = WorkerPid(c->http_port, 1);
  ASSERT_GT(worker1, 0);
  auto f = StreamAsync(c->http_port, 3000);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(kill(worker1, SIGSTOP), 0);
  systemd.Receive(std::chrono::milliseconds(600));  // a ping already due may still arrive
  std::vector<std::string> stuck = From(systemd.Receive(std::chrono::milliseconds(1500)), pid);
  EXPECT_EQ(CountPrefix(stuck, "WATCHDOG=1"), 0) << "pings must stop while the loop is stuck";
  ASSERT_EQ(kill(worker1, SIGCONT), 0);
  std::vector<std::string> resumed = From(systemd.Receive(std::chrono::milliseconds(1500)), pid);
  EXPECT_GE(CountPrefix(resumed, "WATCHDOG=1"), 1) << "pings resume with the loop";
  ExpectCompleteStream(f.get());

  // Drain: STOPPING=1 with a STATUS line, then exit 0.
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  std::vector<std::string> stopping = From(systemd.Receive(std::chrono::milliseconds(800)), pid);
  ASSERT_GE(CountPrefix(stopping, "STOPPING=1"), 1);
  for (const auto& m : stopping)
    if (m.rfind("STOPPING=1", 0) == 0) EXPECT_NE(m.find("STATUS=draining"), std::string::npos) << m;
  const int status = WaitExit(*c->process, std::chrono::seconds(30));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace mxserve::testing

// Limits and auth end to end: real mxserve-coordinator and mxserve-worker processes on
// 127.0.0.1 (tiny model). The engine's real queue answers 429 with Retry-After; the deadline
// stops a real generation with 504 and the server stays ready and serves the next request; the
// API key guards the public door while probes stay open; workers refuse a coordinator with
// the wrong token (and it exits 78, a configuration error systemd does not restart).
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "tests/frontends/http_client.h"
#include "tests/integration/harness.h"

namespace mxserve::testing {
namespace {

using json = nlohmann::json;

constexpr char kKey[] = "e2e-api-key-0123456789";

// One request with an optional bearer key, on its own connection.
HttpResult Call(int port, const std::string& method, const std::string& path,
                const std::string& body = "", const std::string& key = "") {
  HttpClient c(port);
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
  if (method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "Connection: close\r\n\r\n" + body;
  c.WriteRaw(req);
  return c.Read();
}

std::string Long(int max_tokens, bool stream = false) {
  return json{{"prompt", "hello"}, {"max_tokens", max_tokens}, {"ignore_eos", true},
              {"temperature", 0}, {"stream", stream}}
      .dump();
}

// Starts a worker on the tiny model with `flags`; returns its port ("" on failure).
std::string StartWorker(const std::string& dir, const std::string& name,
                        const std::vector<std::string>& flags, std::unique_ptr<Process>* out) {
  const std::string port_file = dir + "/" + name + ".port";
  std::vector<std::string> args = {"--model", TinyModelDir(), "--port", "0", "--port-file", port_file};
  args.insert(args.end(), flags.begin(), flags.end());
  *out = std::make_unique<Process>(BinDir() + "/mxserve-worker", args, dir + "/" + name + ".log");
  std::string port;
  for (int i = 0; i < 600 && port.empty(); ++i) {
    if (FILE* f = fopen(port_file.c_str(), "r")) {
      char buf[16] = {0};
      if (fgets(buf, sizeof buf, f)) port = std::string(buf, strcspn(buf, "\n"));
      fclose(f);
    }
    if (port.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return port;
}

class LimitsE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { logs_ = new TempDir(); }
  static void TearDownTestSuite() {
    delete logs_;
    logs_ = nullptr;
  }
  static inline TempDir* logs_ = nullptr;
};

TEST_F(LimitsE2eTest, FullQueueIs429WithRetryAfter) {
  auto c = StartCoordinator(TinyModelDir(),
                            // Two workers make each step ~1 ms, so the 4000-token first
                            // request runs for seconds: a wide window for the queue to be full.
                            {"--max-num-seqs", "1", "--max-waiting", "1", "--request-timeout-s", "30",
                             "--local-workers", "2"},
                            logs_->path());
  ASSERT_TRUE(c.has_value());
  // The first request runs (we see its first streamed bytes), the second waits in the queue.
  HttpClient first(c->http_port);
  first.WriteRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Content-Length: " + std::to_string(Long(4000, true).size()) + "\r\n\r\n" +
                 Long(4000, true));
  ASSERT_NE(first.ReadSome().find("200"), std::string::npos);
  // The 200 header goes out when the engine accepts the request, before it is scheduled. Move
  // on only when /metrics shows the state we need, or the steps race: a second request sent
  // while the first still waits would itself be the 429, and a probe sent before the second
  // waits would take the one waiting seat.
  auto wait_for_gauge = [&](const std::string& name, double at_least) {
    for (int i = 0; i < 500; ++i) {  // bounded: 5 s
      HttpResult m = Call(c->http_port, "GET", "/metrics", "");
      size_t at = m.body.find("\n" + name + "{");
      if (at != std::string::npos) {
        size_t sp = m.body.find("} ", at);
        if (sp != std::string::npos && std::atof(m.body.c_str() + sp + 2) >= at_least) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  };
  ASSERT_TRUE(wait_for_gauge("mxserve:num_requests_running", 1)) << "the first never ran";
  HttpClient second(c->http_port);
  second.WriteRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  "Content-Length: " + std::to_string(Long(4000).size()) + "\r\n\r\n" + Long(4000));
  const bool queued = wait_for_gauge("mxserve:num_requests_waiting", 1);
  ASSERT_TRUE(queued) << "the second request never showed as waiting in /metrics";
  HttpResult third;
  for (int i = 0; i < 100; ++i) {  // until the 429 (bounded: 5 s)
    third = Call(c->http_port, "POST", "/v1/completions", Long(4));
    if (third.status == 429) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(third.status, 429) << third.body;
  EXPECT_EQ(third.header("retry-after"), "1");
  EXPECT_EQ(json::parse(third.body)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(Call(c->http_port, "GET", "/health/live").status, 200);
  // Dropping both clients (a reset: a FIN alone is a half-close, still answered) cancels their
  // sequences; the server takes new work again.
  first.Reset();
  second.Reset();
  HttpResult after;
  for (int i = 0; i < 200; ++i) {
    after = Call(c->http_port, "POST", "/v1/completions", Long(4));
    if (after.status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(after.status, 200) << after.body;
}

TEST_F(LimitsE2eTest, AuthDeadlineAndPromptLimitWithTokenGuardedWorkers) {
  setenv("MXSERVE_API_KEY", kKey, 1);
  setenv("MXSERVE_WORKER_TOKEN", "e2e-worker-token", 1);  // inherited by the local workers
  auto c = StartCoordinator(TinyModelDir(),
                            {"--local-workers", "1", "--request-timeout-s", "1",
                             "--max-prompt-tokens", "32"},
                            logs_->path());
  unsetenv("MXSERVE_API_KEY");
  unsetenv("MXSERVE_WORKER_TOKEN");
  ASSERT_TRUE(c.has_value());
  const int port = c->http_port;
  // The key: probes open, the API closed without it.
  EXPECT_EQ(Call(port, "GET", "/health/ready").status, 200);
  EXPECT_EQ(Call(port, "GET", "/health/live").status, 200);
  EXPECT_EQ(Call(port, "GET", "/v1/models").status, 401);
  EXPECT_EQ(Call(port, "GET", "/v1/models", "", "wrong").status, 401);
  HttpResult r = Call(port, "POST", "/v1/completions", Long(4), "wrong");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "invalid_api_key");
  // With it, a short request runs through the token-guarded worker.
  r = Call(port, "POST", "/v1/completions", Long(4), kKey);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["completion_tokens"], 4);
  // A long one (4000 tokens: several seconds on the CPU path) is stopped by the deadline, whole
  // or streamed; 1 s leaves the short requests here room on a loaded CI machine.
  const auto t0 = std::chrono::steady_clock::now();
  r = Call(port, "POST", "/v1/completions", Long(4000), kKey);
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(r.body.find("--request-timeout-s"), std::string::npos) << r.body;
  r = Call(port, "POST", "/v1/completions", Long(4000, true), kKey);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("--request-timeout-s"), std::string::npos) << r.body.substr(0, 300);
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos);
  // ...and its resources are back: still ready, and the next request runs.
  EXPECT_EQ(Call(port, "GET", "/health/ready").status, 200);
  r = Call(port, "POST", "/v1/completions", Long(4), kKey);
  EXPECT_EQ(r.status, 200) << r.body;
  // The prompt limit.
  r = Call(port, "POST", "/v1/completions",
           json{{"prompt", std::string(200, 'a')}, {"max_tokens", 1}}.dump(), kKey);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "prompt_too_long");
  // The body limit (8 MiB by default).
  r = Call(port, "POST", "/v1/completions",
           json{{"prompt", std::string(9u << 20, 'a')}}.dump(), kKey);
  EXPECT_EQ(r.status, 413);
}

TEST_F(LimitsE2eTest, WorkerRefusesACoordinatorWithTheWrongToken) {
  const std::string port_file = logs_->path() + "/worker.port";
  Process worker(BinDir() + "/mxserve-worker",
                 {"--model", TinyModelDir(), "--port", "0", "--port-file", port_file,
                  "--worker-token", "right-token"},
                 logs_->path() + "/worker.log");
  std::string port;
  for (int i = 0; i < 600 && port.empty(); ++i) {
    FILE* f = fopen(port_file.c_str(), "r");
    if (f) {
      char buf[16] = {0};
      if (fgets(buf, sizeof buf, f)) port = std::string(buf, strcspn(buf, "\n"));
      fclose(f);
    }
    if (port.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(port.empty());
  const std::string log = logs_->path() + "/refused.log";
  int rc = RunCommand(BinDir() + "/mxserve-coordinator",
                      {"--model", TinyModelDir(), "--host", "127.0.0.1", "--http-port", "0",
                       "--grpc-port", "0", "--workers", "127.0.0.1:" + port,
                       "--worker-token", "wrong-token", "--worker-startup-timeout-s", "20"},
                      log);
  EXPECT_EQ(rc, 78);
  std::string text;
  if (FILE* f = fopen(log.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    fclose(f);
  }
  EXPECT_NE(text.find("wrong worker token"), std::string::npos) << text;
  // The right token is let in.
  auto c = StartCoordinator(TinyModelDir(),
                            {"--workers", "127.0.0.1:" + port, "--worker-token", "right-token"},
                            logs_->path());
  ASSERT_TRUE(c.has_value());
  HttpResult r = Call(c->http_port, "POST", "/v1/completions", Long(4));
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(LimitsE2eTest, MutualTlsBetweenCoordinatorAndWorker) {
  const std::string certs = logs_->path() + "/certs";
  ASSERT_EQ(std::system((std::string(MXSERVE_SOURCE_DIR) + "/tests/auth/make_test_certs.sh " +
                         certs + " >/dev/null 2>&1").c_str()),
            0);
  std::unique_ptr<Process> worker;
  const std::string port = StartWorker(
      logs_->path(), "tls-worker",
      {"--tls-ca", certs + "/ca.pem", "--tls-cert", certs + "/server.pem", "--tls-key",
       certs + "/server.key"},
      &worker);
  ASSERT_FALSE(port.empty());
  // Without a client certificate the coordinator never gets through the handshake.
  int rc = RunCommand(BinDir() + "/mxserve-coordinator",
                      {"--model", TinyModelDir(), "--host", "127.0.0.1", "--http-port", "0",
                       "--grpc-port", "0", "--workers", "127.0.0.1:" + port,
                       "--worker-startup-timeout-s", "3"},
                      logs_->path() + "/tls-refused.log");
  EXPECT_NE(rc, 0);
  // With one signed by the CA, it serves.
  auto c = StartCoordinator(TinyModelDir(),
                            {"--workers", "127.0.0.1:" + port, "--tls-ca", certs + "/ca.pem",
                             "--tls-cert", certs + "/client.pem", "--tls-key",
                             certs + "/client.key"},
                            logs_->path());
  ASSERT_TRUE(c.has_value());
  HttpResult r = Call(c->http_port, "POST", "/v1/completions", Long(4));
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["completion_tokens"], 4);
}

}  // namespace
}  // namespace mxserve::testing

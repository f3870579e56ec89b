// Issue-56 hardening against the real binaries: the --worker-token flag locks the local workers
// the coordinator spawns, and every load or config error exits 78 (EX_CONFIG, which the systemd
// units do not restart) with a message naming what is wrong, --worker-devices among them.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "mxserve/v1/expert_worker.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace mxserve::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

grpc::StatusCode DescribeWithoutToken(const std::string& address) {
  auto stub = v1::ExpertWorker::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::DescribeResponse resp;
  return stub->Describe(&ctx, v1::DescribeRequest(), &resp).error_code();
}

grpc::StatusCode RunExpertsWithoutToken(const std::string& address) {
  auto stub = v1::ExpertWorker::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::RunExpertsRequest req;
  req.set_layer(0);
  v1::RunExpertsResponse resp;
  return stub->RunExperts(&ctx, req, &resp).error_code();
}

TEST(HardeningE2e, WorkerTokenFlagLocksTheLocalWorkers) {
  unsetenv("MXSERVE_WORKER_TOKEN");
  TempDir logs;
  const std::string token = "e2e-flag-token-5d1c";
  auto c = StartCoordinator(TinyModelDir(), {"--local-workers", "2", "--worker-token", token},
                            logs.path());
  ASSERT_TRUE(c.has_value());
  // The coordinator's own calls to its workers carry the token: a completion works.
  HttpResponse r = HttpCall(c->http_port, "POST", "/v1/completions",
                            R"({"prompt": "hello", "max_tokens": 3})");
  EXPECT_EQ(r.status, 200) << r.body;
  // "local worker pid 123 at 127.0.0.1:4567 holds experts ...": a local process without the
  // token is refused by each.
  const std::string log = Slurp(c->log_path);
  std::regex re(R"(local worker pid (\d+) at (127\.0\.0\.1:\d+))");
  int workers = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it, ++workers) {
    const std::string address = (*it)[2];
    EXPECT_EQ(DescribeWithoutToken(address), grpc::StatusCode::UNAUTHENTICATED) << address;
    EXPECT_EQ(RunExpertsWithoutToken(address), grpc::StatusCode::UNAUTHENTICATED) << address;
    const std::string cmdline = Slurp("/proc/" + std::string((*it)[1]) + "/cmdline");
    EXPECT_FALSE(cmdline.empty());
    EXPECT_EQ(cmdline.find(token), std::string::npos) << "token on a worker's command line";
  }
  EXPECT_EQ(workers, 2) << log;
  EXPECT_EQ(c->process->Stop(), 0);
}

// --worker-devices cpu: every local worker runs with --device=cpu and the log says so.
TEST(HardeningE2e, WorkerDevicesReachTheLocalWorkers) {
  TempDir logs;
  auto c = StartCoordinator(TinyModelDir(), {"--local-workers", "2", "--worker-devices", "cpu"},
                            logs.path());
  ASSERT_TRUE(c.has_value());
  const std::string log = Slurp(c->log_path);
  std::regex re(R"(local worker pid (\d+) at \S+ holds experts \S+ on (\S+))");
  int workers = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator();
       ++it, ++workers) {
    EXPECT_EQ((*it)[2], "cpu");
    std::string cmdline = Slurp("/proc/" + std::string((*it)[1]) + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    EXPECT_NE(cmdline.find(" --device=cpu "), std::string::npos) << cmdline;
  }
  EXPECT_EQ(workers, 2) << log;
  EXPECT_EQ(c->process->Stop(), 0);
}

TEST(HardeningE2e, BadWorkerDevicesExit78NamingTheEntry) {
  TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--local-workers", "2", "--worker-devices", "cuda:0,gpu1"}, "entry 1 ('gpu1')"},
      {{"--local-workers", "2", "--worker-devices", "cpu,,cpu"}, "entry 1 ('')"},
      // A GPU no host here shows: refused whether or not the build has CUDA.
      {{"--local-workers", "1", "--worker-devices", "cuda:65535"}, "--worker-devices: cuda:65535: "},
      {{"--local-workers", "0", "--worker-devices", "cpu"}, "--worker-devices needs --local-workers"},
  };
  int n = 0;
  for (const auto& [flags, want] : cases) {
    const std::string log = dir.path() + "/devices-" + std::to_string(n++) + ".log";
    std::vector<std::string> args = {"--model", TinyModelDir(), "--host", "127.0.0.1",
                                     "--http-port", "0", "--grpc-port", "0"};
    args.insert(args.end(), flags.begin(), flags.end());
    EXPECT_EQ(RunCommand(BinDir() + "/mxserve-coordinator", args, log), 78) << Slurp(log);
    EXPECT_NE(Slurp(log).find(want), std::string::npos) << want << ":\n" << Slurp(log);
  }
}

// A copy of the tiny model with one file edited.
std::string EditedModel(const TempDir& dir, const std::string& name,
                        const std::function<void(const std::string& model)>& edit) {
  const std::string out = dir.path() + "/" + name;
  fs::copy(TinyModelDir(), out, fs::copy_options::recursive);
  edit(out);
  return out;
}

void EditConfig(const std::string& model, const std::function<void(json&)>& edit) {
  json j = json::parse(Slurp(model + "/config.json"));
  edit(j);
  std::ofstream(model + "/config.json") << j.dump(2);
}

TEST(HardeningE2e, LoadAndConfigErrorsExit78NamingTheField) {
  TempDir dir;
  struct Case {
    std::string name;
    std::function<void(const std::string&)> edit;
    std::string want;  // in the log
  };
  auto config = [](std::function<void(json&)> f) {
    return [f](const std::string& m) { EditConfig(m, f); };
  };
  const std::vector<Case> cases = {
      {"vocab", config([](json& j) { j["vocab_size"] = 2147483647; }), "field 'vocab_size'"},
      {"experts", config([](json& j) { j["num_local_experts"] = 2147483647; }),
       "field 'num_local_experts'"},
      {"heads", config([](json& j) {
         j["num_attention_heads"] = 1 << 30;
         j["head_dim"] = 1 << 30;
       }),
       "field 'num_attention_heads'"},
      {"small-vocab", config([](json& j) {
         j["vocab_size"] = 300;
         j.erase("eos_token_id");
         j.erase("pad_token_id");
       }),
       "outside config.json's vocab_size (300)"},
      {"corrupt-checkpoint",
       [](const std::string& m) {
         for (const auto& e : fs::directory_iterator(m)) {
           if (e.path().extension() != ".safetensors") continue;
           std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
           const char huge[8] = {'\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\x00', '\x00'};
           f.write(huge, 8);  // a header length past the end of the file
         }
       },
       ".safetensors"},
  };
  for (const Case& c : cases) {
    const std::string model = EditedModel(dir, c.name, c.edit);
    for (const char* workers : {"0", "2"}) {
      const std::string log = dir.path() + "/" + c.name + "-" + workers + ".log";
      const int rc = RunCommand(BinDir() + "/mxserve-coordinator",
                                {"--model", model, "--host", "127.0.0.1", "--http-port", "0",
                                 "--grpc-port", "0", "--local-workers", workers},
                                log);
      EXPECT_EQ(rc, 78) << c.name << " with " << workers << " local workers:\n" << Slurp(log);
      EXPECT_NE(Slurp(log).find(c.want), std::string::npos) << c.name << ":\n" << Slurp(log);
    }
    if (c.name != "small-vocab") {  // workers need no tokenizer
      const std::string log = dir.path() + "/" + c.name + "-worker.log";
      EXPECT_EQ(RunCommand(BinDir() + "/mxserve-worker", {"--model", model, "--port", "0"}, log),
                78)
          << c.name << ":\n" << Slurp(log);
    }
  }
}

}  // namespace
}  // namespace mxserve::testing

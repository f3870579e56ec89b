// End to end: real mxserve-coordinator processes (with 0, 2 and 4 local expert workers) on
// 127.0.0.1, driven over HTTP and gRPC.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "mxserve/v1/inference.grpc.pb.h"
#include "tests/integration/harness.h"
#include "tests/observability/prom_text.h"

namespace mxserve::testing {
namespace {

using nlohmann::json;

class E2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    logs_ = new TempDir();
    auto c = StartCoordinator(TinyModelDir(), {"--local-workers", "2"}, logs_->path());
    ASSERT_TRUE(c.has_value());
    two_workers_ = new Coordinator(std::move(*c));
  }
  static void TearDownTestSuite() {
    delete two_workers_;
    two_workers_ = nullptr;
    delete logs_;
  }
  static int port() { return two_workers_->http_port; }

  static TempDir* logs_;
  static Coordinator* two_workers_;
};
TempDir* E2eTest::logs_ = nullptr;
Coordinator* E2eTest::two_workers_ = nullptr;

// A greedy completion with logprobs from prompt token ids; returns the parsed response.
json Complete(int port, const std::vector<int>& prompt, int max_tokens, bool echo = false) {
  json req = {{"model", "tiny"},      {"prompt", prompt},  {"max_tokens", max_tokens},
              {"temperature", 0.0},   {"logprobs", 5},     {"echo", echo}};
  auto r = HttpCall(port, "POST", "/v1/completions", req.dump());
  EXPECT_EQ(r.status, 200) << r.body;
  return json::parse(r.body, nullptr, false);
}

std::vector<int> RandomPrompt(std::mt19937& rng, int len) {
  std::uniform_int_distribution<int> d(0, 255);  // byte tokens: valid in any tiny vocab
  std::vector<int> p;
  for (int i = 0; i < len; ++i) p.push_back(d(rng));
  return p;
}

// Per-token logprobs of two completions (echo): the same count, and positions [first,
// size - trim) within tol (a null in `a` must be null in `b`).
void ExpectLogprobsNear(const json& ca, const json& cb, double tol, size_t first = 0, size_t trim = 0) {
  const json& la = ca["logprobs"]["token_logprobs"];
  const json& lb = cb["logprobs"]["token_logprobs"];
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = first; i + trim < la.size(); ++i) {
    if (la[i].is_null()) {
      EXPECT_TRUE(lb[i].is_null());  // the first prompt token has no logprob
      continue;
    }
    EXPECT_NEAR(la[i].get<double>(), lb[i].get<double>(), tol) << "position " << i;
  }
}

TEST(E2eModes, WorkersAgreeWithSingleProcess) {
  TempDir logs;
  auto single = StartCoordinator(TinyModelDir(), {"--local-workers", "0"}, logs.path());
  auto two = StartCoordinator(TinyModelDir(), {"--local-workers", "2"}, logs.path());
  auto four = StartCoordinator(TinyModelDir(), {"--local-workers", "4"}, logs.path());
  ASSERT_TRUE(single && two && four);
  std::mt19937 rng(1234);
  for (int len : {1, 5, 23}) {  // 23 > the tiny model's sliding window (8)
    auto prompt = RandomPrompt(rng, len);
    json a = Complete(single->http_port, prompt, 12, /*echo=*/true);
    for (auto* other : {&*two, &*four}) {
      json b = Complete(other->http_port, prompt, 12, /*echo=*/true);
      ASSERT_TRUE(a.contains("choices") && b.contains("choices")) << a << b;
      const json& ca = a["choices"][0];
      const json& cb = b["choices"][0];
      EXPECT_EQ(ca["text"], cb["text"]);
      EXPECT_EQ(ca["logprobs"]["tokens"], cb["logprobs"]["tokens"]);
      ExpectLogprobsNear(ca, cb, 1e-3);
      EXPECT_EQ(ca["finish_reason"], cb["finish_reason"]);
    }
  }
}

// Sum over workers of one metric family on a coordinator's /metrics page.
double SumCounter(int port, const std::string& family) {
  return ParsePrometheusText(HttpCall(port, "GET", "/metrics").body).Sum(family);
}

// Prefix caching through the real CPU model: a repeated prompt (longer than a few 16-token
// blocks) gives the same greedy output and logprobs as its first run and as a server without
// the cache, and /metrics counts the hit.
TEST(E2eModes, PrefixCacheRepeatedPromptIsIdenticalAndHits) {
  TempDir logs;
  auto cached = StartCoordinator(TinyModelDir(), {"--local-workers", "0"}, logs.path());
  auto plain = StartCoordinator(TinyModelDir(), {"--local-workers", "0",
                                                 "--no-enable-prefix-caching"}, logs.path());
  ASSERT_TRUE(cached && plain);
  std::mt19937 rng(54);
  const auto prompt = RandomPrompt(rng, 53);  // 3 full blocks cacheable, 5 tokens computed
  json first = Complete(cached->http_port, prompt, 10);
  EXPECT_EQ(SumCounter(cached->http_port, "mxserve:prefix_cache_hits_total"), 0);
  EXPECT_EQ(SumCounter(cached->http_port, "mxserve:prefix_cache_queries_total"), 53);
  json again = Complete(cached->http_port, prompt, 10);
  EXPECT_EQ(SumCounter(cached->http_port, "mxserve:prefix_cache_hits_total"), 48);
  EXPECT_EQ(SumCounter(cached->http_port, "mxserve:prefix_cache_queries_total"), 106);
  json cold = Complete(plain->http_port, prompt, 10);
  EXPECT_EQ(SumCounter(plain->http_port, "mxserve:prefix_cache_queries_total"), 0);
  for (const json* other : {&again, &cold}) {
    ASSERT_TRUE(first.contains("choices") && other->contains("choices")) << first << *other;
    EXPECT_EQ(first["choices"][0]["text"], (*other)["choices"][0]["text"]);
    EXPECT_EQ(first["choices"][0]["logprobs"]["tokens"], (*other)["choices"][0]["logprobs"]["tokens"]);
    ExpectLogprobsNear(first["choices"][0], (*other)["choices"][0], 1e-4);
  }
}

// --expert_wire_dtype=bf16: partial sums come back in half the bytes of f32, and the model's
// prompt logprobs stay close to the single-process (all-f32) run.
TEST(E2eModes, Bf16WireHalvesTheBytesAndStaysClose) {
  TempDir logs;
  auto single = StartCoordinator(TinyModelDir(), {"--local-workers", "0"}, logs.path());
  auto f32 = StartCoordinator(TinyModelDir(), {"--local-workers", "2"}, logs.path());
  auto bf16 = StartCoordinator(TinyModelDir(), {"--local-workers", "2", "--expert_wire_dtype", "bf16"},
                               logs.path());
  ASSERT_TRUE(single && f32 && bf16);
  std::mt19937 rng(99);
  for (int len : {3, 23}) {
    auto prompt = RandomPrompt(rng, len);
    json a = Complete(single->http_port, prompt, 1, /*echo=*/true);
    Complete(f32->http_port, prompt, 1, /*echo=*/true);
    json b = Complete(bf16->http_port, prompt, 1, /*echo=*/true);
    ASSERT_TRUE(a.contains("choices") && b.contains("choices")) << a << b;
    // The prompt's tokens (the first has none; the last position is the generated one).
    ExpectLogprobsNear(a["choices"][0], b["choices"][0], 0.05, /*first=*/1, /*trim=*/1);
  }
  const double got_f32 = SumCounter(f32->http_port, "mxserve:expert_call_received_bytes_total");
  const double got_bf16 = SumCounter(bf16->http_port, "mxserve:expert_call_received_bytes_total");
  ASSERT_GT(got_f32, 0);
  // Exactly half when both route alike; bf16 rounding may move a token's top-k in a later layer.
  EXPECT_NEAR(got_bf16 / got_f32, 0.5, 0.1) << got_bf16 << " vs " << got_f32;

  // A bad value is a configuration error (exit 78, EX_CONFIG), not a silent default.
  EXPECT_EQ(RunCommand(BinDir() + "/mxserve-coordinator",
                       {"--model", TinyModelDir(), "--expert_wire_dtype", "fp8"}, logs.path() + "/bad.log"),
            78);
}

// By default (--expert_shared_memory) local workers get the tensors through
// /dev/shm/mxserve-shm-<pid>-* (the coordinator's), answers as the single-process run gives, and
// the objects go with it; --expert_shared_memory=false keeps them in the gRPC messages.
TEST(E2eModes, SharedMemoryAgreesWithSingleProcess) {
  TempDir logs;
  auto single = StartCoordinator(TinyModelDir(), {"--local-workers", "0"}, logs.path());
  auto shm = StartCoordinator(TinyModelDir(), {"--local-workers", "2"}, logs.path());
  auto bytes = StartCoordinator(TinyModelDir(), {"--local-workers", "2", "--expert_shared_memory=false"},
                                logs.path());
  ASSERT_TRUE(single && shm && bytes);
  std::mt19937 rng(7);
  for (int len : {2, 23}) {
    auto prompt = RandomPrompt(rng, len);
    json a = Complete(single->http_port, prompt, 6, /*echo=*/true);
    json b = Complete(shm->http_port, prompt, 6, /*echo=*/true);
    ASSERT_TRUE(a.contains("choices") && b.contains("choices")) << a << b;
    EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
    ExpectLogprobsNear(a["choices"][0], b["choices"][0], 1e-3, /*first=*/1);
  }
  const std::string prefix = "mxserve-shm-" + std::to_string(shm->process->pid()) + "-";
  auto objects = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      n += e.path().filename().string().rfind(prefix, 0) == 0;
    }
    return n;
  };
  EXPECT_GE(objects(), 1);  // one per worker client that has made a call
  EXPECT_EQ(SumCounter(shm->http_port, "mxserve:expert_shared_memory"), 2);  // both workers
  auto workers = json::parse(HttpCall(shm->http_port, "GET", "/v1/workers").body, nullptr, false);
  for (const auto& w : workers["workers"]) EXPECT_EQ(w["transport"], "shared_memory") << w;
  EXPECT_EQ(SumCounter(single->http_port, "mxserve:expert_shared_memory"), 0);
  EXPECT_TRUE(Complete(bytes->http_port, RandomPrompt(rng, 5), 2).contains("choices"));
  EXPECT_EQ(SumCounter(bytes->http_port, "mxserve:expert_shared_memory"), 0);
  auto bw = json::parse(HttpCall(bytes->http_port, "GET", "/v1/workers").body, nullptr, false);
  for (const auto& w : bw["workers"]) EXPECT_EQ(w["transport"], "grpc") << w;
  EXPECT_EQ(shm->process->Stop(), 0);
  EXPECT_EQ(objects(), 0);
}

TEST_F(E2eTest, ConcurrentMixedRequestsAllComplete) {
  // Expected greedy outputs, one request at a time.
  std::mt19937 rng(99);
  const int kRequests = 32;
  std::vector<std::vector<int>> prompts;
  std::vector<int> lengths;
  std::vector<std::string> expected;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(RandomPrompt(rng, 1 + (i * 7) % 29));
    lengths.push_back(4 + (i * 5) % 17);
  }
  for (int i = 0; i < kRequests; ++i) {
    json r = Complete(port(), prompts[i], lengths[i]);
    expected.push_back(r["choices"][0]["text"].get<std::string>());
  }
  std::vector<std::future<std::string>> results;
  for (int i = 0; i < kRequests; ++i) {
    results.push_back(std::async(std::launch::async, [&, i]() -> std::string {
      bool stream = (i % 2) == 0;
      json req = {{"model", "tiny"},     {"prompt", prompts[i]}, {"max_tokens", lengths[i]},
                  {"temperature", 0.0},  {"stream", stream}};
      auto r = HttpCall(port(), "POST", "/v1/completions", req.dump());
      if (r.status != 200) return "HTTP " + std::to_string(r.status) + " " + r.body;
      if (!stream) return json::parse(r.body)["choices"][0]["text"].get<std::string>();
      bool done = false;
      std::string text;
      for (const auto& ev : ParseSse(r.body, &done)) {
        if (ev.contains("choices") && !ev["choices"].empty())
          text += ev["choices"][0].value("text", "");
      }
      if (!done) return "stream without [DONE]";
      return text;
    }));
  }
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(results[i].get(), expected[i]) << "request " << i;
}

TEST_F(E2eTest, ChatCompletionStreamsAndFinishes) {
  json req = {{"model", "tiny"},
              {"messages", {{{"role", "system"}, {"content", "Be brief."}},
                            {{"role", "user"}, {"content", "Hello there!"}}}},
              {"max_tokens", 10},
              {"temperature", 0.0},
              {"stream", true},
              {"stream_options", {{"include_usage", true}}}};
  auto r = HttpCall(port(), "POST", "/v1/chat/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers["content-type"].find("text/event-stream"), std::string::npos);
  bool done = false;
  auto events = ParseSse(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  bool saw_finish = false, saw_usage = false;
  for (const auto& ev : events) {
    if (!ev["choices"].empty() && !ev["choices"][0]["finish_reason"].is_null()) saw_finish = true;
    if (ev.contains("usage") && !ev["usage"].is_null()) {
      saw_usage = true;
      EXPECT_GT(ev["usage"]["prompt_tokens"].get<int>(), 0);
      EXPECT_LE(ev["usage"]["completion_tokens"].get<int>(), 10);
    }
  }
  EXPECT_TRUE(saw_finish);
  EXPECT_TRUE(saw_usage);

  req["stream"] = false;
  req.erase("stream_options");
  auto r2 = HttpCall(port(), "POST", "/v1/chat/completions", req.dump());
  ASSERT_EQ(r2.status, 200) << r2.body;
  json j = json::parse(r2.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["usage"]["total_tokens"].get<int>() > 0);
}

TEST_F(E2eTest, StopAndMaxTokensAndSeed) {
  std::mt19937 rng(5);
  auto prompt = RandomPrompt(rng, 6);
  json r = Complete(port(), prompt, 7);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 7);
  // Seeded sampling is reproducible.
  json req = {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 16},
              {"temperature", 1.0}, {"seed", 42}};
  auto a = HttpCall(port(), "POST", "/v1/completions", req.dump());
  auto b = HttpCall(port(), "POST", "/v1/completions", req.dump());
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(json::parse(a.body)["choices"][0]["text"], json::parse(b.body)["choices"][0]["text"]);
}

// vLLM's sampling fields act on the real model: a logit_bias of +100 wins every greedy step;
// min_tokens holds off a stop token.
TEST_F(E2eTest, LogitBiasAndMinTokensAct) {
  std::mt19937 rng(7);
  const auto prompt = RandomPrompt(rng, 9);
  auto ids = [&](json extra) {
    json req = {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0.0},
                {"logprobs", 0}, {"return_tokens_as_token_ids", true}};
    if (extra.is_object()) req.update(extra);
    auto r = HttpCall(port(), "POST", "/v1/completions", req.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    const json body = json::parse(r.body, nullptr, false);
    std::vector<std::string> out;
    if (!body.contains("choices")) return out;
    for (const auto& t : body["choices"][0]["logprobs"]["tokens"]) out.push_back(t);
    return out;
  };
  const auto plain = ids(json::object());
  ASSERT_EQ(plain.size(), 6u);
  EXPECT_EQ(ids({{"logit_bias", {{"65", 100}}}}), std::vector<std::string>(6, "token_id:65"));
  // The first greedy token, stopped on: with min_tokens 6 it cannot end the request early.
  const int first = std::stoi(plain[0].substr(9));
  EXPECT_EQ(ids({{"stop_token_ids", {first}}}).size(), 1u);
  EXPECT_EQ(ids({{"stop_token_ids", {first}}, {"min_tokens", 6}}).size(), 6u);
  EXPECT_NE(ids({{"stop_token_ids", {first}}, {"min_tokens", 6}})[0], plain[0]);
}

TEST_F(E2eTest, BadInputsGetClearErrorsAndServerKeepsServing) {
  struct Case {
    std::string path, body;
    int status;
    std::string needle;  // must appear in error.message or error.param
  };
  std::string big(10 * 1024 * 1024, 'a');
  std::vector<Case> cases = {
      {"/v1/chat/completions", "{not json", 400, "JSON"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":"hi"})", 400, "messages"},
      {"/v1/chat/completions", R"({"model":"nope","messages":[{"role":"user","content":"x"}]})",
       404, "nope"},
      {"/v1/chat/completions", R"({"model":"tiny","messages":[]})", 400, "messages"},
      {"/v1/chat/completions",
       R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":-3})", 400,
       "max_tokens"},
      {"/v1/chat/completions",
       R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":100000000})",
       400, "max_tokens"},
      {"/v1/chat/completions",
       R"({"model":"tiny","messages":[{"role":"user","content":"x"}],"temperature":"hot"})", 400,
       "temperature"},
      {"/v1/completions", std::string(R"({"model":"tiny","prompt":")") + "\xff\xfe" + "\"}", 400,
       "UTF-8"},
      {"/v1/completions", R"({"model":"tiny","prompt":[1,2,99999999]})", 400, "prompt"},
      {"/v1/completions", R"({"model":"tiny","prompt":"hi","logprobs":21})", 400, "logprobs"},
      {"/v1/completions", R"({"model":"tiny","prompt":")" + big + "\"}", 413, ""},
  };
  for (const auto& c : cases) {
    auto r = HttpCall(port(), "POST", c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.body.substr(0, 200) << " -> " << r.body.substr(0, 300);
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body.substr(0, 300);
    const json& e = j["error"];
    EXPECT_TRUE(e.contains("message") && e.contains("type") && e.contains("param") &&
                e.contains("code"))
        << e;
    if (!c.needle.empty()) {
      std::string hay = e["message"].dump() + e["param"].dump();
      EXPECT_NE(hay.find(c.needle), std::string::npos) << e;
    }
    EXPECT_EQ(HttpCall(port(), "GET", "/health").status, 200);
  }
  json ok = Complete(port(), {1, 2, 3}, 3);
  EXPECT_TRUE(ok.contains("choices"));
}

TEST_F(E2eTest, ModelsTokenizeDetokenize) {
  auto m = HttpCall(port(), "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  json models = json::parse(m.body);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  auto t = HttpCall(port(), "POST", "/tokenize",
                    R"({"model":"tiny","prompt":"Hello, world! 123"})");
  ASSERT_EQ(t.status, 200) << t.body;
  json tj = json::parse(t.body);
  EXPECT_GT(tj["count"].get<int>(), 0);
  json d = {{"model", "tiny"}, {"tokens", tj["tokens"]}};
  auto dt = HttpCall(port(), "POST", "/detokenize", d.dump());
  ASSERT_EQ(dt.status, 200) << dt.body;
  EXPECT_EQ(json::parse(dt.body)["prompt"], "Hello, world! 123");
}

TEST_F(E2eTest, GrpcGenerateStreamsAndValidates) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(two_workers_->grpc_port),
                                     grpc::InsecureChannelCredentials());
  auto stub = mxserve::v1::Inference::NewStub(channel);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    mxserve::v1::GenerateRequest req;
    req.set_model("tiny");
    for (int id : {10, 20, 30, 40}) req.mutable_prompt_token_ids()->add_ids(id);
    req.mutable_sampling()->set_temperature(0);
    req.mutable_sampling()->set_max_tokens(6);
    auto reader = stub->Generate(&ctx, req);
    mxserve::v1::GenerateResponse resp;
    int tokens = 0;
    bool finished = false;
    while (reader->Read(&resp)) {
      tokens += resp.token_ids_size();
      if (resp.finished()) {
        finished = true;
        EXPECT_EQ(resp.usage().prompt_tokens(), 4);
        EXPECT_EQ(resp.usage().completion_tokens(), 6);
        EXPECT_EQ(resp.finish_reason(), mxserve::v1::FINISH_REASON_LENGTH);
      }
    }
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_TRUE(finished);
    EXPECT_EQ(tokens, 6);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    mxserve::v1::GenerateRequest req;
    req.set_model("tiny");
    req.mutable_prompt_token_ids();  // empty prompt
    auto reader = stub->Generate(&ctx, req);
    mxserve::v1::GenerateResponse resp;
    while (reader->Read(&resp)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    mxserve::v1::ListModelsRequest req;
    mxserve::v1::ListModelsResponse resp;
    ASSERT_TRUE(stub->ListModels(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.models_size(), 1);
    EXPECT_EQ(resp.models(0).id(), "tiny");
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    mxserve::v1::TokenizeRequest req;
    req.set_model("tiny");
    req.set_text("Hello");
    mxserve::v1::TokenizeResponse resp;
    ASSERT_TRUE(stub->Tokenize(&ctx, req, &resp).ok());
    EXPECT_GT(resp.count(), 0);
  }
}

}  // namespace
}  // namespace mxserve::testing

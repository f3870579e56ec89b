// Request limits at the front doors, in-process over real sockets (fake engine): body size
// (413), prompt tokens (400), max_tokens against the context (400), a full queue (429 with
// Retry-After) and the per-request deadline (504 / SSE error / DEADLINE_EXCEEDED, and the
// engine is told to cancel so the sequence's resources are freed).
#include <chrono>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "coordinator/frontends/grpc_frontend.h"
#include "coordinator/frontends/http_frontend.h"
#include "coordinator/frontends/request_deadline.h"
#include "mxserve/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/frontends/fakes.h"
#include "tests/frontends/http_client.h"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;
using ::mxserve::testing::FakeChatTemplate;
using ::mxserve::testing::FakeGenerationService;
using ::mxserve::testing::FakeTokenizer;
using ::mxserve::testing::HttpClient;
using ::mxserve::testing::HttpResult;
using ::mxserve::testing::WaitFor;

constexpr int kMaxLen = 128;
constexpr int kMaxPrompt = 20;
constexpr size_t kMaxBody = 4096;

class LimitsTest : public ::testing::Test {
 protected:
  void Start(absl::Duration request_timeout = absl::ZeroDuration()) {
    deadline_ = std::make_unique<DeadlineGenerationService>(&engine_, request_timeout);
    ServingContext ctx;
    ctx.model_id = "tiny-model";
    ctx.max_model_len = kMaxLen;
    ctx.tokenizer = &tok_;
    ctx.chat_template = &tmpl_;
    ctx.engine = deadline_.get();
    ctx.max_prompt_tokens = kMaxPrompt;
    HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.max_body_bytes = kMaxBody;
    auto fe = HttpFrontend::Start(ctx, o);
    ASSERT_TRUE(fe.ok()) << fe.status();
    http_ = *std::move(fe);
    GrpcServerOptions g;
    g.host = "127.0.0.1";
    g.port = 0;
    auto gfe = GrpcFrontend::Start(ctx, g);
    ASSERT_TRUE(gfe.ok()) << gfe.status();
    grpc_ = *std::move(gfe);
    stub_ = v1::Inference::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(grpc_->port()), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (http_) http_->Shutdown();
    if (grpc_) grpc_->Shutdown();
  }
  HttpResult Post(const std::string& path, const json& body) {
    HttpClient c(http_->port());
    return c.Request("POST", path, body.dump());
  }
  grpc::Status Generate(const v1::GenerateRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
    }
    return reader->Finish();
  }
  static json Completion(const std::string& prompt) {
    return json{{"model", "tiny-model"}, {"prompt", prompt}, {"max_tokens", 2}};
  }

  FakeTokenizer tok_;  // one token per byte: prompt length in tokens = its length in bytes
  FakeChatTemplate tmpl_;
  FakeGenerationService engine_;
  std::unique_ptr<DeadlineGenerationService> deadline_;
  std::unique_ptr<HttpFrontend> http_;
  std::unique_ptr<GrpcFrontend> grpc_;
  std::unique_ptr<v1::Inference::Stub> stub_;
};

TEST_F(LimitsTest, BodyOverTheLimitIs413) {
  Start();
  json big = Completion(std::string(kMaxBody, 'a'));
  HttpResult r = Post("/v1/completions", big);
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "request_too_large");
  // Just under the limit is parsed (and then rejected for the prompt length, not the size).
  r = Post("/v1/completions", Completion(std::string(kMaxBody - 100, 'a')));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(engine_.num_requests(), 0u);
}

TEST_F(LimitsTest, PromptOverMaxPromptTokensIs400OnEveryPath) {
  Start();
  HttpResult r = Post("/v1/completions", Completion(std::string(kMaxPrompt + 1, 'a')));
  ASSERT_EQ(r.status, 400) << r.body;
  json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["code"], "prompt_too_long");
  EXPECT_EQ(e["param"], "prompt");
  EXPECT_NE(e["message"].get<std::string>().find("--max-prompt-tokens"), std::string::npos);
  // Token ids count the same way.
  r = Post("/v1/completions",
           json{{"model", "tiny-model"}, {"prompt", std::vector<int>(kMaxPrompt + 1, 97)}});
  EXPECT_EQ(r.status, 400) << r.body;
  // Chat: the rendered prompt ("user:...\nassistant:") is what counts.
  r = Post("/v1/chat/completions",
           json{{"model", "tiny-model"},
                {"messages", json::array({{{"role", "user"}, {"content", std::string(10, 'a')}}})}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "messages");
  v1::GenerateRequest g;
  g.set_prompt(std::string(kMaxPrompt + 1, 'a'));
  EXPECT_EQ(Generate(g).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(engine_.num_requests(), 0u);
  // At the limit: accepted.
  r = Post("/v1/completions", Completion(std::string(kMaxPrompt, 'a')));
  EXPECT_EQ(r.status, 200) << r.body;
  g.set_prompt(std::string(kMaxPrompt, 'a'));
  EXPECT_TRUE(Generate(g).ok());
  EXPECT_EQ(engine_.num_requests(), 2u);
}

TEST_F(LimitsTest, MaxTokensIsBoundedByTheContext) {
  Start();
  const std::string prompt(10, 'a');
  json req = Completion(prompt);
  req["max_tokens"] = kMaxLen - 10 + 1;
  HttpResult r = Post("/v1/completions", req);
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "max_tokens");
  req["max_tokens"] = kMaxLen - 10;
  r = Post("/v1/completions", req);
  EXPECT_EQ(r.status, 200) << r.body;
  // Unset on chat: the rest of the context.
  r = Post("/v1/chat/completions",
           json{{"model", "tiny-model"},
                {"messages", json::array({{{"role", "user"}, {"content", "a"}}})}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(engine_.num_requests(), 2u);
  const GenerateRequest last = engine_.requests().back();
  EXPECT_EQ(last.params.max_tokens, kMaxLen - static_cast<int>(last.prompt_tokens.size()));
  v1::GenerateRequest g;
  g.set_prompt(prompt);
  g.mutable_sampling()->set_max_tokens(kMaxLen);
  EXPECT_EQ(Generate(g).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// fuzz_openai_api finding: a positive top_p below FLT_MIN became 0.0f, an empty nucleus.
TEST_F(LimitsTest, TinyTopPStaysPositive) {
  Start();
  HttpResult r = Post("/v1/completions",
                      json{{"model", "tiny-model"}, {"prompt", "ab"}, {"max_tokens", 2},
                           {"top_p", 1e-98}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(engine_.num_requests(), 1u);
  EXPECT_GT(engine_.requests()[0].params.top_p, 0.0f);
}

TEST_F(LimitsTest, FullQueueIs429WithRetryAfterAndResourceExhaustedOnGrpc) {
  Start();
  engine_.set_next_status(absl::ResourceExhaustedError("queue full: 1 requests waiting"));
  HttpResult r = Post("/v1/completions", Completion("ab"));
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.header("retry-after"), "1");
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "rate_limit_error");
  v1::GenerateRequest g;
  g.set_prompt("ab");
  EXPECT_EQ(Generate(g).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(LimitsTest, DeadlineEndsAWholeRequestWith504AndCancelsIt) {
  Start(absl::Milliseconds(300));
  engine_.set_hold_after_first(true);  // the engine sends one token, then never finishes
  const auto t0 = std::chrono::steady_clock::now();
  HttpResult r = Post("/v1/completions", Completion("ab"));
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("--request-timeout-s"),
            std::string::npos);
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::seconds(5));
  ASSERT_EQ(engine_.num_requests(), 1u);
  EXPECT_EQ(engine_.cancelled().count(engine_.requests()[0].request_id), 1u);
  EXPECT_EQ(engine_.num_held(), 0u) << "the engine still holds the timed-out request";
  EXPECT_EQ(deadline_->timed_out(), 1);
}

TEST_F(LimitsTest, DeadlineEndsAStreamWithAnErrorEventAndDone) {
  Start(absl::Milliseconds(300));
  engine_.set_hold_after_first(true);
  json req = Completion("ab");
  req["stream"] = true;
  HttpResult r = Post("/v1/completions", req);
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"text\":\"H\""), std::string::npos) << r.body;  // the first token
  EXPECT_NE(r.body.find("--request-timeout-s"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("data: [DONE]"), std::string::npos) << r.body;
  EXPECT_EQ(engine_.num_held(), 0u);
}

TEST_F(LimitsTest, DeadlineOnGrpcIsDeadlineExceeded) {
  Start(absl::Milliseconds(300));
  engine_.set_hold_after_first(true);
  v1::GenerateRequest g;
  g.set_prompt("ab");
  grpc::Status s = Generate(g);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_EQ(engine_.num_held(), 0u);
}

TEST_F(LimitsTest, RequestsThatFinishInTimeAreUntouched) {
  Start(absl::Milliseconds(2000));
  for (int i = 0; i < 20; ++i) {
    HttpResult r = Post("/v1/completions", Completion("ab"));
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // A client that goes away is still an abort, not a deadline.
  engine_.set_hold_after_first(true);
  {
    HttpClient c(http_->port());
    json req = Completion("ab");
    req["stream"] = true;
    c.WriteRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: " + std::to_string(req.dump().size()) + "\r\n\r\n" + req.dump());
    ASSERT_TRUE(WaitFor([&] { return engine_.num_held() == 1; }));
  }
  ASSERT_TRUE(WaitFor([&] { return engine_.num_held() == 0; }));
  EXPECT_EQ(deadline_->timed_out(), 0);
}

}  // namespace
}  // namespace mxserve::frontends

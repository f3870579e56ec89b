// The OpenAI front door against hostile or careless clients: key, path and method judged on
// the header (no body read, no 100 Continue), the open probes, over-long prompts refused by
// their byte length before tokenizing, the probes answered while heavy requests are held, and
// half-closed clients answered.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "coordinator/frontends/auth.h"
#include "coordinator/frontends/http_frontend.h"
#include "coordinator/frontends/prompt_limit.h"
#include "nlohmann/json.hpp"
#include "tests/frontends/fakes.h"
#include "tests/frontends/http_client.h"
#include "tests/frontends/raw_client.h"

namespace mxserve::testing {
namespace {

using json = nlohmann::json;
constexpr char kModel[] = "tiny-model";
constexpr int kMaxLen = 128;
constexpr int kHandlerThreads = 2;

class FrontDoorHostileTest : public ::testing::Test {
 protected:
  void Start(const std::string& api_key) {
    ServingContext ctx;
    ctx.model_id = kModel;
    ctx.max_model_len = kMaxLen;
    ctx.tokenizer = &tok_;
    ctx.chat_template = &tmpl_;
    ctx.engine = &engine_;
    ctx.api_key = api_key;
    ctx.metrics = [] { return std::string("mxserve_up 1\n"); };
    frontends::HttpServerOptions opts;
    opts.host = "127.0.0.1";
    opts.port = 0;
    opts.io_threads = 2;
    auto fe = frontends::HttpFrontend::Start(ctx, opts, kHandlerThreads);
    ASSERT_TRUE(fe.ok()) << fe.status();
    fe_ = *std::move(fe);
  }
  void TearDown() override {
    tok_.HoldEncode(false);
    if (fe_) fe_->Shutdown();
  }
  int port() const { return fe_->port(); }

  static std::string Post(const std::string& path, const std::string& body,
                          const std::string& extra_headers = "") {
    return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
                        extra_headers, "Content-Length: ", body.size(), "\r\n\r\n", body);
  }
  static json Completion(const std::string& prompt) {
    return json{{"model", kModel}, {"prompt", prompt}, {"max_tokens", 1}};
  }
  static json ErrorOf(const RawResponse& r) {
    json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"] : json();
  }

  FakeTokenizer tok_;
  FakeChatTemplate tmpl_;
  FakeGenerationService engine_;
  std::unique_ptr<frontends::HttpFrontend> fe_;
};

TEST_F(FrontDoorHostileTest, KeylessRequestsAreRefusedOnTheirHeader) {
  Start("sekrit");
  const std::string head8m =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n";
  {  // no 100 Continue for a keyless client: the 401 comes instead
    RawConn c(port());
    c.Send(head8m + "Expect: 100-continue\r\n\r\n");
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 401) << c.received();
    EXPECT_EQ(ErrorOf(r)["code"], "invalid_api_key");
  }
  // Many keyless clients announcing 8 MB bodies: each is answered on its header, nothing of
  // the bodies is held.
  std::vector<std::unique_ptr<RawConn>> conns;
  for (int i = 0; i < 50; ++i) {
    conns.push_back(std::make_unique<RawConn>(port()));
    conns.back()->Send(head8m + "\r\n" + std::string(1000, '{'));
  }
  for (auto& c : conns) EXPECT_EQ(c->Read().status, 401);
  EXPECT_EQ(fe_->stats().buffered_bytes, 0);
  // Auth comes before the route: without a key an unknown path is 401 too, not 404.
  for (const std::string& target : {"/nowhere", "/v1/models", "/tokenize", "/v1/workers"}) {
    RawConn c(port());
    c.Send("PUT " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n");
    EXPECT_EQ(c.Read().status, 401) << target;
  }
  // With the key: path and method on the header as well.
  {
    RawConn c(port());
    c.Send("POST /nowhere HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit\r\n"
           "Content-Length: 8000000\r\nExpect: 100-continue\r\n\r\n");
    EXPECT_EQ(c.Read().status, 404) << c.received();
  }
  {
    RawConn c(port());
    c.Send("PUT /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit\r\n"
           "Content-Length: 8000000\r\n\r\n");
    RawResponse r = c.Read();
    EXPECT_EQ(r.status, 405) << c.received();
    EXPECT_TRUE(r.Has("allow: post"));
  }
  {  // and a good request with the key and 100-continue gets its 100, then its answer
    RawConn c(port());
    const std::string body = Completion("Hi").dump();
    c.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekrit\r\n"
                        "Expect: 100-continue\r\nContent-Length: ", body.size(), "\r\n\r\n"));
    EXPECT_EQ(c.Read().status, 100);
    c.Send(body);
    EXPECT_EQ(c.Read().status, 200) << c.received();
  }
  EXPECT_EQ(engine_.num_requests(), 1u);
  EXPECT_EQ(tok_.encode_calls(), 1);
}

TEST_F(FrontDoorHostileTest, EveryProbeIsOpenAndNothingElse) {
  Start("sekrit");
  for (const std::string& path : std::vector<std::string>{"/health", "/health/live", "/health/ready", "/v2/health/live", "/v2/health/ready",
        absl::StrCat("/v2/models/", kModel, "/ready"), "/ping", "/metrics"}) {
    EXPECT_EQ(HttpCall(port(), "GET", path).status, 200) << path;
  }
  // Open, but no such model: 404 rather than 401.
  EXPECT_EQ(HttpCall(port(), "GET", "/v2/models/other/ready").status, 404);
  for (const std::string& path : std::vector<std::string>{"/v1/models", absl::StrCat("/v2/models/", kModel), absl::StrCat("/v2/models/", kModel,
        "/ready/x"), "/v2/models//ready/../../v1/models", "/v2/models/a/b/ready"}) {
    EXPECT_EQ(HttpCall(port(), "GET", path).status, 401) << path;
  }
  EXPECT_TRUE(frontends::IsOpenPath("/v2/models/m/ready"));
  EXPECT_FALSE(frontends::IsOpenPath("/v2/models//ready"));
  EXPECT_FALSE(frontends::IsOpenPath("/v2/models/ready"));
}

// Tokenizing stands still (FakeTokenizer::HoldEncode) while more heavy requests arrive than
// there are handler threads: the probes and the light routes are still answered.
TEST_F(FrontDoorHostileTest, ProbesAnswerWhileHeavyRequestsAreHeld) {
  Start("");
  tok_.HoldEncode(true);
  std::vector<std::unique_ptr<RawConn>> heavy;
  for (int i = 0; i < kHandlerThreads + 2; ++i) {
    heavy.push_back(std::make_unique<RawConn>(port()));
    heavy.back()->Send(Post("/v1/completions", Completion("Hello").dump()));
  }
  ASSERT_TRUE(WaitFor([&] { return tok_.encode_waiting() == kHandlerThreads; }));
  for (const char* path : {"/health/live", "/health", "/v2/health/ready", "/v1/models"}) {
    RawConn probe(port());
    probe.Send(absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_EQ(probe.Read().status, 200) << path << " was not answered while tokenizing was held";
  }
  EXPECT_EQ(tok_.encode_waiting(), kHandlerThreads);  // the heavy ones are still held
  tok_.HoldEncode(false);
  for (auto& c : heavy) EXPECT_EQ(c->Read().status, 200) << c->received();
  EXPECT_EQ(engine_.num_requests(), heavy.size());
}

TEST_F(FrontDoorHostileTest, OverLongPromptsAreRefusedByByteLengthBeforeTokenizing) {
  Start("");
  ServingContext probe;
  probe.tokenizer = &tok_;
  probe.max_model_len = kMaxLen;
  const int64_t limit = frontends::PromptByteLimit(probe);
  EXPECT_EQ(limit, kMaxLen * 10);  // the longest fake token is "<|unused|>"
  probe.max_prompt_tokens = 7;
  EXPECT_EQ(frontends::PromptByteLimit(probe), 70);
  struct Case {
    std::string path;
    json body;
    std::string param;
  };
  for (size_t n : {static_cast<size_t>(limit) + 1, size_t{1} << 20, size_t{7} << 20}) {
    const std::string text(n, 'a');
    const std::vector<Case> cases = {
        {"/v1/completions", Completion(text), "prompt"},
        {"/v1/completions", json{{"model", kModel}, {"prompt", json::array({text})}}, "prompt"},
        {"/tokenize", json{{"model", kModel}, {"prompt", text}}, "prompt"},
        {"/v1/chat/completions",
         json{{"model", kModel},
              {"messages", json::array({{{"role", "user"}, {"content", text.substr(0, n / 2)}},
                                        {{"role", "user"}, {"content", text.substr(n / 2)}}})}},
         "messages"},
        {"/tokenize",
         json{{"model", kModel}, {"messages", json::array({{{"role", "user"}, {"content", text}}})}},
         "messages"},
    };
    for (const Case& k : cases) {
      SCOPED_TRACE(absl::StrCat(k.path, " ", n, " bytes"));
      RawConn c(port());
      c.Send(Post(k.path, k.body.dump()));
      RawResponse r = c.Read();
      EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
      EXPECT_EQ(ErrorOf(r)["param"], k.param) << r.body.substr(0, 300);
      EXPECT_EQ(ErrorOf(r)["code"], "prompt_too_long");
      EXPECT_TRUE(absl::StrContains(ErrorOf(r)["message"].get<std::string>(), "bytes"));
    }
  }
  EXPECT_EQ(tok_.encode_calls(), 0) << "an over-long prompt was tokenized";
  // At the limit it is tokenized, and refused for its token count instead.
  RawConn c(port());
  c.Send(Post("/v1/completions", Completion(std::string(limit, 'a')).dump()));
  RawResponse r = c.Read();
  EXPECT_EQ(r.status, 400);
  EXPECT_FALSE(absl::StrContains(ErrorOf(r)["message"].get<std::string>(), "bytes")) << r.body;
  EXPECT_EQ(tok_.encode_calls(), 1);
}

TEST_F(FrontDoorHostileTest, HalfClosedClientGetsItsCompletion) {
  Start("");
  for (bool stream : {false, true}) {
    RawConn c(port());
    json body = Completion("Hi");
    body["stream"] = stream;
    c.Send(Post("/v1/completions", body.dump()));
    c.ShutdownWrite();
    EXPECT_TRUE(c.ClosedWithin()) << "no end after the answer";
    EXPECT_TRUE(absl::StartsWith(c.received(), "HTTP/1.1 200")) << c.received();
    EXPECT_TRUE(absl::StrContains(c.received(), stream ? "[DONE]" : "text_completion"))
        << c.received();
  }
}

}  // namespace
}  // namespace mxserve::testing

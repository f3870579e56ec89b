// Who may call mxserve: the API key on the public HTTP and gRPC doors (401 / UNAUTHENTICATED,
// probes open), and the worker port (token and mutual TLS with certificates made by openssl
// at test time). Real servers on 127.0.0.1, port 0; fake engine behind the front doors.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <random>
#include <string>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/auth.h"
#include "coordinator/frontends/grpc_frontend.h"
#include "coordinator/frontends/http_frontend.h"
#include "coordinator/router/worker_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "mxserve/v1/expert_worker.grpc.pb.h"
#include "mxserve/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/frontends/fakes.h"
#include "tests/frontends/http_client.h"
#include "wire/constant_time.h"
#include "worker/expert_service.h"
#include "worker/worker_server.h"

namespace mxserve {
namespace {

using json = nlohmann::json;
using frontends::BearerToken;
using frontends::CheckApiKey;
using ::mxserve::testing::FakeChatTemplate;
using ::mxserve::testing::FakeGenerationService;
using ::mxserve::testing::FakeTokenizer;
using ::mxserve::testing::HttpClient;
using ::mxserve::testing::HttpResult;

constexpr char kKey[] = "sk-test-0123456789abcdef";

// --- the comparison and the header -------------------------------------------------------------

// Slow obvious twin: equal iff same length and same bytes.
TEST(ConstantTimeEqualsTest, AgreesWithPlainComparisonOnRandomStrings) {
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string a(rng() % 6, '\0'), b(rng() % 6, '\0');
    for (char& c : a) c = static_cast<char>('a' + rng() % 3);
    for (char& c : b) c = static_cast<char>('a' + rng() % 3);
    if (rng() % 4 == 0) b = a;
    ASSERT_EQ(ConstantTimeEquals(a, b), a == b) << "'" << a << "' vs '" << b << "'";
  }
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_FALSE(ConstantTimeEquals("x", ""));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcabc"));  // b's bytes repeat: length still decides
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), "a"));
}

TEST(BearerTokenTest, Shapes) {
  EXPECT_EQ(BearerToken("Bearer abc").value_or("-"), "abc");
  EXPECT_EQ(BearerToken("bearer abc").value_or("-"), "abc");
  EXPECT_EQ(BearerToken("BEARER   abc  ").value_or("-"), "abc");
  EXPECT_FALSE(BearerToken("Bearer").has_value());
  EXPECT_FALSE(BearerToken("Bearer ").has_value());
  EXPECT_FALSE(BearerToken("Bearerabc").has_value());
  EXPECT_FALSE(BearerToken("Basic abc").has_value());
  EXPECT_FALSE(BearerToken("abc").has_value());
  EXPECT_FALSE(BearerToken("").has_value());
}

TEST(CheckApiKeyTest, OffWhenNoKeyElseExactMatch) {
  EXPECT_TRUE(CheckApiKey("", "").ok());
  EXPECT_TRUE(CheckApiKey("", "Bearer whatever").ok());
  EXPECT_TRUE(CheckApiKey(kKey, std::string("Bearer ") + kKey).ok());
  for (const std::string& bad : std::vector<std::string>{"", "Bearer", "Bearer sk-test", std::string("Bearer ") + kKey + "x",
                          std::string("Basic ") + kKey, std::string(kKey)}) {
    absl::Status s = CheckApiKey(kKey, bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_EQ(frontends::CodeOf(s).value_or(""), "invalid_api_key");
    EXPECT_EQ(std::string(s.message()).find("sk-test"), std::string::npos) << "key echoed";
  }
}

// --- HTTP front door ---------------------------------------------------------------------------

class HttpAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServingContext ctx;
    ctx.model_id = "tiny-model";
    ctx.max_model_len = 128;
    ctx.tokenizer = &tok_;
    ctx.chat_template = &tmpl_;
    ctx.engine = &engine_;
    ctx.metrics = [] { return std::string("mxserve_up 1\n"); };
    ctx.api_key = kKey;
    frontends::HttpServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    auto fe = frontends::HttpFrontend::Start(ctx, o);
    ASSERT_TRUE(fe.ok()) << fe.status();
    fe_ = *std::move(fe);
  }
  // One request with an optional Authorization header, raw (HttpClient sets no auth).
  HttpResult Call(const std::string& method, const std::string& path, const std::string& auth,
                  const std::string& body = "") {
    HttpClient c(fe_->port());
    std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    if (!auth.empty()) req += "Authorization: " + auth + "\r\n";
    if (method == "POST") {
      req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
             "\r\n";
    }
    req += "Connection: close\r\n\r\n" + body;
    c.WriteRaw(req);
    return c.Read();
  }
  FakeTokenizer tok_;
  FakeChatTemplate tmpl_;
  FakeGenerationService engine_;
  std::unique_ptr<frontends::HttpFrontend> fe_;
};

TEST_F(HttpAuthTest, NoKeyOrWrongKeyIs401WithOpenAiError) {
  const std::string chat = R"({"model":"tiny-model","messages":[{"role":"user","content":"hi"}]})";
  for (const std::string& auth : {std::string(), std::string("Bearer wrong"),
                                  std::string("Bearer ") + kKey + "0", std::string("Basic x"),
                                  std::string(kKey)}) {
    for (auto [method, path] : std::vector<std::pair<std::string, std::string>>{
             {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"},
             {"GET", "/v1/models"}, {"POST", "/tokenize"}, {"GET", "/no/such/path"}}) {
      HttpResult r = Call(method, path, auth, method == "POST" ? chat : "");
      ASSERT_EQ(r.status, 401) << method << " " << path << " auth '" << auth << "': " << r.body;
      EXPECT_EQ(r.header("www-authenticate"), "Bearer");
      json e = json::parse(r.body)["error"];
      EXPECT_EQ(e["code"], "invalid_api_key");
      EXPECT_EQ(e["type"], "authentication_error");
      EXPECT_FALSE(e["message"].get<std::string>().empty());
    }
  }
  EXPECT_EQ(engine_.requests().size(), 0u) << "an unauthenticated request reached the engine";
}

TEST_F(HttpAuthTest, RightKeyPasses) {
  HttpResult r = Call("GET", "/v1/models", std::string("Bearer ") + kKey);
  EXPECT_EQ(r.status, 200) << r.body;
  r = Call("GET", "/v1/models", std::string("bearer  ") + kKey + " ");
  EXPECT_EQ(r.status, 200) << r.body;
  r = Call("POST", "/v1/completions", std::string("Bearer ") + kKey,
           R"({"model":"tiny-model","prompt":"ab","max_tokens":2})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.requests().size(), 1u);
}

TEST_F(HttpAuthTest, ProbesAndMetricsStayOpen) {
  for (const char* path : {"/health", "/health/live", "/health/ready", "/ping", "/metrics"}) {
    HttpResult r = Call("GET", path, "");
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
  }
}

// --- gRPC front door ---------------------------------------------------------------------------

class GrpcAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServingContext ctx;
    ctx.model_id = "tiny-model";
    ctx.max_model_len = 64;
    ctx.tokenizer = &tok_;
    ctx.chat_template = &tmpl_;
    ctx.engine = &engine_;
    ctx.api_key = kKey;
    frontends::GrpcServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.health_poll = std::chrono::milliseconds(20);
    o.reflection = reflection_;
    auto fe = frontends::GrpcFrontend::Start(ctx, o);
    ASSERT_TRUE(fe.ok()) << fe.status();
    fe_ = *std::move(fe);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(fe_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Inference::NewStub(channel_);
  }
  void TearDown() override { fe_->Shutdown(); }
  static void Prepare(grpc::ClientContext* ctx, const std::string& auth) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!auth.empty()) ctx->AddMetadata("authorization", auth);
  }
  grpc::Status ListModels(const std::string& auth) {
    grpc::ClientContext ctx;
    Prepare(&ctx, auth);
    v1::ListModelsResponse resp;
    return stub_->ListModels(&ctx, v1::ListModelsRequest(), &resp);
  }
  grpc::Status Tokenize(const std::string& auth) {
    grpc::ClientContext ctx;
    Prepare(&ctx, auth);
    v1::TokenizeRequest req;
    req.set_text("abc");
    v1::TokenizeResponse resp;
    return stub_->Tokenize(&ctx, req, &resp);
  }
  grpc::Status Generate(const std::string& auth) {
    grpc::ClientContext ctx;
    Prepare(&ctx, auth);
    v1::GenerateRequest req;
    req.set_prompt("abc");
    req.mutable_sampling()->set_max_tokens(2);
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateResponse m;
    while (reader->Read(&m)) {
    }
    return reader->Finish();
  }
  FakeTokenizer tok_;
  FakeChatTemplate tmpl_;
  FakeGenerationService engine_;
  std::unique_ptr<frontends::GrpcFrontend> fe_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Inference::Stub> stub_;
  bool reflection_ = false;
};

TEST_F(GrpcAuthTest, NoKeyOrWrongKeyIsUnauthenticated) {
  for (const std::string& auth : {std::string(), std::string("Bearer nope"),
                                  std::string("Bearer ") + kKey + "0"}) {
    EXPECT_EQ(ListModels(auth).error_code(), grpc::StatusCode::UNAUTHENTICATED) << auth;
    EXPECT_EQ(Tokenize(auth).error_code(), grpc::StatusCode::UNAUTHENTICATED) << auth;
    EXPECT_EQ(Generate(auth).error_code(), grpc::StatusCode::UNAUTHENTICATED) << auth;
  }
  EXPECT_EQ(engine_.requests().size(), 0u);
}

TEST_F(GrpcAuthTest, RightKeyPassesAndHealthStaysOpen) {
  const std::string auth = std::string("Bearer ") + kKey;
  EXPECT_TRUE(ListModels(auth).ok());
  EXPECT_TRUE(Tokenize(auth).ok());
  grpc::Status g = Generate(auth);
  EXPECT_TRUE(g.ok()) << g.error_message();
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  Prepare(&ctx, "");
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = health->Check(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// --- worker port -------------------------------------------------------------------------------

WorkerModelInfo Info() {
  WorkerModelInfo info;
  info.model_type = "gpt_oss";
  info.num_layers = 1;
  info.num_experts = 4;
  info.hidden_size = 32;
  info.intermediate_size = 32;
  info.experts = {0, 1, 2, 3};
  return info;
}

std::unique_ptr<WorkerServer> StartWorker(WorkerAuthOptions auth, int health_port = -1,
                                          bool reflection = false) {
  WorkerServerOptions o;
  o.reflection = reflection;
  o.host = "127.0.0.1";
  o.port = 0;
  o.auth = std::move(auth);
  o.plaintext_health_port = health_port;
  auto s = WorkerServer::Start(o, std::make_shared<ExpertService>(Info()));
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return nullptr;
  (*s)->SetServing(true);
  return *std::move(s);
}

absl::Status Describe(const std::string& address, WorkerAuthOptions auth) {
  WorkerClientOptions o;
  o.auth = std::move(auth);
  auto c = WorkerClient::Create(address, o);
  if (!c.ok()) return c.status();
  return (*c)->Describe(absl::Now() + absl::Seconds(5)).status();
}

// A RunExperts that passes validation (0 tokens) and so reaches the not-yet-ready service:
// UNAVAILABLE means "let in", UNAUTHENTICATED "refused at the door".
grpc::Status RawRunExperts(const std::shared_ptr<grpc::Channel>& ch, const std::string& auth) {
  auto stub = v1::ExpertWorker::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!auth.empty()) ctx.AddMetadata("authorization", auth);
  v1::RunExpertsRequest req;
  req.set_layer(0);
  req.set_hidden_size(32);
  req.set_top_k(1);
  req.set_dtype(v1::TENSOR_DTYPE_F32);
  v1::RunExpertsResponse resp;
  return stub->RunExperts(&ctx, req, &resp);
}

bool HealthServing(const std::shared_ptr<grpc::Channel>& ch) {
  auto health = grpc::health::v1::Health::NewStub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = health->Check(&ctx, req, &resp);
  return s.ok() && resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

TEST(WorkerTokenTest, WrongOrMissingTokenIsRefusedRightTokenPasses) {
  WorkerAuthOptions server;
  server.token = "worker-secret-1";
  auto w = StartWorker(server);
  ASSERT_NE(w, nullptr);
  WorkerAuthOptions none, wrong, right;
  wrong.token = "worker-secret-2";
  right.token = "worker-secret-1";
  EXPECT_EQ(Describe(w->address(), none).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Describe(w->address(), wrong).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Describe(w->address(), right).ok());

  auto ch = grpc::CreateChannel(w->address(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(RawRunExperts(ch, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RawRunExperts(ch, "Bearer worker-secret-").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RawRunExperts(ch, "Bearer worker-secret-1").error_code(),
            grpc::StatusCode::UNAVAILABLE);  // let in; the weights are not loaded
  EXPECT_TRUE(HealthServing(ch)) << "health must stay open for probes";
}

TEST(WorkerTokenTest, NoAuthConfiguredLetsEveryoneIn) {
  auto w = StartWorker(WorkerAuthOptions{});
  ASSERT_NE(w, nullptr);
  WorkerAuthOptions token;
  token.token = "anything";
  EXPECT_TRUE(Describe(w->address(), WorkerAuthOptions{}).ok());
  EXPECT_TRUE(Describe(w->address(), token).ok());
}

class WorkerMtlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/mxserve-certs-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string script = std::string(MXSERVE_SOURCE_DIR) + "/tests/auth/make_test_certs.sh";
    const std::string cmd = script + " " + dir_ + " >" + dir_ + "/log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl failed: see " << dir_ << "/log";
  }
  static void TearDownTestSuite() {
    std::system(("rm -rf " + dir_).c_str());
  }
  static std::string F(const std::string& name) { return dir_ + "/" + name; }
  static WorkerAuthOptions Server() {
    return {"", F("ca.pem"), F("server.pem"), F("server.key"), ""};
  }
  static WorkerAuthOptions Client() {
    return {"", F("ca.pem"), F("client.pem"), F("client.key"), ""};
  }
  static inline std::string dir_;
};

TEST_F(WorkerMtlsTest, CoordinatorWithCertificatesGetsIn) {
  auto w = StartWorker(Server());
  ASSERT_NE(w, nullptr);
  absl::Status s = Describe(w->address(), Client());
  EXPECT_TRUE(s.ok()) << s;
  // The server certificate names "mxserve-worker" too: an address by another name works with
  // the override (one certificate for every pod of a StatefulSet).
  WorkerAuthOptions by_name = Client();
  by_name.tls_server_name = "mxserve-worker";
  s = Describe("localhost:" + std::to_string(w->port()), by_name);
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(WorkerMtlsTest, NoCertificatePlaintextOrUntrustedCertificateIsRefused) {
  auto w = StartWorker(Server());
  ASSERT_NE(w, nullptr);
  // Plaintext against a TLS port: the handshake never completes.
  EXPECT_FALSE(Describe(w->address(), WorkerAuthOptions{}).ok());
  // TLS, trusting the CA, but no client certificate.
  grpc::SslCredentialsOptions no_cert;
  {
    std::ifstream f(F("ca.pem"));
    no_cert.pem_root_certs.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto ch = grpc::CreateChannel(w->address(), grpc::SslCredentials(no_cert));
  grpc::Status g = RawRunExperts(ch, "");
  EXPECT_FALSE(g.ok()) << "a call without a client certificate got through";
  EXPECT_FALSE(HealthServing(ch)) << "no client certificate: not even the handshake succeeds";
  // A client certificate from a CA the worker does not trust.
  WorkerAuthOptions rogue = Client();
  rogue.tls_cert = F("rogue-client.pem");
  rogue.tls_key = F("rogue-client.key");
  EXPECT_FALSE(Describe(w->address(), rogue).ok());
  // And a coordinator that does not trust the worker's CA refuses the worker.
  WorkerAuthOptions distrust = Client();
  distrust.tls_ca = F("rogue-ca.pem");
  EXPECT_FALSE(Describe(w->address(), distrust).ok());
}

TEST_F(WorkerMtlsTest, TokenAndTlsTogether) {
  WorkerAuthOptions server = Server();
  server.token = "t0k3n";
  auto w = StartWorker(server);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(Describe(w->address(), Client()).code(), absl::StatusCode::kUnauthenticated);
  WorkerAuthOptions client = Client();
  client.token = "t0k3n";
  EXPECT_TRUE(Describe(w->address(), client).ok());
}

TEST_F(WorkerMtlsTest, PlaintextHealthPortAnswersProbesButNotExperts) {
  auto w = StartWorker(Server(), /*health_port=*/0);
  ASSERT_NE(w, nullptr);
  ASSERT_GT(w->plaintext_health_port(), 0);
  auto ch = grpc::CreateChannel("127.0.0.1:" + std::to_string(w->plaintext_health_port()),
                                grpc::InsecureChannelCredentials());
  EXPECT_TRUE(HealthServing(ch));
  EXPECT_EQ(RawRunExperts(ch, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Describe("127.0.0.1:" + std::to_string(w->plaintext_health_port()),
                     WorkerAuthOptions{})
                .code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(WorkerMtlsTest, MissingOrBadFilesAreConfigErrorsNamingTheFlag) {
  WorkerAuthOptions half;
  half.tls_ca = F("ca.pem");
  WorkerServerOptions o;
  o.auth = half;
  auto s = WorkerServer::Start(o, std::make_shared<ExpertService>(Info()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.status().message()).find("--tls-cert"), std::string::npos);
  WorkerClientOptions co;
  co.auth = Client();
  co.auth.tls_key = F("nope.key");
  auto c = WorkerClient::Create("127.0.0.1:1", co);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("--tls-key"), std::string::npos);
  co.auth.tls_key = F("ca.srl");  // exists, not PEM
  c = WorkerClient::Create("127.0.0.1:1", co);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("not a PEM"), std::string::npos);
}

// gRPC server reflection answers without the API key or the worker token (a plugin outside the
// services' checks), so it is off unless a flag asks for it. Its one method
// called as unary with an empty request: UNIMPLEMENTED without reflection, OK with it.
grpc::StatusCode CallReflection(const std::string& address) {
  auto ch = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer req(&empty, 1), resp;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                 grpc::StubOptions(), &req, &resp,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get().error_code();
}

TEST_F(GrpcAuthTest, ReflectionIsOffByDefault) {
  EXPECT_EQ(CallReflection("127.0.0.1:" + std::to_string(fe_->port())),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST(WorkerReflectionTest, OffByDefault) {
  WorkerAuthOptions server;
  server.token = "worker-secret-1";
  auto w = StartWorker(server);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(CallReflection(w->address()), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Describe(w->address(), WorkerAuthOptions{}).code(), absl::StatusCode::kUnauthenticated);
}

class GrpcReflectionOnTest : public GrpcAuthTest {
 protected:
  GrpcReflectionOnTest() { reflection_ = true; }
};

TEST_F(GrpcReflectionOnTest, OnWhenAskedFor) {
  EXPECT_EQ(CallReflection("127.0.0.1:" + std::to_string(fe_->port())), grpc::StatusCode::OK);
}

}  // namespace
}  // namespace mxserve

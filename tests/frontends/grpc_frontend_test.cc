// The gRPC front door over a real server on 127.0.0.1 (port 0), against fake engine/tokenizer.
#include "coordinator/frontends/grpc_frontend.h"

#include <atomic>
#include <chrono>
#include <limits>
#include <set>
#include <map>
#include <thread>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "mxserve/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/frontends/fakes.h"

namespace mxserve::frontends {
namespace {

namespace pb = ::mxserve::v1;
using ::mxserve::testing::FakeChatTemplate;
using ::mxserve::testing::FakeGenerationService;
using ::mxserve::testing::FakeTokenizer;

class GrpcFrontendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServingContext ctx{"tiny-model", 64, &tok_, &tmpl_, &engine_, [this] { return ready_.load(); }};
    GrpcServerOptions opts;
    opts.host = "127.0.0.1";
    opts.port = 0;
    opts.health_poll = std::chrono::milliseconds(20);
    opts.reflection = reflection_;
    auto fe = GrpcFrontend::Start(ctx, opts);
    ASSERT_TRUE(fe.ok()) << fe.status();
    fe_ = *std::move(fe);
    ASSERT_GT(fe_->port(), 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(fe_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = pb::Inference::NewStub(channel_);
  }
  void TearDown() override { fe_->Shutdown(); }
  bool reflection_ = false;  // off unless asked for (--grpc-reflection; auth_test checks off)

  struct Result {
    grpc::Status status;
    std::vector<pb::GenerateResponse> messages;
  };
  Result Generate(const pb::GenerateRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto reader = stub_->Generate(&ctx, req);
    Result out;
    pb::GenerateResponse m;
    while (reader->Read(&m)) out.messages.push_back(m);
    out.status = reader->Finish();
    return out;
  }
  static pb::GenerateRequest Prompt(const std::string& text) {
    pb::GenerateRequest r;
    r.set_model("tiny-model");
    r.set_prompt(text);
    return r;
  }

  FakeTokenizer tok_;
  FakeChatTemplate tmpl_;
  FakeGenerationService engine_;
  std::atomic<bool> ready_{true};
  std::unique_ptr<GrpcFrontend> fe_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Inference::Stub> stub_;
};

TEST_F(GrpcFrontendTest, GenerateStreamsDeltasThenFinalWithUsage) {
  pb::GenerateRequest req = Prompt("abc");
  req.mutable_sampling()->set_max_tokens(4);
  req.mutable_sampling()->set_temperature(0);
  req.mutable_sampling()->set_logprobs(1);
  req.mutable_sampling()->add_stop("zz");
  Result r = Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.messages.size(), 5u);
  std::string text;
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < r.messages.size(); ++i) {
    const auto& m = r.messages[i];
    EXPECT_FALSE(m.finished());
    text += m.text();
    ids.insert(ids.end(), m.token_ids().begin(), m.token_ids().end());
    ASSERT_EQ(m.logprobs_size(), 1);
    EXPECT_EQ(m.logprobs(0).top_size(), 1);
    EXPECT_EQ(m.logprobs(0).token(), std::string(1, text.back()));
  }
  EXPECT_EQ(text, "Hell");
  EXPECT_EQ(ids, (std::vector<int32_t>{'H', 'e', 'l', 'l'}));
  const auto& fin = r.messages.back();
  EXPECT_TRUE(fin.finished());
  EXPECT_EQ(fin.finish_reason(), pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(fin.usage().prompt_tokens(), 3);
  EXPECT_EQ(fin.usage().completion_tokens(), 4);
  EXPECT_EQ(fin.usage().total_tokens(), 7);
  EXPECT_FALSE(fin.request_id().empty());
  auto sent = engine_.requests().at(0);
  EXPECT_EQ(sent.request_id, fin.request_id());
  EXPECT_EQ(sent.params.max_tokens, 4);
  EXPECT_EQ(sent.params.temperature, 0.0f);
  EXPECT_EQ(sent.params.stop, std::vector<std::string>{"zz"});
}

TEST_F(GrpcFrontendTest, GenerateFromTokenIdsAndMessages) {
  pb::GenerateRequest req;
  req.mutable_prompt_token_ids()->add_ids(5);
  req.mutable_prompt_token_ids()->add_ids(6);
  req.set_request_id("mine-1");
  Result r = Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(engine_.requests().at(0).prompt_tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(engine_.requests().at(0).request_id, "mine-1");
  EXPECT_EQ(engine_.requests().at(0).params.max_tokens, 62);  // the rest of the context

  engine_.set_script([](const GenerateRequest& q) {
    return FakeGenerationService::TextScript(
        q, {FakeTokenizer::kThink, 'r', FakeTokenizer::kAnswer, 'o', 'k'});
  });
  pb::GenerateRequest chat;
  auto* m = chat.mutable_messages()->add_messages();
  m->set_role("user");
  m->set_content("Q");
  r = Generate(chat);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  std::string text;
  for (const auto& msg : r.messages) text += msg.text();
  EXPECT_EQ(text, "ok");  // reasoning is not part of the text deltas
  EXPECT_EQ(engine_.requests().at(1).prompt_tokens, tok_.Encode("user:Q\nassistant:", true));
  EXPECT_EQ(engine_.requests().at(1).params.stop_token_ids,
            std::vector<int32_t>{FakeTokenizer::kEnd});
}

// Chat parity with /v1/chat/completions: tools, tool_choice and reasoning_effort reach the
// template; earlier tool calls and reasoning of assistant turns too; the reply's reasoning and
// tool calls come in their own fields, and a turn that calls tools finishes with TOOL_CALLS.
TEST_F(GrpcFrontendTest, ChatCarriesToolsReasoningAndToolCalls) {
  engine_.set_script([](const GenerateRequest& q) {
    return FakeGenerationService::TextScript(
        q, {FakeTokenizer::kThink, 'h', 'm', FakeTokenizer::kAnswer, 'o', 'k', FakeTokenizer::kCall,
            '{', '"', 'q', '"', ':', '1', '}'});
  });
  const std::string tools = R"([{"type": "function", "function": {"name": "lookup", "parameters": {}}}])";
  pb::GenerateRequest req;
  req.set_tools_json(tools);
  req.set_tool_choice("auto");
  req.set_reasoning_effort("high");
  auto* msgs = req.mutable_messages();
  auto* u = msgs->add_messages();
  u->set_role("user");
  u->set_content("find q");
  auto* a = msgs->add_messages();
  a->set_role("assistant");
  a->set_reasoning("think");
  auto* call = a->add_tool_calls();
  call->set_id("call_1");
  call->set_name("lookup");
  call->set_arguments("{}");
  auto* t = msgs->add_messages();
  t->set_role("tool");
  t->set_name("lookup");
  t->set_tool_call_id("call_1");
  t->set_content("42");
  Result r = Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();

  EXPECT_EQ(nlohmann::json::parse(tmpl_.last_tools_json()), nlohmann::json::parse(tools));
  EXPECT_EQ(tmpl_.last_effort(), "high");
  const std::vector<ChatMessage> seen = tmpl_.last_messages();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(seen[1].tool_calls_json), nlohmann::json::parse(R"([{"id": "call_1",
      "type": "function", "function": {"name": "lookup", "arguments": "{}"}}])"));
  EXPECT_EQ(seen[1].reasoning, "think");
  EXPECT_EQ(seen[1].content, "");
  EXPECT_EQ(seen[2].name, "lookup");
  EXPECT_EQ(seen[2].content, "42");

  std::string text, reasoning, id, name, args;
  for (const auto& m : r.messages) {
    text += m.text();
    reasoning += m.reasoning();
    for (const auto& c : m.tool_calls()) {
      EXPECT_EQ(c.index(), 0);
      if (!c.id().empty()) {
        EXPECT_TRUE(id.empty()) << "id only on the call's first piece";
        id = c.id();
      }
      name += c.name();
      args += c.arguments();
    }
  }
  EXPECT_EQ(text, "ok");
  EXPECT_EQ(reasoning, "hm");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(name, "lookup");
  EXPECT_EQ(args, R"({"q":1})");
  ASSERT_FALSE(r.messages.empty());
  EXPECT_TRUE(r.messages.back().finished());
  EXPECT_EQ(r.messages.back().finish_reason(), pb::FINISH_REASON_TOOL_CALLS);

  // tool_choice "none" offers no tools; a reply without calls finishes with STOP.
  engine_.set_script([](const GenerateRequest& q) {
    return FakeGenerationService::TextScript(q, {FakeTokenizer::kAnswer, 'o', 'k'});
  });
  req.set_tool_choice("none");
  r = Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(tmpl_.last_tools_json(), "");
  EXPECT_EQ(r.messages.back().finish_reason(), pb::FINISH_REASON_STOP);
}

TEST_F(GrpcFrontendTest, InvalidRequestsNameTheField) {
  struct Case {
    std::string name;
    pb::GenerateRequest req;
    grpc::StatusCode code;
    std::string needle;
  };
  std::vector<Case> cases;
  auto add = [&](std::string name, grpc::StatusCode code, std::string needle, auto edit) {
    pb::GenerateRequest r = Prompt("abc");
    edit(r);
    cases.push_back({std::move(name), std::move(r), code, std::move(needle)});
  };
  using C = grpc::StatusCode;
  add("no input", C::INVALID_ARGUMENT, "input", [](auto& r) { r.clear_prompt(); });
  add("empty prompt", C::INVALID_ARGUMENT, "prompt", [](auto& r) { r.set_prompt(""); });
  add("unknown model", C::NOT_FOUND, "gpt-9", [](auto& r) { r.set_model("gpt-9"); });
  add("temperature", C::INVALID_ARGUMENT, "sampling.temperature",
      [](auto& r) { r.mutable_sampling()->set_temperature(-1); });
  add("temperature NaN", C::INVALID_ARGUMENT, "sampling.temperature", [](auto& r) {
    r.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
  });
  add("top_p NaN", C::INVALID_ARGUMENT, "sampling.top_p", [](auto& r) {
    r.mutable_sampling()->set_top_p(std::numeric_limits<float>::quiet_NaN());
  });
  add("top_p", C::INVALID_ARGUMENT, "sampling.top_p",
      [](auto& r) { r.mutable_sampling()->set_top_p(1.5); });
  add("max_tokens 0", C::INVALID_ARGUMENT, "sampling.max_tokens",
      [](auto& r) { r.mutable_sampling()->set_max_tokens(0); });
  add("max_tokens beyond context", C::INVALID_ARGUMENT, "maximum context length",
      [](auto& r) { r.mutable_sampling()->set_max_tokens(62); });
  add("logprobs", C::INVALID_ARGUMENT, "sampling.logprobs",
      [](auto& r) { r.mutable_sampling()->set_logprobs(21); });
  add("stop token id", C::INVALID_ARGUMENT, "sampling.stop_token_ids",
      [](auto& r) { r.mutable_sampling()->add_stop_token_ids(1000); });
  add("token id", C::INVALID_ARGUMENT, "prompt_token_ids", [](auto& r) {
    r.mutable_prompt_token_ids()->add_ids(1);
    r.mutable_prompt_token_ids()->add_ids(-4);
  });
  add("empty messages", C::INVALID_ARGUMENT, "messages", [](auto& r) { r.mutable_messages(); });
  add("bad role", C::INVALID_ARGUMENT, "messages[0].role", [](auto& r) {
    auto* m = r.mutable_messages()->add_messages();
    m->set_role("robot");
  });
  auto chat = [](pb::GenerateRequest& r) {
    auto* m = r.mutable_messages()->add_messages();  // replaces the prompt (one input)
    m->set_role("user");
    m->set_content("Q");
  };
  constexpr char kTools[] = R"([{"type": "function", "function": {"name": "lookup"}}])";
  add("n 0", C::INVALID_ARGUMENT, "sampling.n", [](auto& r) { r.mutable_sampling()->set_n(0); });
  add("n 17", C::INVALID_ARGUMENT, "sampling.n", [](auto& r) { r.mutable_sampling()->set_n(17); });
  add("tools without messages", C::INVALID_ARGUMENT, "'tools_json' is only allowed with 'messages'",
      [&](auto& r) { r.set_tools_json(kTools); });
  add("effort without messages", C::INVALID_ARGUMENT, "reasoning_effort",
      [&](auto& r) { r.set_reasoning_effort("low"); });
  add("tools not JSON", C::INVALID_ARGUMENT, "tools_json", [&](auto& r) {
    chat(r);
    r.set_tools_json("[{");
  });
  add("tool without name", C::INVALID_ARGUMENT, "tools[0].function.name", [&](auto& r) {
    chat(r);
    r.set_tools_json(R"([{"type": "function", "function": {}}])");
  });
  add("tool_choice unknown", C::INVALID_ARGUMENT, "which is not in 'tools'", [&](auto& r) {
    chat(r);
    r.set_tools_json(kTools);
    r.set_tool_choice("nope");
  });
  add("tool_choice cannot force", C::INVALID_ARGUMENT, "cannot force tool calls", [&](auto& r) {
    chat(r);
    r.set_tools_json(kTools);
    r.set_tool_choice("required");
  });
  add("reasoning_effort", C::INVALID_ARGUMENT, "reasoning_effort", [&](auto& r) {
    chat(r);
    r.set_reasoning_effort("max");
  });
  add("tool_calls on a user turn", C::INVALID_ARGUMENT, "messages[0].tool_calls", [&](auto& r) {
    chat(r);
    r.mutable_messages()->mutable_messages(0)->add_tool_calls()->set_name("lookup");
  });
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result r = Generate(c.req);
    EXPECT_EQ(r.status.error_code(), c.code) << r.status.error_message();
    EXPECT_NE(r.status.error_message().find(c.needle), std::string::npos)
        << r.status.error_message();
    EXPECT_TRUE(r.messages.empty());
  }
  EXPECT_EQ(engine_.num_requests(), 0u);
  EXPECT_TRUE(Generate(Prompt("abc")).status.ok());  // still serving
}

TEST_F(GrpcFrontendTest, RejectionsAndMidStreamErrorsMapToGrpcCodes) {
  engine_.set_next_status(absl::ResourceExhaustedError("queue full"));
  EXPECT_EQ(Generate(Prompt("a")).status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  engine_.set_next_status(absl::UnavailableError("draining"));
  EXPECT_EQ(Generate(Prompt("a")).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  engine_.set_next_status(absl::OkStatus());
  ready_ = false;
  EXPECT_EQ(Generate(Prompt("a")).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  ready_ = true;

  engine_.set_script([](const GenerateRequest&) {
    GenerationEvent a;
    a.token_ids = {'x'};
    a.text = "x";
    GenerationEvent b;
    b.finished = true;
    b.finish_reason = FinishReason::kError;
    b.error = absl::InternalError("kernel fault");
    return std::vector<GenerationEvent>{a, b};
  });
  Result r = Generate(Prompt("a"));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(r.status.error_message(), "kernel fault");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].text(), "x");
}

TEST_F(GrpcFrontendTest, ClientCancelCancelsTheEngineRequest) {
  engine_.set_hold_after_first(true);
  grpc::ClientContext ctx;
  auto reader = stub_->Generate(&ctx, Prompt("abc"));
  pb::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));
  EXPECT_EQ(m.text(), "H");
  const std::string id = engine_.requests().at(0).request_id;
  ctx.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (engine_.cancelled().count(id) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_.cancelled().count(id), 1u);
  engine_.set_hold_after_first(false);
  EXPECT_TRUE(Generate(Prompt("abc")).status.ok());
}

// sampling.n: n engine requests behind one stream; messages carry their sequence's index, each
// sequence ends with its own final message, seeds are seed + i; a cancel cancels every one.
TEST_F(GrpcFrontendTest, NSequencesShareOneStream) {
  pb::GenerateRequest req = Prompt("abc");
  req.set_request_id("multi");
  req.mutable_sampling()->set_n(3);
  req.mutable_sampling()->set_seed(7);
  Result r = Generate(req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  std::map<int, std::string> text;
  std::map<int, int> finals;
  for (const auto& m : r.messages) {
    EXPECT_EQ(m.request_id(), "multi");
    if (m.finished()) {
      ++finals[m.index()];
      EXPECT_EQ(m.finish_reason(), pb::FINISH_REASON_STOP);
      EXPECT_EQ(m.usage().completion_tokens(), 6);
    } else {
      EXPECT_TRUE(finals.count(m.index()) == 0) << "a delta after its sequence's final message";
      text[m.index()] += m.text();
    }
  }
  EXPECT_EQ(text, (std::map<int, std::string>{{0, "Hello!"}, {1, "Hello!"}, {2, "Hello!"}}));
  EXPECT_EQ(finals, (std::map<int, int>{{0, 1}, {1, 1}, {2, 1}}));
  ASSERT_TRUE(r.messages.back().finished());
  const auto sent = engine_.requests();
  ASSERT_EQ(sent.size(), 3u);
  std::set<std::string> ids;
  std::set<uint64_t> seeds;
  for (const auto& q : sent) {
    ids.insert(q.request_id);
    seeds.insert(q.params.seed.value_or(0));
  }
  EXPECT_EQ(ids, (std::set<std::string>{"multi-0", "multi-1", "multi-2"}));
  EXPECT_EQ(seeds, (std::set<uint64_t>{7, 8, 9}));

  // Cancelling the call cancels every sequence.
  engine_.set_hold_after_first(true);
  grpc::ClientContext ctx;
  req.set_request_id("multi2");
  req.mutable_sampling()->set_n(2);
  auto reader = stub_->Generate(&ctx, req);
  pb::GenerateResponse m;
  ASSERT_TRUE(reader->Read(&m));
  ctx.TryCancel();
  while (reader->Read(&m)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto both = [&] {
    auto c = engine_.cancelled();
    return c.count("multi2-0") == 1 && c.count("multi2-1") == 1;
  };
  while (!both() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(both());
  engine_.set_hold_after_first(false);
  EXPECT_TRUE(Generate(Prompt("abc")).status.ok());
}

TEST_F(GrpcFrontendTest, ListModelsAndTokenize) {
  grpc::ClientContext c1;
  pb::ListModelsResponse models;
  ASSERT_TRUE(stub_->ListModels(&c1, pb::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.models(0).id(), "tiny-model");
  EXPECT_EQ(models.models(0).max_model_len(), 64);
  EXPECT_EQ(models.models(0).owned_by(), "mxserve");

  grpc::ClientContext c2;
  pb::TokenizeRequest treq;
  treq.set_text("hi<|end|>");
  treq.set_add_special_tokens(true);
  pb::TokenizeResponse tres;
  ASSERT_TRUE(stub_->Tokenize(&c2, treq, &tres).ok());
  EXPECT_EQ(std::vector<int32_t>(tres.token_ids().begin(), tres.token_ids().end()),
            (std::vector<int32_t>{'h', 'i', FakeTokenizer::kEnd}));
  EXPECT_EQ(tres.count(), 3);
  EXPECT_EQ(tres.max_model_len(), 64);

  grpc::ClientContext c3;
  treq.set_model("other");
  EXPECT_EQ(stub_->Tokenize(&c3, treq, &tres).error_code(), grpc::StatusCode::NOT_FOUND);
}

// With reflection asked for (--grpc-reflection), it answers list_services, naming our service
// (raw protobuf bytes, since the reflection protos are not installed as headers).
class GrpcFrontendReflectionTest : public GrpcFrontendTest {
 protected:
  GrpcFrontendReflectionTest() { reflection_ = true; }
};

TEST_F(GrpcFrontendReflectionTest, ReflectionListsTheService) {
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  auto wait = [&](intptr_t want) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(wait(1));
  const std::string req("\x3a\x00", 2);  // field 7 (list_services) = ""
  grpc::Slice slice(req);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  ASSERT_TRUE(wait(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(wait(3));
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(4));
  ASSERT_TRUE(wait(4));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("mxserve.v1.Inference"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  ctx.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  wait(5);
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
}

TEST(GrpcFrontendLimits, MessageSizeLimitIsExplicit) {
  FakeTokenizer tok;
  FakeGenerationService engine;
  ServingContext ctx{"m", 100000, &tok, nullptr, &engine, {}};
  GrpcServerOptions opts;
  opts.host = "127.0.0.1";
  opts.port = 0;
  opts.max_receive_message_bytes = 4096;
  auto fe = GrpcFrontend::Start(ctx, opts);
  ASSERT_TRUE(fe.ok()) << fe.status();
  auto stub = pb::Inference::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string((*fe)->port()), grpc::InsecureChannelCredentials()));
  auto run = [&](size_t n) {
    grpc::ClientContext c;
    pb::GenerateRequest req;
    req.set_prompt(std::string(n, 'x'));
    req.mutable_sampling()->set_max_tokens(1);
    auto reader = stub->Generate(&c, req);
    pb::GenerateResponse m;
    while (reader->Read(&m)) {
    }
    return reader->Finish().error_code();
  };
  EXPECT_EQ(run(1000), grpc::StatusCode::OK);
  EXPECT_EQ(run(8000), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(run(1000), grpc::StatusCode::OK);
  EXPECT_EQ(engine.num_requests(), 2u);
}

TEST_F(GrpcFrontendTest, HealthFollowsReadiness) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  auto check = [&](const std::string& service) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse res;
    grpc::Status s = health->Check(&ctx, req, &res);
    return s.ok() ? static_cast<int>(res.status()) : -1;
  };
  constexpr int kServing = grpc::health::v1::HealthCheckResponse::SERVING;
  constexpr int kNotServing = grpc::health::v1::HealthCheckResponse::NOT_SERVING;
  EXPECT_EQ(check(""), kServing);
  EXPECT_EQ(check("mxserve.v1.Inference"), kServing);
  ready_ = false;
  fe_->RefreshHealth();
  EXPECT_EQ(check(""), kNotServing);
  EXPECT_EQ(check("mxserve.v1.Inference"), kNotServing);
  ready_ = true;  // picked up by the poller
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (check("") != kServing && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(check("mxserve.v1.Inference"), kServing);
}

}  // namespace
}  // namespace mxserve::frontends

// ExpertService over a real gRPC server on 127.0.0.1: results equal the reference kernel,
// BF16 on the wire stays within bf16 error, every bad field is INVALID_ARGUMENT naming it,
// health is NOT_SERVING until the weights are in.
#include "worker/expert_service.h"

#include <filesystem>
#include <functional>
#include <random>

#include "core/bf16.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"
#include "tests/experts/test_checkpoint.h"
#include "tests/worker/test_worker.h"
#include "wire/tensor_wire.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;

class ExpertServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::NewTempDir());
    ASSERT_TRUE(testing::WriteExpertCheckpoint(*dir_, spec_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  void SetUp() override {
    auto w = testing::StartWorker(*dir_, {0, 1, 2, 3});
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = std::move(*w);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    args.SetMaxSendMessageSize(256 << 20);
    channel_ = grpc::CreateCustomChannel(worker_->server->address(),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = v1::ExpertWorker::NewStub(channel_);
  }

  // A valid request: T tokens, slots on held experts 0-3 or -1.
  v1::RunExpertsRequest MakeRequest(int layer, int T, v1::TensorDType dtype, uint32_t seed) {
    v1::RunExpertsRequest req;
    req.set_layer(layer);
    req.set_num_tokens(T);
    req.set_hidden_size(spec_.hidden);
    req.set_top_k(spec_.top_k);
    req.set_dtype(dtype);
    x_ = testing::RandomFloats(T * spec_.hidden, seed);
    EncodeTensor(x_.data(), x_.size(), dtype, req.mutable_hidden());
    std::mt19937 rng(seed);
    for (int i = 0; i < T * spec_.top_k; ++i) {
      req.add_expert_ids(static_cast<int>(rng() % 5) - 1);  // -1..3
      req.add_weights(std::uniform_real_distribution<float>(0.f, 1.f)(rng));
    }
    return req;
  }

  std::vector<float> Reference(const v1::RunExpertsRequest& req, const std::vector<float>& x) {
    const int T = req.num_tokens();
    std::vector<float> out(T * spec_.hidden);
    kernels::MoeBatch b{T, req.top_k(), x.data(), req.expert_ids().data(), req.weights().data()};
    EXPECT_TRUE(kernels::MoeForwardReference(worker_->shard->layer(req.layer()), b, out.data()).ok());
    return out;
  }

  grpc::Status Call(const v1::RunExpertsRequest& req, v1::RunExpertsResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->RunExperts(&ctx, req, resp);
  }

  inline static std::string* dir_ = nullptr;
  inline static testing::ExpertCheckpointSpec spec_;
  std::unique_ptr<testing::RunningWorker> worker_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ExpertWorker::Stub> stub_;
  std::vector<float> x_;
};

TEST_F(ExpertServiceTest, F32MatchesReference) {
  for (int layer = 0; layer < spec_.layers; ++layer) {
    for (int T : {1, 7, 33}) {
      v1::RunExpertsRequest req = MakeRequest(layer, T, v1::TENSOR_DTYPE_F32, 100 + T + layer);
      v1::RunExpertsResponse resp;
      grpc::Status s = Call(req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
      EXPECT_EQ(resp.num_tokens(), T);
      EXPECT_EQ(resp.dtype(), v1::TENSOR_DTYPE_F32);
      ASSERT_EQ(resp.output().size(), static_cast<size_t>(T * spec_.hidden * 4));
      std::vector<float> ref = Reference(req, x_);
      std::vector<float> got(ref.size());
      std::memcpy(got.data(), resp.output().data(), resp.output().size());
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_NEAR(got[i], ref[i], 1e-5f + 1e-5f * std::abs(ref[i])) << "layer " << layer << " i " << i;
      }
    }
  }
}

TEST_F(ExpertServiceTest, Bf16WireWithinBf16Tolerance) {
  v1::RunExpertsRequest req = MakeRequest(1, 16, v1::TENSOR_DTYPE_BF16, 7);
  v1::RunExpertsResponse resp;
  ASSERT_TRUE(Call(req, &resp).ok());
  EXPECT_EQ(resp.dtype(), v1::TENSOR_DTYPE_BF16);
  ASSERT_EQ(resp.output().size(), static_cast<size_t>(16 * spec_.hidden * 2));
  // The worker sees bf16-rounded inputs; its f32 result is then rounded to bf16 once.
  std::vector<float> xr(x_.size());
  for (size_t i = 0; i < x_.size(); ++i) xr[i] = Bf16ToFloat(FloatToBf16(x_[i]));
  std::vector<float> ref = Reference(req, xr);
  std::vector<float> scratch;
  const float* got = DecodeTensor(resp.output(), ref.size(), v1::TENSOR_DTYPE_BF16, &scratch);
  double max_abs = 0;
  for (float r : ref) max_abs = std::max<double>(max_abs, std::abs(r));
  ASSERT_GT(max_abs, 0.0);
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_NEAR(got[i], ref[i], std::abs(ref[i]) * (1.0 / 128) + 1e-3 * max_abs) << i;
  }
}

TEST_F(ExpertServiceTest, ZeroTokens) {
  v1::RunExpertsRequest req = MakeRequest(0, 0, v1::TENSOR_DTYPE_F32, 1);
  v1::RunExpertsResponse resp;
  grpc::Status s = Call(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.num_tokens(), 0);
  EXPECT_TRUE(resp.output().empty());
}

TEST_F(ExpertServiceTest, EachInvalidFieldIsNamed) {
  struct Case {
    const char* field;
    std::function<void(v1::RunExpertsRequest&)> mutate;
  };
  const std::vector<Case> cases = {
      {"layer", [](auto& r) { r.set_layer(-1); }},
      {"layer", [](auto& r) { r.set_layer(spec_.layers); }},
      {"hidden_size", [](auto& r) { r.set_hidden_size(spec_.hidden + 32); }},
      {"num_tokens", [](auto& r) { r.set_num_tokens(-1); }},
      {"top_k", [](auto& r) { r.set_top_k(0); }},
      {"dtype", [](auto& r) { r.set_dtype(v1::TENSOR_DTYPE_UNSPECIFIED); }},
      {"dtype", [](auto& r) { r.set_dtype(static_cast<v1::TensorDType>(9)); }},
      {"hidden", [](auto& r) { r.mutable_hidden()->pop_back(); }},
      {"hidden", [](auto& r) { r.set_dtype(v1::TENSOR_DTYPE_BF16); }},  // bytes now 2x too many
      {"hidden", [](auto& r) { r.set_num_tokens(r.num_tokens() + 1); }},
      {"expert_ids", [](auto& r) { r.mutable_expert_ids()->RemoveLast(); }},
      {"weights", [](auto& r) { r.add_weights(1.0f); }},
      {"expert_ids[3]", [](auto& r) { r.set_expert_ids(3, 5); }},   // in the model, not held
      {"expert_ids[0]", [](auto& r) { r.set_expert_ids(0, 8); }},   // out of the model
      {"expert_ids[2]", [](auto& r) { r.set_expert_ids(2, -2); }},
  };
  for (const Case& c : cases) {
    v1::RunExpertsRequest req = MakeRequest(1, 4, v1::TENSOR_DTYPE_F32, 3);
    c.mutate(req);
    v1::RunExpertsResponse resp;
    grpc::Status s = Call(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.field)) << s.error_message();
  }
  // ... and the server keeps serving.
  v1::RunExpertsResponse resp;
  EXPECT_TRUE(Call(MakeRequest(1, 4, v1::TENSOR_DTYPE_F32, 3), &resp).ok());
}

TEST_F(ExpertServiceTest, MessagesAbove4MiBPass) {
  // gRPC's default receive limit is 4 MiB; both sides must have raised it.
  const int T = (4 << 20) / (spec_.hidden * 4) + 1;
  v1::RunExpertsRequest req = MakeRequest(2, T, v1::TENSOR_DTYPE_F32, 11);
  for (int i = 0; i < req.expert_ids_size(); ++i) req.set_expert_ids(i, i < 8 ? i % 4 : -1);
  ASSERT_GT(req.ByteSizeLong(), 4u << 20);
  v1::RunExpertsResponse resp;
  grpc::Status s = Call(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.output().size(), static_cast<size_t>(T) * spec_.hidden * 4);
  std::vector<float> ref = Reference(req, x_);
  std::vector<float> got(ref.size());
  std::memcpy(got.data(), resp.output().data(), resp.output().size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(got[i], ref[i], 1e-5f + 1e-5f * std::abs(ref[i]));
}

TEST_F(ExpertServiceTest, DescribeReportsTheShard) {
  grpc::ClientContext ctx;
  v1::DescribeResponse d;
  ASSERT_TRUE(stub_->Describe(&ctx, v1::DescribeRequest(), &d).ok());
  EXPECT_EQ(d.model_type(), "gpt_oss");
  EXPECT_EQ(d.num_layers(), spec_.layers);
  EXPECT_EQ(d.num_experts(), spec_.experts);
  EXPECT_EQ(d.hidden_size(), spec_.hidden);
  EXPECT_EQ(d.intermediate_size(), spec_.intermediate);
  EXPECT_EQ(d.activation(), "swiglu_clamped");
  EXPECT_THAT(d.experts(), ::testing::ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(d.device(), "cpu");
  EXPECT_TRUE(d.ready());
}

TEST_F(ExpertServiceTest, NotServingUntilLoadedThenServing) {
  auto w = testing::StartWorker(*dir_, {4, 5}, /*ready=*/false);
  ASSERT_TRUE(w.ok()) << w.status();
  auto channel = grpc::CreateChannel((*w)->server->address(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto stub = v1::ExpertWorker::NewStub(channel);
  auto check = [&](const std::string& service) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::Status s = health->Check(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.status();
  };
  using HS = grpc::health::v1::HealthCheckResponse;
  EXPECT_EQ(check(""), HS::NOT_SERVING);
  EXPECT_EQ(check("mxserve.v1.ExpertWorker"), HS::NOT_SERVING);
  {
    grpc::ClientContext ctx;
    v1::RunExpertsResponse resp;
    grpc::Status s = stub->RunExperts(&ctx, MakeRequest(0, 2, v1::TENSOR_DTYPE_F32, 1), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    grpc::ClientContext ctx2;
    v1::DescribeResponse d;
    ASSERT_TRUE(stub->Describe(&ctx2, v1::DescribeRequest(), &d).ok());
    EXPECT_FALSE(d.ready());
  }
  ASSERT_TRUE((*w)->MakeReady().ok());
  EXPECT_EQ(check(""), HS::SERVING);
  EXPECT_EQ(check("mxserve.v1.ExpertWorker"), HS::SERVING);
}

}  // namespace
}  // namespace mxserve

// WorkerClient's RunExpertsStream path against its unary twin: same answers; a call's error comes
// back in band and leaves the stream usable; a call past its deadline is cancelled and the next
// one opens a new stream; a worker restarted on the same address is reached again without a
// failed call; a worker without the stream is served unary; concurrent calls on one client.
#include <atomic>
#include <filesystem>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "absl/time/clock.h"
#include "coordinator/router/worker_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/experts/test_checkpoint.h"
#include "tests/worker/test_worker.h"
#include "worker/expert_service.h"
#include "worker/worker_server.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;

using Call = testing::CallData;
using testing::MakeCall;

std::unique_ptr<WorkerClient> Client(const std::string& address, bool stream) {
  auto c = WorkerClient::Create(address, {.stream = stream});
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->WaitReady(absl::Now() + absl::Seconds(10)).ok());
  return *std::move(c);
}

class WorkerClientStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::NewTempDir();
    ASSERT_TRUE(testing::WriteExpertCheckpoint(dir_, spec_).ok());
    auto w = testing::StartWorker(dir_, experts_);
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = *std::move(w);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  testing::ExpertCheckpointSpec spec_;
  std::vector<int> experts_ = {0, 1, 2, 3};
  std::string dir_;
  std::unique_ptr<testing::RunningWorker> worker_;
};

TEST_F(WorkerClientStreamTest, StreamAndUnaryAgreeAndErrorsStayInBand) {
  auto stream = Client(worker_->server->address(), true);
  auto unary = Client(worker_->server->address(), false);
  const int H = spec_.hidden;
  for (int layer = 0; layer < spec_.layers; ++layer) {
    for (int T : {1, 7, 33}) {
      Call a = MakeCall(T, 2, H, experts_, 10 * layer + T), b = a;
      ASSERT_TRUE(stream->RunExperts(a.call(layer), a.out.data(), absl::Now() + absl::Seconds(10)).ok());
      ASSERT_TRUE(unary->RunExperts(b.call(layer), b.out.data(), absl::Now() + absl::Seconds(10)).ok());
      EXPECT_EQ(a.out, b.out) << "layer " << layer << " T " << T;
    }
  }
  // An expert this worker does not hold: INVALID_ARGUMENT naming it, from the worker's checks.
  Call bad = MakeCall(1, 1, H, {5}, 1);
  absl::Status s = stream->RunExperts(bad.call(0), bad.out.data(), absl::Now() + absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("expert 5 is not held"));
  // The stream is still good.
  Call again = MakeCall(3, 2, H, experts_, 2), ref = again;
  ASSERT_TRUE(stream->RunExperts(again.call(1), again.out.data(), absl::Now() + absl::Seconds(10)).ok());
  ASSERT_TRUE(unary->RunExperts(ref.call(1), ref.out.data(), absl::Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(again.out, ref.out);
}

TEST_F(WorkerClientStreamTest, ConcurrentCallsOnOneClient) {
  auto client = Client(worker_->server->address(), true);
  auto unary = Client(worker_->server->address(), false);
  const int H = spec_.hidden;
  std::atomic<int> bad{0};
  auto run = [&](int seed) {
    for (int i = 0; i < 20; ++i) {
      Call c = MakeCall(1 + (seed + i) % 9, 2, H, experts_, seed * 100 + i), r = c;
      if (!client->RunExperts(c.call(i % spec_.layers), c.out.data(), absl::Now() + absl::Seconds(10)).ok() ||
          !unary->RunExperts(r.call(i % spec_.layers), r.out.data(), absl::Now() + absl::Seconds(10)).ok() ||
          c.out != r.out) {
        ++bad;
      }
    }
  };
  std::thread t1(run, 1), t2(run, 2);
  t1.join();
  t2.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_F(WorkerClientStreamTest, WorkerRestartedOnTheSameAddressIsReachedAgain) {
  auto client = Client(worker_->server->address(), true);
  const int port = worker_->server->port();
  Call c = MakeCall(2, 2, spec_.hidden, experts_, 3);
  ASSERT_TRUE(client->RunExperts(c.call(0), c.out.data(), absl::Now() + absl::Seconds(10)).ok());
  const std::vector<float> first = c.out;
  // The worker goes away (its end of the idle stream with it) and comes back on the same port.
  worker_->server->Shutdown(absl::ZeroDuration());
  worker_->server.reset();
  WorkerServerOptions o;
  o.port = port;
  auto again = WorkerServer::Start(o, worker_->service);
  ASSERT_TRUE(again.ok()) << again.status();
  (*again)->SetServing(true);
  worker_->server = *std::move(again);
  ASSERT_TRUE(client->WaitReady(absl::Now() + absl::Seconds(10)).ok());
  // The broken stream had not seen this call: it goes out again on a new one, no error.
  std::fill(c.out.begin(), c.out.end(), 0.f);
  absl::Status s = client->RunExperts(c.call(0), c.out.data(), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.out, first);
  EXPECT_EQ(client->stream_opens(), 2u);
  EXPECT_EQ(client->unary_calls(), 0u);
}

// First call slow (past its deadline), the rest immediate.
class FirstCallSlowExecutor final : public ExpertExecutor {
 public:
  absl::Status Run(const ExpertBatch& batch, float* out) override {
    if (calls_++ == 0) absl::SleepFor(absl::Milliseconds(800));
    std::fill(out, out + size_t(batch.num_tokens) * 32, 1.f);
    return absl::OkStatus();
  }

 private:
  std::atomic<int> calls_{0};
};

TEST(WorkerClientStreamDeadlineTest, LateCallIsCancelledAndTheNextGetsANewStream) {
  WorkerModelInfo info{"gpt_oss", 1, 4, 32, 32, {0, 1, 2, 3}, "cpu"};
  auto service = std::make_shared<ExpertService>(info);
  service->SetReady(std::make_shared<FirstCallSlowExecutor>());
  auto server = WorkerServer::Start(WorkerServerOptions{}, service);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);
  auto client = Client((*server)->address(), true);
  std::vector<float> x(32, 1.f), w = {1.f}, out(32, 0.f);
  std::vector<int32_t> ids = {2};
  ExpertBatch call{{1, 1, x.data(), ids.data(), w.data()}, 0, 32};
  const absl::Time t0 = absl::Now();
  absl::Status s = client->RunExperts(call, out.data(), t0 + absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(700));  // cancelled at the deadline, not answered late
  s = client->RunExperts(call, out.data(), absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out, std::vector<float>(32, 1.f));
  (*server)->Shutdown(absl::Seconds(2));
}

// A worker that predates RunExpertsStream: its RunExperts only.
class UnaryOnlyService final : public v1::ExpertWorker::Service {
 public:
  explicit UnaryOnlyService(std::shared_ptr<ExpertService> inner) : inner_(std::move(inner)) {}
  grpc::Status RunExperts(grpc::ServerContext* ctx, const v1::RunExpertsRequest* req,
                          v1::RunExpertsResponse* resp) override {
    return inner_->RunExperts(ctx, req, resp);
  }

 private:
  std::shared_ptr<ExpertService> inner_;
};

TEST_F(WorkerClientStreamTest, WorkerWithoutTheStreamIsServedUnary) {
  UnaryOnlyService old(worker_->service);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&old);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto client = WorkerClient::Create("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(client.ok());
  auto ref = Client(worker_->server->address(), false);
  for (int i = 0; i < 3; ++i) {
    Call c = MakeCall(4, 2, spec_.hidden, experts_, 7 + i), r = c;
    absl::Status s = (*client)->RunExperts(c.call(0), c.out.data(), absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_TRUE(ref->RunExperts(r.call(0), r.out.data(), absl::Now() + absl::Seconds(10)).ok());
    EXPECT_EQ(c.out, r.out);
  }
  EXPECT_EQ((*client)->stream_opens(), 1u);  // the one that answered UNIMPLEMENTED
  EXPECT_EQ((*client)->unary_calls(), 3u);
  server->Shutdown();
}

}  // namespace
}  // namespace mxserve

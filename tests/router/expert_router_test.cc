// ExpertRouter: over 2 gRPC workers, over 1 in-process backend, and the reference kernel on
// the whole layer agree; calls go out in parallel; a failing backend's status comes back.
#include "coordinator/router/expert_router.h"

#include <filesystem>
#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "coordinator/router/in_process_backend.h"
#include "coordinator/router/placement.h"
#include "coordinator/router/router_factory.h"
#include "core/model_config.h"
#include "coordinator/router/worker_client.h"
#include "core/bf16.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"
#include "tests/experts/test_checkpoint.h"
#include "tests/worker/test_worker.h"
#include "worker/expert_service.h"
#include "worker/worker_server.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;

TEST(PlacementTest, ContiguousSplitsEvenly) {
  auto p = Placement::Contiguous(10, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->ExpertsOf(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(p->ExpertsOf(1), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(p->ExpertsOf(2), (std::vector<int>{7, 8, 9}));
  EXPECT_EQ(p->Primary(5), 1);
  EXPECT_EQ(p->DebugString(), "backend 0: 0-3; backend 1: 4-6; backend 2: 7-9");
  EXPECT_FALSE(Placement::Contiguous(2, 3).ok());
  EXPECT_FALSE(Placement::Contiguous(2, 0).ok());
  EXPECT_FALSE(Placement::FromLists(2, {{0}, {}}).ok());
  EXPECT_FALSE(Placement::FromLists(2, {{0}, {2}}).ok());
  EXPECT_TRUE(Placement::FromLists(2, {{0, 1}, {1, 0}}).ok());  // replicas
}

struct Batch {
  int T = 0, k = 0;
  std::vector<float> x, w;
  std::vector<int32_t> ids;
};

// Distinct experts per token, as a router's top-k gives.
Batch RandomBatch(int T, int k, int H, int E, uint32_t seed) {
  Batch b{T, k, testing::RandomFloats(T * H, seed), {}, {}};
  std::mt19937 rng(seed);
  for (int t = 0; t < T; ++t) {
    std::vector<int> perm(E);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int j = 0; j < k; ++j) {
      b.ids.push_back(perm[j]);
      b.w.push_back(std::uniform_real_distribution<float>(0.f, 1.f)(rng));
    }
  }
  return b;
}

TEST(ExpertRouterTest, TwoGrpcWorkersInProcessAndReferenceAgree) {
  testing::ExpertCheckpointSpec spec;
  spec.top_k = 3;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  auto w0 = testing::StartWorker(dir, {0, 1, 2, 3});
  auto w1 = testing::StartWorker(dir, {4, 5, 6, 7});
  auto all = testing::StartWorker(dir, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(w0.ok() && w1.ok() && all.ok());

  for (v1::TensorDType wire : {v1::TENSOR_DTYPE_F32, v1::TENSOR_DTYPE_BF16}) {
    std::vector<std::unique_ptr<ExpertBackend>> remote;
    for (auto* w : {w0->get(), w1->get()}) {
      auto c = WorkerClient::Create(w->server->address(), {.wire_dtype = wire});
      ASSERT_TRUE(c.ok());
      ASSERT_TRUE((*c)->WaitReady(absl::Now() + absl::Seconds(10)).ok());
      remote.push_back(std::move(*c));
    }
    auto grpc_router = ExpertRouter::Create(std::move(remote), *Placement::Contiguous(8, 2));
    ASSERT_TRUE(grpc_router.ok()) << grpc_router.status();
    std::vector<std::unique_ptr<ExpertBackend>> local;
    local.push_back(std::make_unique<InProcessExpertBackend>((*all)->shard, nullptr));
    auto local_router = ExpertRouter::Create(std::move(local), *Placement::Contiguous(8, 1));
    ASSERT_TRUE(local_router.ok());

    const int H = spec.hidden;
    for (int layer = 0; layer < spec.layers; ++layer) {
      for (int T : {1, 5, 40}) {
        Batch b = RandomBatch(T, spec.top_k, H, spec.experts, 1000 * layer + T);
        std::vector<float> ref(T * H), via_grpc(T * H, 99.f), via_local(T * H, 99.f), again(T * H);
        const bool bf16 = wire == v1::TENSOR_DTYPE_BF16;
        // On a BF16 wire the workers see bf16-rounded activations: so does this reference.
        std::vector<float> xr = b.x;
        if (bf16) for (float& v : xr) v = Bf16ToFloat(FloatToBf16(v));
        std::vector<float> ref_local(T * H);
        const ExpertBatch batch{{T, b.k, b.x.data(), b.ids.data(), b.w.data()}, layer, H};
        ASSERT_TRUE(kernels::MoeForwardReference((*all)->shard->layer(layer), batch, ref_local.data()).ok());
        ExpertBatch rounded = batch;
        rounded.x = xr.data();
        ASSERT_TRUE(kernels::MoeForwardReference((*all)->shard->layer(layer), rounded, ref.data()).ok());
        ASSERT_TRUE((*grpc_router)->Run(batch, via_grpc.data()).ok());
        ASSERT_TRUE((*local_router)->Run(batch, via_local.data()).ok());
        ASSERT_TRUE((*grpc_router)->Run(batch, again.data()).ok());
        double max_abs = 0;
        for (float r : ref) max_abs = std::max<double>(max_abs, std::abs(r));
        for (int i = 0; i < T * H; ++i) {
          ASSERT_NEAR(via_local[i], ref_local[i], 1e-5 + 1e-5 * std::abs(ref_local[i])) << i;
          // BF16: each worker's partial is rounded once to 8 significant bits.
          const double tol = bf16 ? std::abs(ref[i]) / 128 + 4e-3 * max_abs : 1e-5 + 1e-5 * std::abs(ref[i]);
          ASSERT_NEAR(via_grpc[i], ref[i], tol) << "layer " << layer << " T " << T << " i " << i;
          ASSERT_EQ(again[i], via_grpc[i]) << "not deterministic at " << i;
        }
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// A backend that takes a fixed time (or fails), to see the router's fan-out and errors.
class FakeBackend final : public ExpertBackend {
 public:
  FakeBackend(absl::Duration delay, absl::Status status, float value)
      : delay_(delay), status_(std::move(status)), value_(value) {}
  absl::Status RunExperts(const ExpertBatch& call, float* out, absl::Time deadline) override {
    absl::SleepFor(delay_);
    ++calls;
    tokens += call.num_tokens;
    for (int i = 0; i < call.num_tokens * call.hidden; ++i) out[i] = value_;
    return status_;
  }
  std::string name() const override { return "fake"; }
  int calls = 0, tokens = 0;

 private:
  absl::Duration delay_;
  absl::Status status_;
  float value_;
};

TEST(ExpertRouterTest, CallsGoOutInParallelAndOnlyToBackendsWithTokens) {
  std::vector<std::unique_ptr<ExpertBackend>> backends;
  std::vector<FakeBackend*> fakes;
  for (int b = 0; b < 4; ++b) {
    auto f = std::make_unique<FakeBackend>(absl::Milliseconds(200), absl::OkStatus(), float(1 << b));
    fakes.push_back(f.get());
    backends.push_back(std::move(f));
  }
  auto router = ExpertRouter::Create(std::move(backends), *Placement::Contiguous(8, 4));
  ASSERT_TRUE(router.ok());
  const int H = 4;
  // Token 0 -> experts 0, 2 (backends 0, 1); token 1 -> experts 4, 5 (backend 2 twice).
  std::vector<float> x(2 * H, 1.f), w = {1, 1, 1, 1}, out(2 * H);
  std::vector<int32_t> ids = {0, 2, 4, 5};
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE((*router)->Run(ExpertBatch{{2, 2, x.data(), ids.data(), w.data()}, 0, H}, out.data()).ok());
  const absl::Duration took = absl::Now() - t0;
  EXPECT_LT(took, absl::Milliseconds(450)) << "3 calls of 200 ms each took " << took;
  EXPECT_EQ(fakes[0]->tokens, 1);
  EXPECT_EQ(fakes[1]->tokens, 1);
  EXPECT_EQ(fakes[2]->tokens, 1);
  EXPECT_EQ(fakes[3]->calls, 0);
  for (int h = 0; h < H; ++h) {
    EXPECT_EQ(out[h], 1.f + 2.f);  // partials of backends 0 and 1
    EXPECT_EQ(out[H + h], 4.f);    // backend 2's one partial for token 1
  }
}

// A backend whose partial sum depends on each row's activations and slots: out = (b + 1) * x
// + the sum of the row's valid slot ids (so a row sent to or summed from the wrong place shows).
class RowBackend final : public ExpertBackend {
 public:
  explicit RowBackend(int b) : b_(b) {}
  absl::Status RunExperts(const ExpertBatch& call, float* out, absl::Time) override {
    for (int i = 0; i < call.num_tokens; ++i) {
      float idsum = 0.f;
      for (int j = 0; j < call.top_k; ++j) idsum += std::max(0, call.expert_ids[i * call.top_k + j]);
      for (int h = 0; h < call.hidden; ++h) {
        out[size_t(i) * call.hidden + h] = float(b_ + 1) * call.x[size_t(i) * call.hidden + h] + idsum;
      }
    }
    return absl::OkStatus();
  }
  std::string name() const override { return "row"; }

 private:
  const int b_;
};

// Large batches gather per group and sum token ranges on the fan-out threads: the result is
// bit-for-bit the in-order sum over groups (0 + group 0's partial + group 1's + ...).
TEST(ExpertRouterTest, LargeBatchesSumExactlyAsInGroupOrder) {
  constexpr int kGroups = 3, kExperts = 12, T = 200, H = 1024, k = 2;  // T * H above the threshold
  std::vector<std::unique_ptr<ExpertBackend>> backends;
  for (int b = 0; b < kGroups; ++b) backends.push_back(std::make_unique<RowBackend>(b));
  auto router = ExpertRouter::Create(std::move(backends), *Placement::Contiguous(kExperts, kGroups));
  ASSERT_TRUE(router.ok());
  std::mt19937 rng(5);
  std::vector<float> x(size_t(T) * H), w(T * k, 0.5f), out(x.size());
  for (float& v : x) v = float(int(rng() % 2048) - 1024) / 1024.f;  // every sum below is exact
  std::vector<int32_t> ids(T * k);
  for (int t = 0; t < T; ++t) {
    ids[t * k] = rng() % kExperts;
    do ids[t * k + 1] = rng() % kExperts; while (ids[t * k + 1] == ids[t * k]);
  }
  ASSERT_TRUE((*router)->Run(ExpertBatch{{T, k, x.data(), ids.data(), w.data()}, 0, H}, out.data()).ok());
  const int per = kExperts / kGroups;
  for (int t = 0; t < T; ++t) {
    for (int h = 0; h < H; ++h) {
      float want = 0.f;
      for (int g = 0; g < kGroups; ++g) {
        float idsum = 0.f;
        bool in = false;
        for (int j = 0; j < k; ++j) {
          if (ids[t * k + j] / per == g) {
            in = true;
            idsum += ids[t * k + j];
          }
        }
        if (in) want += float(g + 1) * x[size_t(t) * H + h] + idsum;
      }
      ASSERT_EQ(out[size_t(t) * H + h], want) << "token " << t << " h " << h;
    }
  }
}

TEST(ExpertRouterTest, BackendFailureIsReturned) {
  std::vector<std::unique_ptr<ExpertBackend>> backends;
  backends.push_back(std::make_unique<FakeBackend>(absl::ZeroDuration(), absl::OkStatus(), 1.f));
  backends.push_back(std::make_unique<FakeBackend>(absl::ZeroDuration(),
                                                   absl::UnavailableError("worker@x:1: gone"), 1.f));
  // No replica and no wait: the failure comes back at once (as UNAVAILABLE, naming it).
  auto router = ExpertRouter::Create(std::move(backends), *Placement::Contiguous(4, 2),
                                     {.down_wait = absl::ZeroDuration()});
  ASSERT_TRUE(router.ok());
  std::vector<float> x(4, 1.f), w = {1, 1}, out(4);
  std::vector<int32_t> ids = {0, 3};
  absl::Status s = (*router)->Run(ExpertBatch{{1, 2, x.data(), ids.data(), w.data()}, 2, 4}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("worker@x:1: gone"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("layer 2"));
  ids = {0, 4};
  EXPECT_EQ((*router)->Run(ExpertBatch{{1, 2, x.data(), ids.data(), w.data()}, 0, 4}, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*router)->Run(ExpertBatch{{0, 2, x.data(), ids.data(), w.data()}, 0, 4}, out.data()).ok());
}

TEST(WorkerClientTest, DeadlineAndUnreachableWorker) {
  // Nothing listens on port 1 (privileged, unused).
  auto c = WorkerClient::Create("127.0.0.1:1");
  ASSERT_TRUE(c.ok());
  absl::Status s = (*c)->WaitReady(absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  std::vector<float> x(4), w = {1}, out(4);
  std::vector<int32_t> ids = {0};
  ExpertBatch call{{1, 1, x.data(), ids.data(), w.data()}, 0, 4};
  s = (*c)->RunExperts(call, out.data(), absl::Now() + absl::Milliseconds(300));
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable ||
              s.code() == absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("127.0.0.1:1"));
  EXPECT_FALSE(WorkerClient::Create("nonsense").ok());
}

}  // namespace
}  // namespace mxserve

namespace mxserve {
namespace {

TEST(RouterFactoryTest, ConnectToWorkersAndInProcessAgree) {
  testing::ExpertCheckpointSpec spec;
  const std::string dir = testing::NewTempDir();
  ASSERT_TRUE(testing::WriteExpertCheckpoint(dir, spec).ok());
  // Experts 2 and 3 on both workers (replicas; the first listed is the primary).
  auto w0 = testing::StartWorker(dir, {0, 1, 2, 3});
  auto w1 = testing::StartWorker(dir, {2, 3, 4, 5, 6, 7});
  auto partial = testing::StartWorker(dir, {0, 1, 2});
  ASSERT_TRUE(w0.ok() && w1.ok() && partial.ok());
  auto config = ModelConfig::Load(dir);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(config.ok() && ckpt.ok());

  RemoteWorkersOptions opt;
  opt.ready_timeout = absl::Seconds(10);
  auto remote = ConnectToWorkers({(*w0)->server->address(), (*w1)->server->address()}, *config, opt);
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ((*remote)->placement().BackendsOf(2), (std::vector<int>{0, 1}));
  EXPECT_EQ((*remote)->placement().Primary(5), 1);
  auto local = MakeInProcessRouter(**ckpt, *config, nullptr);
  ASSERT_TRUE(local.ok()) << local.status();

  const int T = 12, H = spec.hidden, k = spec.top_k;
  Batch b = RandomBatch(T, k, H, spec.experts, 77);
  std::vector<float> a(T * H), c(T * H);
  ASSERT_TRUE((*remote)->Run(ExpertBatch{{T, k, b.x.data(), b.ids.data(), b.w.data()}, 1, H}, a.data()).ok());
  ASSERT_TRUE((*local)->Run(ExpertBatch{{T, k, b.x.data(), b.ids.data(), b.w.data()}, 1, H}, c.data()).ok());
  for (int i = 0; i < T * H; ++i) ASSERT_NEAR(a[i], c[i], 1e-5 + 1e-5 * std::abs(c[i])) << i;

  auto missing = ConnectToWorkers({(*partial)->server->address()}, *config, opt);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("expert 3 is held by none"));

  ModelConfig other = *config;
  other.hidden_size *= 2;
  auto wrong = ConnectToWorkers({(*w0)->server->address(), (*w1)->server->address()}, other, opt);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("hidden_size"));
  std::filesystem::remove_all(dir);
}

TEST(RouterFactoryTest, ParseWorkerAddresses) {
  auto a = ParseWorkerAddresses("127.0.0.1:5001, w1.local:5002,[::1]:5003");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (std::vector<std::string>{"127.0.0.1:5001", "w1.local:5002", "[::1]:5003"}));
  EXPECT_FALSE(ParseWorkerAddresses("").ok());
  EXPECT_FALSE(ParseWorkerAddresses("a:1,,b:2").ok());
  EXPECT_FALSE(ParseWorkerAddresses("host").ok());
  EXPECT_FALSE(ParseWorkerAddresses("host:0").ok());
  EXPECT_FALSE(ParseWorkerAddresses("host:http").ok());
}

}  // namespace
}  // namespace mxserve

namespace mxserve {
namespace {

// A worker that takes too long: the router's per-call deadline ends the wait.
class SlowExecutor final : public ExpertExecutor {
 public:
  absl::Status Run(const ExpertBatch& batch, float* out) override {
    absl::SleepFor(absl::Seconds(2));
    return absl::OkStatus();
  }
};

TEST(ExpertRouterTest, SlowWorkerHitsTheCallDeadline) {
  WorkerModelInfo info{"gpt_oss", 1, 4, 32, 32, {0, 1, 2, 3}, "cpu"};
  auto service = std::make_shared<ExpertService>(info);
  service->SetReady(std::make_shared<SlowExecutor>());
  auto server = WorkerServer::Start(WorkerServerOptions{}, service);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);
  auto client = WorkerClient::Create((*server)->address());
  ASSERT_TRUE(client.ok());
  std::vector<std::unique_ptr<ExpertBackend>> backends;
  backends.push_back(std::move(*client));
  auto router = ExpertRouter::Create(std::move(backends), *Placement::Contiguous(4, 1),
                                     {.call_timeout = absl::Milliseconds(300),
                                      .down_wait = absl::ZeroDuration()});
  ASSERT_TRUE(router.ok());
  std::vector<float> x(32, 1.f), w = {1.f}, out(32);
  std::vector<int32_t> ids = {2};
  const absl::Time t0 = absl::Now();
  absl::Status s = (*router)->Run(ExpertBatch{{1, 1, x.data(), ids.data(), w.data()}, 0, 32}, out.data());
  // The late call marks the worker down; with no replica and no wait that is UNAVAILABLE.
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("Deadline"));
  EXPECT_LT(absl::Now() - t0, absl::Milliseconds(1500));
  EXPECT_FALSE((*router)->IsUp(0));
  (*server)->Shutdown(absl::Seconds(3));  // lets the slow call finish
}

}  // namespace
}  // namespace mxserve

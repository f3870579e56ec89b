// The same-host data plane (wire/shared_memory.h): a WorkerClient with shared_memory against a
// worker that allows it answers exactly as the bytes path does (F32 and BF16, growing and
// shrinking batches); a worker that does not allow it is served bytes; bad shared-memory fields
// are INVALID_ARGUMENT naming the field; the client's object goes with it; objects left by dead
// processes are removed.
#include <sys/mman.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "absl/time/clock.h"
#include "coordinator/router/worker_client.h"
#include "core/thread_pool.h"
#include "experts/expert_executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/experts/test_checkpoint.h"
#include "tests/worker/test_worker.h"
#include "wire/shared_memory.h"
#include "wire/tensor_wire.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;

bool ShmExists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

using Call = testing::CallData;
using testing::MakeCall;

std::unique_ptr<WorkerClient> Client(const std::string& address, bool shm, v1::TensorDType dtype,
                                     std::shared_ptr<ThreadPool> copy_pool = nullptr) {
  auto c = WorkerClient::Create(address, {.wire_dtype = dtype, .shared_memory = shm, .copy_pool = copy_pool});
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->WaitReady(absl::Now() + absl::Seconds(10)).ok());
  return *std::move(c);
}

class SharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::NewTempDir();
    ASSERT_TRUE(testing::WriteExpertCheckpoint(dir_, spec_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::unique_ptr<testing::RunningWorker> Worker(bool allow) {
    auto w = testing::StartWorker(dir_, experts_, /*ready=*/true, allow);
    EXPECT_TRUE(w.ok()) << w.status();
    return *std::move(w);
  }

  testing::ExpertCheckpointSpec spec_;
  std::vector<int> experts_ = {0, 1, 2, 3};
  std::string dir_;
};

TEST_F(SharedMemoryTest, AnswersExactlyAsBytesDo) {
  auto worker = Worker(/*allow=*/true);
  for (v1::TensorDType dtype : {v1::TENSOR_DTYPE_F32, v1::TENSOR_DTYPE_BF16}) {
    auto shm = Client(worker->server->address(), true, dtype);
    auto bytes = Client(worker->server->address(), false, dtype);
    int i = 0;
    for (int T : {1, 7, 300, 3, 700, 2}) {  // grows the object twice, and shrinks
      const int layer = i++ % spec_.layers;
      Call a = MakeCall(T, 2, spec_.hidden, experts_, 100 * T + dtype), b = a;
      ASSERT_TRUE(shm->RunExperts(a.call(layer), a.out.data(), absl::Now() + absl::Seconds(10)).ok());
      ASSERT_TRUE(bytes->RunExperts(b.call(layer), b.out.data(), absl::Now() + absl::Seconds(10)).ok());
      EXPECT_EQ(a.out, b.out) << "T " << T << " dtype " << dtype;
    }
    EXPECT_TRUE(shm->using_shared_memory());
    // The same bytes counted as moved, though none were in the messages' tensors.
    EXPECT_EQ(shm->bytes_received(), bytes->bytes_received());
    EXPECT_EQ(shm->bytes_sent(), bytes->bytes_sent());
  }
}

// With a copy pool (tensors of kParallelWireBytes and up, as floats, copied by several threads:
// T = 17000 here is 4.35 MB), both transports answer as the one-thread clients do.
TEST_F(SharedMemoryTest, ACopyPoolChangesNoByte) {
  auto worker = Worker(/*allow=*/true);
  auto pool = std::make_shared<ThreadPool>(4);
  for (v1::TensorDType dtype : {v1::TENSOR_DTYPE_F32, v1::TENSOR_DTYPE_BF16}) {
    auto plain = Client(worker->server->address(), true, dtype);
    auto shm = Client(worker->server->address(), true, dtype, pool);
    auto bytes = Client(worker->server->address(), false, dtype, pool);
    ASSERT_GE(size_t(17000) * spec_.hidden * 4, kParallelWireBytes);
    for (int T : {17000, 9, 40000}) {
      Call a = MakeCall(T, 2, spec_.hidden, experts_, 7 * T + dtype), b = a, c = a;
      ASSERT_TRUE(plain->RunExperts(a.call(1), a.out.data(), absl::Now() + absl::Seconds(30)).ok());
      ASSERT_TRUE(shm->RunExperts(b.call(1), b.out.data(), absl::Now() + absl::Seconds(30)).ok());
      ASSERT_TRUE(bytes->RunExperts(c.call(1), c.out.data(), absl::Now() + absl::Seconds(30)).ok());
      EXPECT_EQ(a.out, b.out) << "T " << T << " dtype " << dtype;
      EXPECT_EQ(a.out, c.out) << "T " << T << " dtype " << dtype;
    }
    EXPECT_TRUE(shm->using_shared_memory());
  }
}

TEST_F(SharedMemoryTest, AWorkerWithoutItIsServedBytes) {
  auto worker = Worker(/*allow=*/false);
  auto shm = Client(worker->server->address(), true, v1::TENSOR_DTYPE_F32);
  auto bytes = Client(worker->server->address(), false, v1::TENSOR_DTYPE_F32);
  ::testing::internal::CaptureStderr();
  for (int T : {4, 9}) {
    Call a = MakeCall(T, 2, spec_.hidden, experts_, T), b = a;
    ASSERT_TRUE(shm->RunExperts(a.call(0), a.out.data(), absl::Now() + absl::Seconds(10)).ok());
    ASSERT_TRUE(bytes->RunExperts(b.call(0), b.out.data(), absl::Now() + absl::Seconds(10)).ok());
    EXPECT_EQ(a.out, b.out);
  }
  EXPECT_FALSE(shm->using_shared_memory());
  // Said once, with the worker's reason.
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, HasSubstr("no shared memory (shm_name: shared memory is off on this worker"));
  EXPECT_EQ(log.find("no shared memory"), log.rfind("no shared memory")) << log;
}

TEST_F(SharedMemoryTest, BadFieldsAreNamed) {
  auto worker = Worker(/*allow=*/true);
  auto region = SharedRegion::Create(64 << 10);
  ASSERT_TRUE(region.ok()) << region.status();
  Call c = MakeCall(2, 2, spec_.hidden, experts_, 1);
  auto request = [&] {
    v1::RunExpertsRequest r;
    r.set_layer(0);
    r.set_num_tokens(c.T);
    r.set_hidden_size(c.H);
    r.set_top_k(c.k);
    r.set_dtype(v1::TENSOR_DTYPE_F32);
    for (size_t i = 0; i < c.ids.size(); ++i) {
      r.add_expert_ids(c.ids[i]);
      r.add_weights(c.w[i]);
    }
    r.set_shm_name((*region)->name());
    r.set_shm_in_offset(0);
    r.set_shm_out_offset(32 << 10);
    return r;
  };
  v1::RunExpertsResponse resp;
  {
    v1::RunExpertsRequest r = request();
    EncodeTensorTo(c.x.data(), c.x.size(), v1::TENSOR_DTYPE_F32, (*region)->data());
    ASSERT_TRUE(worker->service->Handle(r, &resp).ok());
    EXPECT_TRUE(resp.output_in_shm());
    EXPECT_TRUE(resp.output().empty());
  }
  struct Bad {
    std::function<void(v1::RunExpertsRequest*)> edit;
    absl::StatusCode code;
    std::string says;
  };
  const std::vector<Bad> bad = {
      {[](auto* r) { r->set_shm_name("/etc-passwd"); }, absl::StatusCode::kInvalidArgument, "shm_name"},
      {[](auto* r) { r->set_shm_name("/mxserve-shm-nosuch"); }, absl::StatusCode::kInvalidArgument, "shm_name"},
      {[](auto* r) { r->set_shm_out_offset(100); }, absl::StatusCode::kInvalidArgument, "multiples of 64"},
      {[](auto* r) { r->set_shm_out_offset(64 << 10); }, absl::StatusCode::kInvalidArgument, "do not fit"},
      {[](auto* r) { r->set_shm_in_offset(uint64_t{1} << 62); }, absl::StatusCode::kInvalidArgument, "do not fit"},
      {[](auto* r) { r->set_shm_out_offset(64); }, absl::StatusCode::kInvalidArgument, "overlap"},
      {[](auto* r) { r->set_hidden("xx"); }, absl::StatusCode::kInvalidArgument, "hidden"},
  };
  for (const Bad& b : bad) {
    v1::RunExpertsRequest r = request();
    b.edit(&r);
    absl::Status s = worker->service->Handle(r, &resp);
    EXPECT_EQ(s.code(), b.code) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(b.says));
  }
  auto off = Worker(/*allow=*/false);
  absl::Status s = off->service->Handle(request(), &resp);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("--allow_shared_memory"));
}

// An executor that records what the service asks it to page-lock (as the GPU executor would
// cudaHostRegister it) and where each call's tensors were, then runs the shard.
class PinRecorder final : public ExpertExecutor {
 public:
  explicit PinRecorder(std::shared_ptr<const ExpertShard> shard)
      : inner_(std::make_shared<ShardExecutor>(std::move(shard), nullptr)) {}
  absl::Status Run(const ExpertBatch& batch, float* out) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const size_t n = size_t(batch.num_tokens) * shard_hidden_ * sizeof(float);
      runs_in_pinned_ += Inside(batch.x, n) && Inside(out, n);
      ++runs_;
    }
    return inner_->Run(batch, out);
  }
  void PinHostMemory(void* p, size_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(pinned_.count(static_cast<char*>(p)), 0u);
    pinned_[static_cast<char*>(p)] = n;
    ++pins_;
  }
  void UnpinHostMemory(void* p) override {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(pinned_.erase(static_cast<char*>(p)), 1u) << "unpinned what was not pinned";
  }
  bool Inside(const void* q, size_t n) const {
    const char* c = static_cast<const char*>(q);
    for (const auto& [p, size] : pinned_) {
      if (c >= p && c + n <= p + size) return true;
    }
    return false;
  }
  std::mutex mu_;
  std::shared_ptr<ExpertExecutor> inner_;
  size_t shard_hidden_ = 0;
  std::map<char*, size_t> pinned_;
  int pins_ = 0, runs_ = 0, runs_in_pinned_ = 0;
};

// The service offers each object it maps to the executor to page-lock, once, and takes it back
// before unmapping; the calls' tensors lie inside what was offered; answers are unchanged.
TEST_F(SharedMemoryTest, MappedObjectsAreOfferedToTheExecutorToPin) {
  auto w = testing::StartWorker(dir_, experts_, /*ready=*/false, /*allow_shared_memory=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  auto rec = std::make_shared<PinRecorder>((*w)->shard);
  rec->shard_hidden_ = spec_.hidden;
  (*w)->service->SetReady(rec);
  (*w)->server->SetServing(true);
  auto shm = Client((*w)->server->address(), true, v1::TENSOR_DTYPE_F32);
  auto bytes = Client((*w)->server->address(), false, v1::TENSOR_DTYPE_F32);
  for (int T : {3, 3, 40, 7, 300}) {  // growing batches make new, larger objects
    Call a = MakeCall(T, 2, spec_.hidden, experts_, T), b = a;
    ASSERT_TRUE(shm->RunExperts(a.call(0), a.out.data(), absl::Now() + absl::Seconds(10)).ok());
    ASSERT_TRUE(bytes->RunExperts(b.call(0), b.out.data(), absl::Now() + absl::Seconds(10)).ok());
    EXPECT_EQ(a.out, b.out) << "T=" << T;
  }
  {
    std::lock_guard<std::mutex> lock(rec->mu_);
    EXPECT_GE(rec->pins_, 2);                     // the first object and at least one larger one
    EXPECT_LE(rec->pins_, 4);                     // not once per call
    EXPECT_EQ(rec->runs_, 10);
    EXPECT_EQ(rec->runs_in_pinned_, 5);           // every shared-memory call, no bytes call
  }
  shm.reset();
  bytes.reset();
  w->reset();  // the service and its mappings go: every pinned object is taken back
  std::lock_guard<std::mutex> lock(rec->mu_);
  EXPECT_TRUE(rec->pinned_.empty()) << rec->pinned_.size() << " objects still pinned";
}

// An executor with its own BF16 path (as the GPU executor converts on the device): records the
// bf16 bytes it was handed and answers with the default conversion.
class Bf16Recorder final : public ExpertExecutor {
 public:
  explicit Bf16Recorder(std::shared_ptr<const ExpertShard> shard)
      : inner_(std::make_shared<ShardExecutor>(std::move(shard), nullptr)) {}
  absl::Status Run(const ExpertBatch& batch, float* out) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++f32_runs_;
    }
    return inner_->Run(batch, out);
  }
  absl::Status RunBf16(const ExpertBatch& batch, const void* x, void* out) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      EXPECT_EQ(batch.x, nullptr);
      seen_x_.assign(static_cast<const char*>(x), size_t(batch.num_tokens) * batch.hidden * 2);
      ++bf16_runs_;
    }
    return inner_->RunBf16(batch, x, out);
  }
  std::mutex mu_;
  std::shared_ptr<ExpertExecutor> inner_;
  std::string seen_x_;
  int f32_runs_ = 0, bf16_runs_ = 0;
};

// A BF16 call reaches the executor's RunBf16 with the request's bf16 bytes as they came (in
// the message or the shared-memory object), and its answer goes back as is; F32 calls go to Run.
TEST_F(SharedMemoryTest, Bf16CallsReachTheExecutorsBf16Path) {
  auto w = testing::StartWorker(dir_, experts_, /*ready=*/false, /*allow_shared_memory=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  auto rec = std::make_shared<Bf16Recorder>((*w)->shard);
  (*w)->service->SetReady(rec);
  (*w)->server->SetServing(true);
  auto plain = Worker(/*allow=*/true);  // the shard's own executor: the reference answers
  for (bool shm : {false, true}) {
    auto c = Client((*w)->server->address(), shm, v1::TENSOR_DTYPE_BF16);
    auto ref = Client(plain->server->address(), shm, v1::TENSOR_DTYPE_BF16);
    for (int T : {1, 9, 200}) {
      Call a = MakeCall(T, 2, spec_.hidden, experts_, 7 * T + shm), b = a;
      ASSERT_TRUE(c->RunExperts(a.call(1), a.out.data(), absl::Now() + absl::Seconds(10)).ok());
      ASSERT_TRUE(ref->RunExperts(b.call(1), b.out.data(), absl::Now() + absl::Seconds(10)).ok());
      EXPECT_EQ(a.out, b.out) << "T " << T << " shm " << shm;
      std::string want;
      EncodeTensor(a.x.data(), a.x.size(), v1::TENSOR_DTYPE_BF16, &want);
      std::lock_guard<std::mutex> lock(rec->mu_);
      EXPECT_TRUE(rec->seen_x_ == want) << "T " << T << " shm " << shm << ": not the request's bf16 bytes";
    }
  }
  auto f32 = Client((*w)->server->address(), true, v1::TENSOR_DTYPE_F32);
  Call a = MakeCall(5, 2, spec_.hidden, experts_, 3);
  ASSERT_TRUE(f32->RunExperts(a.call(0), a.out.data(), absl::Now() + absl::Seconds(10)).ok());
  std::lock_guard<std::mutex> lock(rec->mu_);
  EXPECT_EQ(rec->bf16_runs_, 6);
  EXPECT_EQ(rec->f32_runs_, 1);  // the F32 call only (the BF16 calls' Run is the inner executor's)
}

TEST(SharedMemory, OnlyForWorkersOnThisHost) {
  for (const char* a : {"127.0.0.1:1", "localhost:1", "[::1]:1", "127.0.0.5:9"}) {
    auto c = WorkerClient::Create(a, {.shared_memory = true});
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE((*c)->using_shared_memory()) << a;
  }
  auto remote = WorkerClient::Create("10.1.2.3:50052", {.shared_memory = true});
  ASSERT_TRUE(remote.ok());
  EXPECT_FALSE((*remote)->using_shared_memory());
  auto moved = WorkerClient::Create("127.0.0.1:1", {.shared_memory = true});
  ASSERT_TRUE(moved.ok());
  ASSERT_TRUE((*moved)->Reconnect("worker-7.example:50052").ok());
  EXPECT_FALSE((*moved)->using_shared_memory());
}

TEST(SharedMemory, ObjectsGoWithTheirOwners) {
  EXPECT_TRUE(IsSharedMemoryName("/mxserve-shm-12-3"));
  EXPECT_FALSE(IsSharedMemoryName("/mxserve-shm-"));
  EXPECT_FALSE(IsSharedMemoryName("/mxserve-shm-../x"));
  EXPECT_FALSE(IsSharedMemoryName("mxserve-shm-1-1"));
  std::string name;
  {
    auto r = SharedRegion::Create(4096);
    ASSERT_TRUE(r.ok()) << r.status();
    name = (*r)->name();
    EXPECT_TRUE(ShmExists(name));
  }
  EXPECT_FALSE(ShmExists(name));
  // An object named after a process that has exited is removed; ours is not.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::string stale = "/mxserve-shm-" + std::to_string(child) + "-0";
  const int fd = shm_open(stale.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  auto mine = SharedRegion::Create(4096);
  ASSERT_TRUE(mine.ok());
  EXPECT_GE(RemoveStaleSharedRegions(), 1);
  EXPECT_FALSE(ShmExists(stale));
  EXPECT_TRUE(ShmExists((*mine)->name()));
}

}  // namespace
}  // namespace mxserve

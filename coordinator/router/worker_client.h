// An ExpertBackend reached over gRPC (mxserve.v1.ExpertWorker on host:port): explicit message
// sizes, keepalive, a deadline on every call, F32 activations on the wire by default (exact;
// BF16 halves the bytes). Calls go over one long-lived RunExpertsStream (no per-call stream setup;
// each call's deadline enforced by cancelling the stream) unless options say unary, or the stream
// is busy with another thread's call. Also the readiness wait (grpc.health.v1 Check), Describe, and the
// health Watch stream the WorkerWatcher keeps open. Reconnect() swaps the channel (a restarted
// local worker comes back on a new port); calls already in flight finish on the old one.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/router/expert_backend.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/channel.h"
#include "mxserve/v1/expert_worker.grpc.pb.h"
#include "wire/shared_memory.h"
#include "wire/worker_auth.h"

namespace mxserve {

class ThreadPool;

struct WorkerClientOptions {
  std::string name;                                  // for errors/logs; default "worker@ADDR"
  v1::TensorDType wire_dtype = v1::TENSOR_DTYPE_F32; // F32 or BF16
  int max_message_bytes = 256 << 20;                 // both directions (worker uses the same)
  // A hung worker (SIGSTOP: its socket stays open) fails every call and stream on the channel
  // within keepalive_time + keepalive_timeout. The worker's server must accept pings this
  // often (WorkerServerOptions::min_recv_ping_interval <= keepalive_time).
  absl::Duration keepalive_time = absl::Seconds(1);
  absl::Duration keepalive_timeout = absl::Seconds(1);
  // Mutual TLS and/or the worker token (wire/worker_auth.h); must match the workers'.
  WorkerAuthOptions auth;
  // RunExperts over the worker's RunExpertsStream (one stream per client, reopened after a
  // failure or Reconnect) rather than one unary call each.
  bool stream = true;
  // Same host only (a loopback address; others get bytes): stream calls put the activations and
  // partial sums in a shared-memory object (wire/shared_memory.h) and send only the call; for
  // workers started with --allow_shared_memory (others answer FAILED_PRECONDITION and get bytes
  // from then on).
  bool shared_memory = false;
  // Threads that copy (or convert) the tensors into and out of the shared-memory object and out
  // of the response bytes, the calling thread among them (tensor_wire.h: tensors of 4 MB and
  // up). The coordinator passes its dense pool, idle while a layer's experts run; null: the
  // calling thread alone.
  std::shared_ptr<ThreadPool> copy_pool;
};

class WorkerClient final : public ExpertBackend {
 public:
  ~WorkerClient() override;
  // Makes the channel (connects lazily; no I/O here). address is "host:port".
  static absl::StatusOr<std::unique_ptr<WorkerClient>> Create(const std::string& address,
                                                              WorkerClientOptions options = {});

  absl::Status RunExperts(const ExpertBatch& call, float* out, absl::Time deadline) override;
  std::string name() const override { return name_; }
  std::string address() const override;
  absl::Status Reconnect(const std::string& address) override;
  uint64_t bytes_sent() const override { return bytes_sent_.load(); }
  uint64_t bytes_received() const override { return bytes_received_.load(); }
  uint64_t stream_opens() const override { return stream_opens_.load(); }
  uint64_t unary_calls() const override { return unary_calls_.load(); }
  // options.shared_memory, and the worker has not refused it.
  bool using_shared_memory() const { return options_.shared_memory && !shm_unsupported_.load(); }
  bool shared_memory() const override { return using_shared_memory(); }

  // Polls grpc.health.v1 Check("mxserve.v1.ExpertWorker") until SERVING or `deadline`
  // (DEADLINE_EXCEEDED then, with the last answer seen).
  absl::Status WaitReady(absl::Time deadline);
  // One health Check: true if SERVING.
  absl::StatusOr<bool> IsServing(absl::Time deadline);
  absl::StatusOr<v1::DescribeResponse> Describe(absl::Time deadline);
  // The health stub of the current channel (for Watch streams).
  std::shared_ptr<grpc::health::v1::Health::Stub> health_stub() const;
  // Bumped by every Reconnect (a watcher restarts its stream when it changes).
  uint64_t generation() const { return generation_.load(); }

 private:
  WorkerClient() = default;
  absl::Status Annotate(const absl::Status& s) const;
  absl::Status RunUnary(const ExpertBatch& call, float* out, absl::Time deadline);
  // The call on the stream; the caller holds stream_mu_.
  absl::Status RunOnStream(const ExpertBatch& call, float* out, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream_mu_);
  // shm_out: where a shared-memory answer lies (nullptr: the call went as bytes).
  absl::Status CheckAndDecode(const ExpertBatch& call, const v1::RunExpertsResponse& resp, const char* shm_out,
                              float* out) const;
  // Puts the call's activations in region_ (made or grown as needed) and names it in req, whose
  // other fields FillRequest set; returns where the output will lie, or nullptr (and bytes from
  // now on) when no region can be made.
  const char* FillShared(const ExpertBatch& call, v1::RunExpertsRequest* req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream_mu_);
  void CloseStream() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stream_mu_);
  void GiveUpSharedMemory(absl::string_view why);
  // Cancels `ctx` if `deadline` passes before Disarm(); Disarm says whether it did.
  void Arm(grpc::ClientContext* ctx, absl::Time deadline);
  bool Disarm();
  void WatchdogLoop();
  struct Conn {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<v1::ExpertWorker::Stub> stub;
    std::shared_ptr<grpc::health::v1::Health::Stub> health;
  };
  std::shared_ptr<const Conn> conn() const;
  std::shared_ptr<const Conn> MakeConn(const std::string& address) const;

  std::string name_;
  WorkerClientOptions options_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Conn> conn_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::ChannelCredentials> creds_;  // from options_.auth
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0};
  std::atomic<uint64_t> stream_opens_{0}, unary_calls_{0};

  // The RunExperts stream: one call at a time (a second thread's concurrent call goes unary).
  struct Stream {
    std::shared_ptr<const Conn> conn;  // the channel it runs on (a Reconnect replaces it)
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientReaderWriter<v1::ExpertStreamRequest, v1::ExpertStreamResponse>> rw;
  };
  absl::Mutex stream_mu_;
  std::unique_ptr<Stream> stream_ ABSL_GUARDED_BY(stream_mu_);
  std::atomic<bool> stream_unsupported_{false};  // the worker answered UNIMPLEMENTED
  std::unique_ptr<SharedRegion> region_ ABSL_GUARDED_BY(stream_mu_);  // options_.shared_memory
  std::atomic<bool> shm_unsupported_{false};  // the worker refused it (or no region could be made)
  uint64_t next_id_ ABSL_GUARDED_BY(stream_mu_) = 0;

  // The deadline watchdog of stream calls (a thread, started with the first stream call).
  absl::Mutex dog_mu_;
  absl::CondVar dog_cv_;
  grpc::ClientContext* armed_ ABSL_GUARDED_BY(dog_mu_) = nullptr;
  absl::Time armed_deadline_ ABSL_GUARDED_BY(dog_mu_);
  bool fired_ ABSL_GUARDED_BY(dog_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(dog_mu_) = false;
  std::thread dog_;
};

}  // namespace mxserve

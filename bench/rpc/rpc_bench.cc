// mxserve-bench-rpc: one RunExperts round trip over loopback gRPC (WorkerClient -> WorkerServer,
// the production code on both ends) for a gpt-oss-20b-shaped payload (H = 2880, top-4, F32 and
// BF16 on the wire) at 1, 16, 128 and 1024 tokens, beside the same request and response bytes
// moved over a plain TCP socket pair on 127.0.0.1. The worker's executor writes zeros, so the
// figures are transport + (de)serialisation + validation only, never the MoE kernel.
// Prints a markdown table.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "coordinator/router/worker_client.h"
#include "core/thread_pool.h"
#include "grpcpp/grpcpp.h"
#include "wire/tensor_wire.h"
#include "worker/expert_service.h"
#include "worker/worker_server.h"

namespace mxserve {
namespace {

constexpr int kHidden = 2880, kTopK = 4, kExperts = 32, kLayers = 24;

// The transport-only stand-in: a valid, zero partial sum.
class ZeroExecutor final : public ExpertExecutor {
 public:
  absl::Status Run(const ExpertBatch& batch, float* out) override {
    std::memset(out, 0, sizeof(float) * batch.num_tokens * kHidden);
    return absl::OkStatus();
  }
};

struct Timing {
  double median_us = 0;
  int iters = 0;
};

// Runs fn until ~budget has passed (at least min_iters, at most max_iters) after 3 warm-ups.
template <typename Fn>
Timing Measure(Fn fn, absl::Duration budget, int min_iters = 5, int max_iters = 2000) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> us;
  const absl::Time end = absl::Now() + budget;
  while ((static_cast<int>(us.size()) < min_iters || absl::Now() < end) &&
         static_cast<int>(us.size()) < max_iters) {
    const absl::Time t0 = absl::Now();
    fn();
    us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], static_cast<int>(us.size())};
}

void ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) { perror("read"); std::exit(1); }
    p += r;
    n -= r;
  }
}
void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t r = write(fd, p, n);
    if (r <= 0) { perror("write"); std::exit(1); }
    p += r;
    n -= r;
  }
}

// A connected TCP pair on 127.0.0.1 (Nagle off on both ends, as gRPC sets it).
std::pair<int, int> TcpPair() {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(lfd, 1) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    perror("listen");
    std::exit(1);
  }
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) { perror("connect"); std::exit(1); }
  int s = accept(lfd, nullptr, nullptr);
  close(lfd);
  int one = 1;
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return {c, s};
}

// Raw loopback: the client sends req_bytes, the server answers resp_bytes.
Timing RawTcp(size_t req_bytes, size_t resp_bytes, absl::Duration budget) {
  auto [c, s] = TcpPair();
  std::vector<char> req(req_bytes, 1), resp(resp_bytes, 2), sbuf(req_bytes), cbuf(resp_bytes);
  std::thread server([&, s = s] {
    while (true) {
      uint8_t op;
      if (read(s, &op, 1) != 1 || op == 0) break;
      ReadAll(s, sbuf.data(), req_bytes - 1);
      WriteAll(s, resp.data(), resp_bytes);
    }
    close(s);
  });
  Timing t = Measure(
      [&, c = c] {
        WriteAll(c, req.data(), req_bytes);  // first byte 1 = "a request follows"
        ReadAll(c, cbuf.data(), resp_bytes);
      },
      budget);
  uint8_t stop = 0;
  WriteAll(c, reinterpret_cast<const char*>(&stop), 1);
  server.join();
  close(c);
  return t;
}

std::string Cpu() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  char line[512];
  std::string model = "unknown CPU";
  while (f != nullptr && std::fgets(line, sizeof(line), f)) {
    if (std::strncmp(line, "model name", 10) == 0) {
      model = std::string(std::strchr(line, ':') + 2);
      model.pop_back();
      break;
    }
  }
  if (f) std::fclose(f);
  return absl::StrFormat("%s, %u hardware threads", model, std::thread::hardware_concurrency());
}

int Main(double seconds_per_point) {
  WorkerModelInfo info;
  info.model_type = "gpt_oss";
  info.num_layers = kLayers;
  info.num_experts = kExperts;
  info.hidden_size = kHidden;
  info.intermediate_size = kHidden;
  info.experts.resize(kExperts);
  std::iota(info.experts.begin(), info.experts.end(), 0);
  auto service = std::make_shared<ExpertService>(info, /*allow_shared_memory=*/true);
  service->SetReady(std::make_shared<ZeroExecutor>());
  auto server = WorkerServer::Start(WorkerServerOptions{}, service);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  (*server)->SetServing(true);

  auto copy_pool = std::make_shared<ThreadPool>(0);  // one thread per core, as the coordinator's
  std::printf("## RunExperts round trip over loopback gRPC vs raw TCP\n\n");
  std::printf("%s. gpt-oss-20b-shaped call: hidden %d, top-%d of %d experts, layer 0. The worker's\n"
              "executor writes zeros (transport, (de)serialisation and validation only; no MoE\n"
              "kernel). Client = WorkerClient (production path incl. F32->BF16 encode/decode; calls on\n"
              "one RunExpertsStream, and, for comparison, one unary RunExperts call each), server =\n"
              "WorkerServer/ExpertService (sync gRPC %s). Raw TCP = the same request and response byte\n"
              "counts over one 127.0.0.1 socket pair, TCP_NODELAY. Median of >= 5 calls per row, ~%.1f s each;\n"
              "GB/s counts request + response bytes. no-transport = the same encode, protobuf\n"
              "serialise/parse, validation and decode on both sides, in one thread, no socket.\n"
              "shm = the stream client with shared_memory (tensors in /dev/shm, the call on gRPC),\n"
              "copying the tensors with its calling thread; shm pool = the same with a copy pool of\n"
              "%d threads (the coordinator passes its dense pool: WorkerClientOptions::copy_pool).\n\n",
              Cpu().c_str(), kHidden, kTopK, kExperts, grpc::Version().c_str(), seconds_per_point,
              copy_pool->size());
  std::printf("| tokens | wire | request B | response B | gRPC unary µs | gRPC stream µs | stream GB/s | shm µs | shm pool µs | no-transport µs | raw TCP µs | raw TCP GB/s | stream / TCP |\n");
  std::printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const absl::Duration budget = absl::Seconds(seconds_per_point);
  for (v1::TensorDType wire : {v1::TENSOR_DTYPE_F32, v1::TENSOR_DTYPE_BF16}) {
    // The production client (calls on one RunExpertsStream) and the unary one (--expert_call_stream=false).
    auto client = WorkerClient::Create((*server)->address(), {.wire_dtype = wire});
    auto unary = WorkerClient::Create((*server)->address(), {.wire_dtype = wire, .stream = false});
    auto shm = WorkerClient::Create((*server)->address(), {.wire_dtype = wire, .shared_memory = true});
    auto shm_pool = WorkerClient::Create((*server)->address(),
                                         {.wire_dtype = wire, .shared_memory = true, .copy_pool = copy_pool});
    if (!client.ok() || !unary.ok() || !shm.ok() || !shm_pool.ok() ||
        !(*client)->WaitReady(absl::Now() + absl::Seconds(10)).ok()) {
      std::fprintf(stderr, "worker not ready\n");
      return 1;
    }
    for (int T : {1, 16, 128, 1024}) {
      std::mt19937 rng(T);
      std::normal_distribution<float> nd;
      std::vector<float> x(static_cast<size_t>(T) * kHidden), w(T * kTopK, 0.25f),
          out(static_cast<size_t>(T) * kHidden);
      for (float& v : x) v = nd(rng);
      std::vector<int32_t> ids;
      for (int t = 0; t < T; ++t) {
        for (int j = 0; j < kTopK; ++j) ids.push_back((t * 7 + j * 5) % kExperts);
      }
      ExpertBatch call{{T, kTopK, x.data(), ids.data(), w.data()}, 0, kHidden};
      // The bytes on the wire, as the client builds them.
      v1::RunExpertsRequest req;
      req.set_layer(0);
      req.set_num_tokens(T);
      req.set_hidden_size(kHidden);
      req.set_top_k(kTopK);
      req.set_dtype(wire);
      EncodeTensor(x.data(), x.size(), wire, req.mutable_hidden());
      req.mutable_expert_ids()->Add(ids.begin(), ids.end());
      req.mutable_weights()->Add(w.begin(), w.end());
      v1::RunExpertsResponse resp;
      resp.set_num_tokens(T);
      resp.set_dtype(wire);
      EncodeTensor(out.data(), out.size(), wire, resp.mutable_output());
      const size_t req_b = req.ByteSizeLong(), resp_b = resp.ByteSizeLong();
      bool failed = false;
      auto timed = [&](WorkerClient& c) {
        return Measure(
            [&] {
              absl::Status s = c.RunExperts(call, out.data(), absl::Now() + absl::Seconds(30));
              if (!s.ok() && !failed) {
                failed = true;
                std::fprintf(stderr, "RunExperts: %s\n", s.ToString().c_str());
              }
            },
            budget);
      };
      Timing u = timed(**unary);
      Timing g = timed(**client);
      Timing sh = timed(**shm);
      Timing shp = timed(**shm_pool);
      if (failed || !(*shm)->using_shared_memory() || !(*shm_pool)->using_shared_memory()) return 1;
      // The same work with no transport: client encode + serialise, server parse + validate +
      // answer + serialise, client parse + decode. What is left of the gRPC time is gRPC's own.
      // Messages and buffers are reused across iterations, as the client and server threads do.
      std::string wire_req, wire_resp;
      v1::RunExpertsRequest q, sq;
      v1::RunExpertsResponse sr, cr;
      Timing p = Measure(
          [&] {
            q.Clear();
            q.set_layer(0);
            q.set_num_tokens(T);
            q.set_hidden_size(kHidden);
            q.set_top_k(kTopK);
            q.set_dtype(wire);
            EncodeTensor(x.data(), x.size(), wire, q.mutable_hidden());
            q.mutable_expert_ids()->Add(ids.begin(), ids.end());
            q.mutable_weights()->Add(w.begin(), w.end());
            q.SerializeToString(&wire_req);
            sq.ParseFromString(wire_req);
            sr.Clear();
            if (!service->Handle(sq, &sr).ok()) std::abort();
            sr.SerializeToString(&wire_resp);
            cr.ParseFromString(wire_resp);
            DecodeTensorInto(cr.output(), out.size(), wire, out.data());
          },
          budget);
      Timing r = RawTcp(req_b, resp_b, budget);
      const double bytes = static_cast<double>(req_b + resp_b);
      std::printf("| %d | %s | %zu | %zu | %.0f | %.0f | %.2f | %.0f | %.0f | %.0f | %.0f | %.2f | %.1f× |\n", T,
                  wire == v1::TENSOR_DTYPE_F32 ? "F32" : "BF16", req_b, resp_b, u.median_us, g.median_us,
                  bytes / g.median_us / 1e3, sh.median_us, shp.median_us, p.median_us, r.median_us,
                  bytes / r.median_us / 1e3, g.median_us / r.median_us);
      std::fflush(stdout);
    }
  }
  (*server)->Shutdown(absl::ZeroDuration());
  return 0;
}

}  // namespace
}  // namespace mxserve

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  if (!(seconds > 0)) seconds = 1.0;
  return mxserve::Main(seconds);
}

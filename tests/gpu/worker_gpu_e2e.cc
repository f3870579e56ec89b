// mxserve-gpu-worker-e2e: end to end on one GPU. Talks to a running `mxserve-worker --device
// cuda:N` over gRPC: for each token count and layer, RunExperts on fresh random activations
// and routing; a sample of tokens is checked against kernels::MoeForwardReference on the same
// checkpoint loaded here on the CPU (bound as tests/gpu/moe_cuda_check.cc); prints the median and
// the fastest per-layer time including the gRPC hop (F32 on the wire by default, loopback;
// --transport shm puts the tensors in /dev/shm instead, for a worker started with
// --allow_shared_memory). The client copies the tensors with a pool of --copy_threads threads
// (default 0: one per core, as the coordinator's dense pool; 1: the calling thread alone).
//   mxserve-gpu-worker-e2e --model DIR --address 127.0.0.1:PORT [--tokens 1,64,1024] [--reps 15]
//                          [--transport bytes|shm] [--wire f32|bf16] [--copy_threads N] [--in_process 1]
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "coordinator/router/worker_client.h"
#include "core/bf16.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "core/thread_pool.h"
#include "experts/expert_shard.h"
#include "experts/gpu_executor.h"
#include "kernels/moe/moe.h"
#include "tests/gpu/random_moe.h"
#include "wire/tensor_wire.h"

namespace mxserve {
namespace {

// --in_process 1: the worker's GpuExecutor in this process, no gRPC and no client copies: the
// same layer's time with x and out in pageable and in page-locked host memory, F32 and BF16, so
// that the table above can be split into the executor's part and the hop's.
int InProcess(std::shared_ptr<const ExpertShard> shard, const std::vector<int>& tokens, int reps, int k, int H,
              const std::vector<int>& experts, ThreadPool* pool) {
  auto ex = GpuExecutor::Create(shard, 0);
  if (!ex.ok()) {
    std::printf("FAIL  in-process executor: %s\n", std::string(ex.status().message()).c_str());
    return 1;
  }
  std::printf("\n# in process (GpuExecutor::Run / RunBf16 on cuda:0, no gRPC), layer 0, ms, median of %d; x and out\n"
              "# pageable, page-locked by cudaMallocHost, or a MAP_SHARED mapping page-locked by cudaHostRegister\n"
              "# (as the worker does the client's /dev/shm object); last column: the client's copies alone (x in,\n"
              "# out back: EncodeTensorTo + DecodeTensorInto F32 on its pool of %d)\n"
              "| tokens | F32 pageable | F32 cudaMallocHost | BF16 cudaMallocHost | F32 registered mapping | client copies |\n"
              "|---|---|---|---|---|---|\n", reps, pool->size());
  int failures = 0;
  for (int T : tokens) {
    gpu_test::HostBatch b = gpu_test::MakeBatch(T, k, H, experts, 0.02, 4242 + T);
    const size_t n = size_t(T) * H;
    float *px = nullptr, *pout = nullptr;
    if (cudaMallocHost(&px, 4 * n) != cudaSuccess || cudaMallocHost(&pout, 4 * n) != cudaSuccess) {
      std::printf("FAIL  cudaMallocHost\n");
      return 1;
    }
    std::memcpy(px, b.x.data(), 4 * n);
    std::vector<uint16_t> xb(n);
    for (size_t i = 0; i < n; ++i) xb[i] = FloatToBf16(b.x[i]);
    std::vector<float> out(n);
    uint16_t* xb_locked = nullptr;  // x's bf16 bytes, page-locked
    if (cudaMallocHost(&xb_locked, 2 * n) != cudaSuccess) {
      std::printf("FAIL  cudaMallocHost\n");
      return 1;
    }
    std::memcpy(xb_locked, xb.data(), 2 * n);
    // A shared mapping registered like the worker's (ExpertService -> GpuExecutor::PinHostMemory).
    const size_t map_bytes = 8 * n;
    void* map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      std::printf("FAIL  mmap\n");
      return 1;
    }
    float* mx = static_cast<float*>(map);
    float* mout = mx + n;
    std::memcpy(mx, b.x.data(), 4 * n);
    (*ex)->PinHostMemory(map, map_bytes);
    std::vector<char> wire(4 * n);
    double med[5];
    for (int mode = 0; mode < 5; ++mode) {
      ExpertBatch mb{b.batch(), /*layer=*/0, H};
      if (mode == 1 || mode == 2) mb.x = px;
      if (mode == 3) mb.x = mx;
      std::vector<double> ms;
      absl::Status st;
      for (int r = 0; r < reps + 2 && st.ok(); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        if (mode == 4) {
          EncodeTensorTo(b.x.data(), n, v1::TENSOR_DTYPE_F32, wire.data(), pool);
          DecodeTensorInto(wire.data(), n, v1::TENSOR_DTYPE_F32, out.data(), pool);
        }
        st = mode == 0   ? (*ex)->Run(mb, out.data())
             : mode == 1 ? (*ex)->Run(mb, pout)
             : mode == 2 ? (*ex)->RunBf16(mb, xb_locked, pout)
             : mode == 3 ? (*ex)->Run(mb, mout)
                         : absl::OkStatus();
        const double d = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r >= 2) ms.push_back(d);
      }
      if (!st.ok()) {
        std::printf("FAIL  in-process T=%d: %s\n", T, std::string(st.message()).c_str());
        ++failures;
        med[mode] = -1;
        continue;
      }
      std::sort(ms.begin(), ms.end());
      med[mode] = ms[ms.size() / 2];
    }
    std::printf("| %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", T, med[0], med[1], med[2], med[3], med[4]);
    (*ex)->UnpinHostMemory(map);
    munmap(map, map_bytes);
    std::fflush(stdout);
    cudaFreeHost(px);
    cudaFreeHost(pout);
    cudaFreeHost(xb_locked);
  }
  return failures;
}

int Main(int argc, char** argv) {
  std::string model, address;
  std::vector<int> tokens = {1, 64, 1024};
  int reps = 15;  // one-token medians of 7 moved by +-0.1 ms between runs
  WorkerClientOptions copt;  // --transport shm: tensors through /dev/shm (worker --allow_shared_memory)
  int copy_threads = 0;
  bool in_process = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--transport") copt.shared_memory = v == "shm";
    else if (a == "--wire") copt.wire_dtype = v == "bf16" ? v1::TENSOR_DTYPE_BF16 : v1::TENSOR_DTYPE_F32;
    else if (a == "--address") address = v;
    else if (a == "--reps") reps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--copy_threads") copy_threads = std::atoi(v.c_str());
    else if (a == "--in_process") in_process = v == "1";
    else if (a == "--tokens") {
      tokens.clear();
      for (auto s : absl::StrSplit(v, ',')) tokens.push_back(std::atoi(std::string(s).c_str()));
    }
  }
  if (model.empty() || address.empty()) {
    std::fprintf(stderr, "usage: %s --model DIR --address HOST:PORT [--tokens ..] [--reps N] [--transport bytes|shm] "
                 "[--wire f32|bf16] [--copy_threads N] [--in_process 1]\n", argv[0]);
    return 2;
  }
  copt.copy_pool = std::make_shared<ThreadPool>(copy_threads);
  auto config = ModelConfig::Load(model);
  auto ckpt = config.ok() ? Checkpoint::Open(model) : absl::StatusOr<std::unique_ptr<Checkpoint>>(config.status());
  if (!ckpt.ok()) {
    std::printf("FAIL  model %s: %s\n", model.c_str(), std::string(ckpt.status().message()).c_str());
    return 1;
  }
  std::vector<int> experts(config->num_local_experts);
  std::iota(experts.begin(), experts.end(), 0);
  auto shard = ExpertShard::Load(**ckpt, *config, experts);
  if (!shard.ok()) {
    std::printf("FAIL  shard: %s\n", std::string(shard.status().message()).c_str());
    return 1;
  }
  auto client = WorkerClient::Create(address, copt);
  if (!client.ok()) return 1;
  if (auto s = (*client)->WaitReady(absl::Now() + absl::Seconds(300)); !s.ok()) {
    std::printf("FAIL  worker not ready: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const int H = config->hidden_size, k = config->num_experts_per_tok;
  std::printf("# %s: %d layers, H=%d I=%d E=%d k=%d; worker %s; %s on the wire (%s); client copy threads %d\n",
              config->model_type.c_str(), config->num_hidden_layers, H, config->intermediate_size,
              config->num_local_experts, k, address.c_str(),
              copt.wire_dtype == v1::TENSOR_DTYPE_BF16 ? "BF16" : "F32", copt.shared_memory ? "shm" : "bytes",
              copt.copy_pool->size());
  std::printf("| tokens | layer | ms per layer (median of %d, incl. gRPC) | fastest | checked | rel_l2 | max_err/rms | result |\n"
              "|---|---|---|---|---|---|---|---|\n", reps);
  int failures = 0;
  for (int T : tokens) {
    gpu_test::HostBatch b = gpu_test::MakeBatch(T, k, H, experts, 0.02, 4242 + T);
    std::vector<float> out(size_t(T) * H);
    for (int l = 0; l < config->num_hidden_layers; ++l) {
      ExpertBatch call{{T, k, b.x.data(), b.ids.data(), b.w.data()}, l, H};
      std::vector<double> ms;
      absl::Status st;
      for (int r = 0; r < reps + 2 && st.ok(); ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        st = (*client)->RunExperts(call, out.data(), absl::Now() + absl::Seconds(60));
        const double d = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r >= 2) ms.push_back(d);
      }
      if (!st.ok()) {
        std::printf("| %d | %d | - | - | - | - | - | FAIL %s |\n", T, l, std::string(st.message()).c_str());
        ++failures;
        continue;
      }
      std::sort(ms.begin(), ms.end());
      const int want = std::min(T, 8);
      double num = 0, den = 0, worst = 0;
      bool finite = true;
      std::vector<float> ref(H);
      for (int i = 0; i < want; ++i) {
        const int t = int(int64_t(i) * T / want);
        kernels::MoeBatch one{1, k, b.x.data() + size_t(t) * H, b.ids.data() + size_t(t) * k,
                              b.w.data() + size_t(t) * k};
        if (!kernels::MoeForwardReference((*shard)->layer(l), one, ref.data()).ok()) finite = false;
        double ss = 0;
        for (int h = 0; h < H; ++h) ss += double(ref[h]) * ref[h];
        const double rms = std::sqrt(ss / H) + 1e-30;
        for (int h = 0; h < H; ++h) {
          const double o = out[size_t(t) * H + h], d = o - ref[h];
          if (!std::isfinite(o)) finite = false;
          num += d * d;
          den += double(ref[h]) * ref[h];
          worst = std::max(worst, std::fabs(d) / rms);
        }
      }
      const double rel = std::sqrt(num / std::max(den, 1e-300));
      const bool pass = finite && rel <= 1e-2 && worst <= 0.05;
      if (!pass) ++failures;
      std::printf("| %d | %d | %.3f | %.3f | %d | %.2e | %.2e | %s |\n", T, l, ms[ms.size() / 2], ms.front(), want, rel,
                  worst, pass ? "PASS" : "FAIL");
      std::fflush(stdout);
    }
  }
  std::printf("%s: %d failure(s)\n", failures == 0 ? "ALL PASS" : "FAILURES", failures);
  if (in_process) failures += InProcess(std::move(*shard), tokens, reps, k, H, experts, copt.copy_pool.get());
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace mxserve

int main(int argc, char** argv) { return mxserve::Main(argc, argv); }

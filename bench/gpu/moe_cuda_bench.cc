// mxserve-bench-moe-gpu: times MoeForwardCuda (whole layer: routing/grouping, gate_up + SwiGLU,
// down, weighted combine) per shape and token count. CUDA events around a CUDA-graph replay of
// the layer, L2 flushed (a 512 MB write; MXSERVE_BENCH_FLUSH=read: a read) and inputs rotated (4
// random batches) between reps. ms: the mean over the batches of each batch's median rep, and
// weight MB the mean of their experts' bytes (a median over all reps would be one batch's time,
// set beside the mean bytes: at 16 tokens of gpt-oss-120b the batches hit 47 to 56 experts).
// Prints a table and writes CSV (argv[1]) for bench/gpu/baselines.py, and each row's expert ids
// ([4 batches][tokens][top_k] int32) to OUT.csv-ids-SHAPE-TOKENS.i32, which baselines.py routes
// its layers by, so that both sides stream the same experts.
//   mxserve-bench-moe-gpu OUT.csv [shape,...] [tokens,...]
// MXSERVE_PLAN=key=value,... : the kernel override (the lab's settings: kernels/cuda/lab/README.md).
// MXSERVE_BENCH_PATHS=auto,decode,wgmma32,... times each of those kernel configurations pinned
// (internal::kPaths' names; auto: kAuto's choice) on the same uploaded layer, one row each (what
// kAuto's cost model rests on); a path is skipped where it cannot be close: more than 4 tiles per
// expert on average, or a tile 16 times the average rows per expert.
// MXSERVE_BENCH_SKEW=<sigma>: expert popularity log-normal(0, sigma) (seeded) instead of uniform,
// each token's top_k distinct experts drawn by popularity. MXSERVE_BENCH_HOST_IDS=1 hands kAuto
// the ids' host copy (as the worker does: it then counts each expert's slots).
// MXSERVE_BENCH_TRIALS=<n>: each row n times in the process, each with a fresh workspace placed
// after a spacer allocation of 96 MB x trial (its buffers land elsewhere in device memory), one
// row per trial (path column "auto#trial") and a "# reps" line with the fastest, median and
// slowest rep: whether a row's spread between processes follows the buffers' placement.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "kernels/cuda/lab/lab.h"
#include "kernels/cuda/lab/plan_option.h"
#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/lab/lab_kernels.h"  // PairStampsReport
#include "kernels/cuda/moe_cuda_launch.h"  // FusedStampsReport
#include "kernels/cuda/moe_cuda_plan.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "tests/gpu/random_moe.h"

namespace mxserve {
namespace bench {
void ReadAll(const void* buf, size_t bytes, uint32_t* sink, cudaStream_t stream);  // l2_read.cu
}  // namespace bench

namespace {

namespace kc = kernels::cuda;

struct Shape {
  std::string name;
  int H, I, E, k;
  bool bias;
};

#define CK(x)                                                            \
  do {                                                                   \
    cudaError_t e_ = (x);                                                \
    if (e_ != cudaSuccess) {                                             \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));      \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

// Redraws b.ids: each token's k distinct experts by popularity (log-normal(0, sigma) over E, the
// same for every batch), keeping skipped (-1) slots.
void SkewIds(gpu_test::HostBatch& b, int E, double sigma, uint64_t seed) {
  std::mt19937_64 rng(seed), prng(1234);
  std::lognormal_distribution<double> pop(0.0, sigma);
  std::vector<double> w(E);
  for (double& x : w) x = pop(prng);
  std::discrete_distribution<int> pick(w.begin(), w.end());
  for (int t = 0; t < b.tokens; ++t) {
    for (int j = 0; j < b.k; ++j) {
      if (b.ids[size_t(t) * b.k + j] < 0) continue;
      int e;
      bool dup;
      do {  // distinct within the token (rejection: k is far below E)
        e = pick(rng);
        dup = false;
        for (int i = 0; i < j; ++i) dup = dup || b.ids[size_t(t) * b.k + i] == e;
      } while (dup);
      b.ids[size_t(t) * b.k + j] = e;
    }
  }
}

// A number from an argument or an environment variable: the whole text, within [lo, hi], or a
// message naming what is wrong and exit 2 (atoi read a typo as 0, and stoi threw, uncaught).
template <typename T>
T Strict(const char* what, const std::string& text, T lo, T hi) {
  T v{};
  bool ok;
  if constexpr (std::is_integral_v<T>) ok = absl::SimpleAtoi(text, &v);
  else ok = absl::SimpleAtod(text, &v);
  if (!ok || !(v >= lo && v <= hi)) {
    std::fprintf(stderr, "%s: '%s' is not a number in [%.10g, %.10g]\n", what, text.c_str(), double(lo), double(hi));
    std::exit(2);
  }
  return v;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) if (!x.empty()) out.push_back(x);
  return out;
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.csv [shapes] [tokens]\n", argv[0]);
    return 2;
  }
  std::vector<Shape> all = {{"gpt-oss-120b", 2880, 2880, 128, 4, true},
                            {"gpt-oss-20b", 2880, 2880, 32, 4, true},
                            {"kimi-k2-like", 7168, 2048, 384, 8, false},
                            {"k3-latent", 3584, 3072, 256, 16, false}};
  std::vector<std::string> want = argc > 2 ? Split(argv[2]) : std::vector<std::string>{"gpt-oss-120b"};
  std::vector<int> tokens = {1, 4, 16, 64, 256, 1024, 4096, 16384};
  if (argc > 3) {
    tokens.clear();
    for (auto& t : Split(argv[3])) tokens.push_back(Strict("token count", t, 1, 1 << 20));
  }
  FILE* csv = std::fopen(argv[1], "w");
  if (!csv) return 1;
  std::fprintf(csv, "shape,tokens,ms,weight_bytes,gbps,tflops,path\n");
  // The one kernel override: MXSERVE_PLAN (kernels/cuda/lab/README.md).
  const char* plan_env = std::getenv("MXSERVE_PLAN");
  if (absl::Status s = kc::lab::ApplyPlanOption(plan_env == nullptr ? "" : plan_env); !s.ok()) {
    std::fprintf(stderr, "%s\n%s", std::string(s.message()).c_str(), kc::lab::PlanOptionHelp().c_str());
    return 2;
  }
  std::vector<int> paths = {-1};  // -1: kAuto (or MXSERVE_PLAN's path=)
  const char* paths_env = std::getenv("MXSERVE_BENCH_PATHS");
  const bool pin_each = paths_env != nullptr;
  if (pin_each) {
    paths.clear();
    for (auto& n : Split(paths_env)) {
      const int p = n == "auto" ? -1 : kc::internal::SpecNamed(n);
      if (p < 0 && n != "auto") {
        std::fprintf(stderr, "MXSERVE_BENCH_PATHS: no path named '%s'\n", n.c_str());
        return 2;
      }
      paths.push_back(p);
    }
  }
  const char* skew_env = std::getenv("MXSERVE_BENCH_SKEW");
  const double skew = skew_env == nullptr ? 0.0 : Strict("MXSERVE_BENCH_SKEW", skew_env, 0.0, 10.0);
  const char* host_ids_env = std::getenv("MXSERVE_BENCH_HOST_IDS");
  const bool host_ids = host_ids_env != nullptr && std::string(host_ids_env) == "1";
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s, %d SMs, L2 %d MB, peak memory %.0f GB/s (kAuto weighs the paired launch: %s)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, kc::internal::Device().peak_gbps,
              kc::lab::PairedCostWeighed() ? "yes" : "no");
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  void* flush = nullptr;
  const size_t flush_bytes = size_t(512) << 20;
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMemset(flush, 0, flush_bytes));
  // MXSERVE_BENCH_FLUSH=read: evict L2 by reading the buffer instead of writing it (no dirty
  // lines left to write back while the layer runs; l2_read.cu).
  const char* flush_env = std::getenv("MXSERVE_BENCH_FLUSH");
  const bool read_flush = flush_env != nullptr && std::string(flush_env) == "read";
  uint32_t* sink = nullptr;
  CK(cudaMalloc(&sink, 4));
  std::printf("| shape | tokens | ms | weight MB | GB/s | TFLOP/s | path |\n|---|---|---|---|---|---|---|\n");
  for (const Shape& sh : all) {
    if (std::find(want.begin(), want.end(), sh.name) == want.end()) continue;
    auto hl = gpu_test::MakeLayer(sh.H, sh.I, sh.E, sh.bias, 1234);
    auto dl = kc::CudaMoeLayer::Upload(hl->layer, st);
    if (!dl.ok()) {
      std::fprintf(stderr, "upload: %s\n", std::string(dl.status().message()).c_str());
      return 1;
    }
    hl.reset();  // host copy no longer needed
    std::vector<int> pool(sh.E);
    for (int e = 0; e < sh.E; ++e) pool[e] = e;
    const int trials = [] {
      const char* v = std::getenv("MXSERVE_BENCH_TRIALS");
      return v == nullptr ? 1 : Strict("MXSERVE_BENCH_TRIALS", v, 1, 1000);
    }();
    auto ws_holder = std::make_unique<kc::CudaMoeWorkspace>();
    for (int T : tokens)
    for (int path : paths)
    for (int trial = 0; trial < trials; ++trial) {
      const double avg = double(T) * sh.k / sh.E;
      const int bm = path < 0 ? 0 : kc::internal::PathBm(kc::internal::SpecBig(path));
      if (path >= 0 && (avg > 4.0 * bm || bm > 16.0 * avg)) continue;
      void* spacer = nullptr;
      if (trials > 1) {  // a fresh workspace, placed after the spacer
        ws_holder = std::make_unique<kc::CudaMoeWorkspace>();
        CK(cudaMalloc(&spacer, (size_t(96) << 20) * (trial + 1)));
      }
      kc::CudaMoeWorkspace& ws = *ws_holder;
      if (pin_each) kc::lab::PinPath(path);
      const int pinned = kc::lab::PinnedPath();
      const std::string path_str = (pinned < 0 ? std::string("auto") : kc::internal::SpecName(pinned)) +
                                   (trials > 1 ? "#" + std::to_string(trial) : std::string());
      const char* path_name = path_str.c_str();
      constexpr int kSets = 4;
      std::vector<cudaGraphExec_t> graphs(kSets);
      std::vector<void*> bufs;
      std::vector<int32_t> set_ids;  // [kSets][T][k]: OUT.csv-ids-SHAPE-T.i32
      double bytes = 0;
      float* dout = nullptr;
      CK(cudaMalloc(&dout, sizeof(float) * size_t(T) * sh.H));
      for (int r = 0; r < kSets; ++r) {
        gpu_test::HostBatch b = gpu_test::MakeBatch(T, sh.k, sh.H, pool, 0.0, 99 + r * 7919 + T);
        if (skew > 0) SkewIds(b, sh.E, skew, 99 + r * 7919 + T);
        std::set<int> hit(b.ids.begin(), b.ids.end());
        set_ids.insert(set_ids.end(), b.ids.begin(), b.ids.end());
        bytes += double(hit.size()) * (*dl)->expert_weight_bytes() / kSets;
        float *dx, *dw;
        int32_t* dids;
        CK(cudaMalloc(&dx, 4 * b.x.size()));
        CK(cudaMalloc(&dw, 4 * b.w.size()));
        CK(cudaMalloc(&dids, 4 * b.ids.size()));
        bufs.insert(bufs.end(), {dx, dw, dids});
        CK(cudaMemcpy(dx, b.x.data(), 4 * b.x.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dw, b.w.data(), 4 * b.w.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dids, b.ids.data(), 4 * b.ids.size(), cudaMemcpyHostToDevice));
        kc::CudaMoeBatch db{T, sh.k, dx, dids, dw};
        if (host_ids) db.host_expert_ids = b.ids.data();
        auto s = kc::MoeForwardCuda(**dl, db, dout, ws, st);  // sizes the workspace
        if (!s.ok()) {
          std::fprintf(stderr, "forward: %s\n", std::string(s.message()).c_str());
          return 1;
        }
        CK(cudaStreamSynchronize(st));
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        s = kc::MoeForwardCuda(**dl, db, dout, ws, st);
        CK(cudaStreamEndCapture(st, &g));
        if (!s.ok()) {
          std::fprintf(stderr, "forward (captured): %s\n", std::string(s.message()).c_str());
          return 1;
        }
        CK(cudaGraphInstantiate(&graphs[r], g, 0));
        CK(cudaGraphDestroy(g));
      }
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      if (trial == 0 && path == paths.front()) {
        const std::string ids_path = std::string(argv[1]) + "-ids-" + sh.name + "-" + std::to_string(T) + ".i32";
        if (FILE* f = std::fopen(ids_path.c_str(), "wb")) {
          std::fwrite(set_ids.data(), sizeof(int32_t), set_ids.size(), f);
          std::fclose(f);
        }
      }
      const int reps = T >= 4096 ? 12 : 40;
      for (int w = 0; w < 4; ++w) CK(cudaGraphLaunch(graphs[w % kSets], st));
      std::vector<float> ms;
      std::vector<std::vector<float>> set_ms(kSets);
      for (int i = 0; i < reps; ++i) {
        if (read_flush) {
          bench::ReadAll(flush, flush_bytes, sink, st);
        } else {
          CK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, st));
        }
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(graphs[i % kSets], st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t);
        set_ms[i % kSets].push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      double med = 0;  // the mean of the batches' medians
      for (auto& v : set_ms) {
        std::sort(v.begin(), v.end());
        med += v[v.size() / 2] / kSets;
      }
      const double flops = 6.0 * T * sh.k * double(sh.H) * sh.I;
      const double gbps = bytes / (med * 1e-3) / 1e9, tf = flops / (med * 1e-3) / 1e12;
      std::printf("| %s | %d | %.4f | %.1f | %.0f | %.1f | %s |\n", sh.name.c_str(), T, med, bytes / 1e6, gbps, tf,
                  path_name);
      std::fprintf(csv, "%s,%d,%.5f,%.0f,%.1f,%.2f,%s\n", sh.name.c_str(), T, med, bytes, gbps, tf, path_name);
      if (trials > 1) {
        std::printf("# reps %d: fastest %.4f, median %.4f, slowest %.4f ms\n", reps, ms.front(), ms[ms.size() / 2],
                    ms.back());
      }
      // The last replay's phases: the fused layer's, the paired launch's (fused_probe=stamps,
      // pair_probe=stamps).
      const kc::internal::Variant& variant = kc::internal::CurrentVariant();
      if (variant.fused_probe == 7) std::printf("%s", kc::internal::FusedStampsReport().c_str());
      if (variant.pair_stamps) std::printf("%s", kc::internal::PairStampsReport().c_str());
      std::fflush(stdout);
      std::fflush(csv);
      for (auto g : graphs) cudaGraphExecDestroy(g);
      for (void* p : bufs) cudaFree(p);
      cudaFree(dout);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      if (spacer != nullptr) cudaFree(spacer);
    }
  }
  std::fclose(csv);
  return 0;
}

}  // namespace
}  // namespace mxserve

int main(int argc, char** argv) { return mxserve::Main(argc, argv); }

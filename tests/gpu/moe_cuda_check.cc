// mxserve-gpu-moe-check: the CUDA MoE path against kernels::MoeForwardReference (CPU, float32)
// on fresh random inputs, one PASS/FAIL line per case. Run on a GPU machine (run_all.sh); not a
// ctest (CI has no GPU).
//
// Bound (bf16 activations and bf16 SwiGLU output, fp32 accumulation; weights exact in bf16):
//   rel_l2 = ||out - ref|| / ||ref|| over the checked tokens  <= 1e-2, and
//   every element |out - ref| <= 0.08 * rms(ref of that token), no NaN/Inf.
// Each bf16 rounding is <= 2^-9 relative, so an error of a few 1e-3 is expected; the worst element
// of a token sits several sigma out, most with top-1 routing (no averaging over slots): up to
// 0.051 seen (tiny-k1, T=300). A wrong layout or index gives errors of order 1.
// Also: a second run of the same batch must give identical bits (determinism), the bf16 wire
// (CudaMoeRunner::RunBf16) must give the bits of Run's output rounded on the host, and at most 4
// token-slots the default (fused) path must be within 1e-3 (rel_l2) of the forced unfused decode
// path and give the same bits with its route made on the host (the runner's) as without.
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/lab/lab.h"
#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/moe_cuda_launch.h"      // FusedLaunches
#include "kernels/cuda/moe_cuda_tile_choice.h"  // kAutoTiles
#include "kernels/cuda/moe_cuda_tiny_route.h"  // ParseFusedPin
#include "kernels/moe/moe.h"
#include "tests/gpu/random_moe.h"

namespace mxserve {
namespace {

using gpu_test::HostBatch;
using gpu_test::HostLayer;
namespace kc = kernels::cuda;

struct Shape {
  std::string name;
  int H, I, E, k;
  bool bias;
  int pool;          // experts tokens route to (< E: some experts get none)
  int held;          // which experts the layer holds (kHeldAll, kHeldEven, kHeldMiddle); ids are
                     // routed to held experts only
  std::vector<int> tokens;
  int scale_lo = 118, scale_span = 10;  // > 128 somewhere: the two-multiply decode path
  float x_scale = 1.0f;  // keeps gate_up outputs near the SwiGLU clamp range when scales are big
  double skip = 0.05;    // share of slots with id -1
};

// Shape::held. kHeldEven: the fused kernel reads the held-index table; kHeldMiddle (experts
// [E/4, 3E/4), one range not starting at 0) and kHeldAll: it computes the index (HeldIndex).
constexpr int kHeldAll = 0, kHeldEven = 1, kHeldMiddle = 2;
bool Holds(const Shape& sh, int e) {
  return sh.held == kHeldEven ? e % 2 == 0 : sh.held == kHeldMiddle ? e >= sh.E / 4 && e < 3 * sh.E / 4 : true;
}

int failures = 0;

// The batch through MoeForwardCuda with a forced path, twice (out, out2), from device buffers.
absl::Status RunForced(kc::CudaMoeLayer& dl, HostBatch& b, int T, int k, kc::CudaMoePath path,
                       std::vector<float>& out, std::vector<float>& out2) {
  float *dx, *dout, *dw;
  int32_t* dids;
  cudaMalloc(&dx, 4 * b.x.size());
  cudaMalloc(&dout, 4 * out.size());
  cudaMalloc(&dw, 4 * b.w.size());
  cudaMalloc(&dids, 4 * b.ids.size());
  cudaMemcpy(dx, b.x.data(), 4 * b.x.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dw, b.w.data(), 4 * b.w.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dids, b.ids.data(), 4 * b.ids.size(), cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xFF, 4 * out.size());  // poison: NaN
  kc::CudaMoeWorkspace ws;
  kc::CudaMoeBatch db{T, k, dx, dids, dw};
  absl::Status s = kc::MoeForwardCuda(dl, db, dout, ws, nullptr, path);
  if (s.ok()) s = kc::CudaCheck(cudaDeviceSynchronize(), "forced path");
  cudaMemcpy(out.data(), dout, 4 * out.size(), cudaMemcpyDeviceToHost);
  if (s.ok()) s = kc::MoeForwardCuda(dl, db, dout, ws, nullptr, path);
  if (s.ok()) s = kc::CudaCheck(cudaDeviceSynchronize(), "forced path");
  cudaMemcpy(out2.data(), dout, 4 * out.size(), cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dout);
  cudaFree(dw);
  cudaFree(dids);
  return s;
}

// path kAuto through the runner (host ids: kAuto counts each expert's slots), printed as
// auto:<its choice>; with `pin`, kAuto pinned to that configuration (printed pin:<name>).
void CheckCase(const Shape& sh, HostLayer& hl, kc::CudaMoeLayer& dl, kc::CudaMoeRunner& runner,
               int T, kc::CudaMoePath path, uint64_t seed, const char* pin = nullptr) {
  std::vector<int> pool;
  for (int e = 0; e < sh.E && int(pool.size()) < sh.pool; ++e) {
    if (Holds(sh, e)) pool.push_back(e);
  }
  HostBatch b = gpu_test::MakeBatch(T, sh.k, sh.H, pool, sh.skip, seed);
  for (float& v : b.x) v *= sh.x_scale;
  std::vector<float> out(size_t(T) * sh.H, std::nanf("")), out2(out.size(), std::nanf(""));
  // Runner path (host memory in and out) with the chosen kernel path.
  absl::Status s;
  const uint64_t fused_before = kc::internal::FusedLaunches();
  const int64_t pair_before = kc::internal::KstPairLaunches();
  std::vector<float> unpaired(out.size(), std::nanf(""));
  std::string label;
  const int before = kc::lab::PinnedPath();
  if (path == kc::CudaMoePath::kAuto && pin != nullptr) {
    const int spec = kc::internal::SpecNamed(pin);
    if (spec < 0) {
      std::printf("FAIL  %-13s T=%-6d pin %s names no configuration\n", sh.name.c_str(), T, pin);
      ++failures;
      return;
    }
    kc::lab::PinPath(spec);
  }
  // The call twice, into o and o2: kAuto through the runner, else the forced path.
  auto run = [&](std::vector<float>& o, std::vector<float>& o2) {
    if (path != kc::CudaMoePath::kAuto) return RunForced(dl, b, T, sh.k, path, o, o2);
    absl::Status st = runner.Run(dl, hl.layer, b.batch(), o.data());
    if (st.ok()) st = runner.Run(dl, hl.layer, b.batch(), o2.data());
    return st;
  };
  s = run(out, out2);
  // Both GEMMs in one launch (the 8-row kst default; moe_cuda_decode_kst_pair.cu): the same call
  // in two launches must give the same bits.
  const bool paired = kc::internal::KstPairLaunches() > pair_before;
  if (s.ok() && paired) {
    std::vector<float> unpaired2(out.size());
    kc::internal::SetKstPair(0);
    s = run(unpaired, unpaired2);
    kc::internal::SetKstPair(-1);
  }
  if (path == kc::CudaMoePath::kAuto) {
    kc::lab::PinPath(before);
    const int chose = kc::internal::LastAutoPath();
    label = pin != nullptr ? std::string("pin:") + pin
                           : std::string("auto:") + kc::internal::SpecName(chose);
  }
  const bool pair_same = !paired || std::memcmp(unpaired.data(), out.data(), 4 * out.size()) == 0;
  // At most 4 token-slots kAuto runs the fused one-launch layer: its twin is the unfused decode
  // path (same arithmetic; the fused kernel may sum a unit's K parts in another order, so the bf16
  // rounding of the SwiGLU output can differ by one unit in the last place here and there).
  // (Not when a kernel is pinned: MXSERVE_PLAN's path= or decode=, or `pin`, change one side only.)
  const bool unpinned = before < 0 && kc::lab::Unpinned();
  // ... and the fused path must have run (it falls back to the unfused kernels when its launch
  // fails, which no other check would notice), unless MXSERVE_PLAN has fused=off.
  const bool fused_on = kc::lab::FusedOn();
  const bool want_fused = unpinned && pin == nullptr && fused_on && path == kc::CudaMoePath::kAuto && T * sh.k <= 4;
  const bool fused_ran = !want_fused || kc::internal::FusedLaunches() >= fused_before + 2;
  double twin_rel = 0;
  if (s.ok() && unpinned && pin == nullptr && path == kc::CudaMoePath::kAuto && T * sh.k <= 4) {
    std::vector<float> u(out.size()), u2(out.size());
    s = RunForced(dl, b, T, sh.k, kc::CudaMoePath::kDecode, u, u2);
    double num = 0, den = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      num += (double(out[i]) - u[i]) * (double(out[i]) - u[i]);
      den += double(u[i]) * u[i];
    }
    twin_rel = std::sqrt(num / std::max(den, 1e-300));
  }
  // The runner hands the fused kernel its route made on the host (host ids); from device buffers
  // alone the kernel routes itself: the same pieces, so the same bits.
  bool route_same = true;
  if (s.ok() && want_fused) {
    std::vector<float> u(out.size()), u2(out.size());
    s = RunForced(dl, b, T, sh.k, kc::CudaMoePath::kAuto, u, u2);
    route_same = std::memcmp(u.data(), out.data(), 4 * out.size()) == 0;
  }
  // The bf16 wire (the worker's RunBf16): its bytes must be those of rounding Run's output on the
  // host for the bf16-rounded input, bit for bit; tensors at odd addresses (any alignment).
  bool bf16_ok = true;
  if (s.ok() && path == kc::CudaMoePath::kAuto && pin == nullptr) {
    const size_t n = out.size();
    std::vector<char> xb(2 * n + 1), ob(2 * n + 1);
    std::vector<float> xr(n), of(n);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = FloatToBf16(b.x[i]);
      std::memcpy(xb.data() + 1 + 2 * i, &h, 2);
      xr[i] = Bf16ToFloat(h);
    }
    kernels::MoeBatch rb = b.batch();
    rb.x = xr.data();
    s = runner.Run(dl, hl.layer, rb, of.data());
    if (s.ok()) s = runner.RunBf16(dl, hl.layer, b.batch(), xb.data() + 1, ob.data() + 1);
    for (size_t i = 0; s.ok() && i < n && bf16_ok; ++i) {
      const uint16_t want = FloatToBf16(of[i]);
      bf16_ok = std::memcmp(ob.data() + 1 + 2 * i, &want, 2) == 0;
    }
  }
  const char* pname = path == kc::CudaMoePath::kAuto ? label.c_str() : path == kc::CudaMoePath::kDecode ? "decode"
                      : path == kc::CudaMoePath::kDecode16 ? "decode16" : path == kc::CudaMoePath::kMid ? "mid"
                      : path == kc::CudaMoePath::kWgmma ? "wgmma" : "prefill";
  if (!s.ok()) {
    std::printf("FAIL  %-14s T=%-6d k=%-2d path=%-14s error: %s\n", sh.name.c_str(), T, sh.k, pname,
                std::string(s.message()).c_str());
    ++failures;
    return;
  }
  const bool same = std::memcmp(out.data(), out2.data(), 4 * out.size()) == 0;
  // Reference on a sample of tokens (all when few), spread over the batch, in parallel.
  std::vector<int> sample;
  const int want = std::min(T, 32);
  for (int i = 0; i < want; ++i) sample.push_back(int((int64_t(i) * T) / want));
  std::vector<float> ref(size_t(sample.size()) * sh.H);
  std::vector<absl::Status> st(sample.size());
  gpu_test::ParallelFor(sample.size(), [&](size_t i) {
    const int t = sample[i];
    kernels::MoeBatch one{1, sh.k, b.x.data() + size_t(t) * sh.H, b.ids.data() + size_t(t) * sh.k,
                          b.w.data() + size_t(t) * sh.k};
    st[i] = kernels::MoeForwardReference(hl.layer, one, ref.data() + i * sh.H);
  });
  for (auto& x : st) {
    if (!x.ok()) {
      std::printf("FAIL  %-14s T=%-6d reference error: %s\n", sh.name.c_str(), T, std::string(x.message()).c_str());
      ++failures;
      return;
    }
  }
  double num = 0, den = 0, worst = 0;
  bool finite = true;
  for (size_t i = 0; i < sample.size(); ++i) {
    const float* o = out.data() + size_t(sample[i]) * sh.H;
    const float* r = ref.data() + i * sh.H;
    double ss = 0;
    for (int h = 0; h < sh.H; ++h) ss += double(r[h]) * r[h];
    const double rms = std::sqrt(ss / sh.H) + 1e-30;
    for (int h = 0; h < sh.H; ++h) {
      if (!std::isfinite(o[h])) finite = false;
      const double d = double(o[h]) - r[h];
      num += d * d;
      den += double(r[h]) * r[h];
      worst = std::max(worst, std::fabs(d) / rms);
    }
  }
  // Tokens not sampled must still be written (poisoned NaN before a forced-path run).
  for (float v : out) if (!std::isfinite(v)) finite = false;
  const double rel = std::sqrt(num / std::max(den, 1e-300));
  const bool twin_ok = twin_rel <= 1e-3;
  const bool pass = finite && same && twin_ok && fused_ran && route_same && bf16_ok && pair_same && rel <= 1e-2 &&
                    worst <= 0.08;
  if (!pass) ++failures;
  std::printf("%s  %-14s T=%-6d k=%-2d path=%-14s checked=%-3zu rel_l2=%.2e max_err/rms=%.2e %s%s%s%s%s%s%s\n",
              pass ? "PASS" : "FAIL", sh.name.c_str(), T, sh.k, pname, sample.size(), rel, worst,
              same ? "deterministic" : "NOT-DETERMINISTIC", finite ? "" : " NON-FINITE",
              twin_ok ? "" : " FAR-FROM-THE-UNFUSED-PATH", fused_ran ? "" : " FUSED-NOT-LAUNCHED",
              route_same ? "" : " HOST-ROUTE-DIFFERS", bf16_ok ? "" : " BF16-WIRE-DIFFERS",
              !paired ? "" : pair_same ? " paired" : " PAIRED-DIFFERS");
  std::fflush(stdout);
}

int Main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  std::vector<Shape> shapes = {
      // The token counts span kAuto's range (slots per held expert from 1 to 1024: decode at 8,
      // 16 and 24 rows, then wgmma at 32 ... 256). Which configuration it takes follows each
      // batch's slot counts (printed as auto:<path>); every candidate is also checked pinned.
      {"tiny-pad", 96, 160, 8, 2, true, 6, false, {1, 2, 3, 17, 92, 105, 129}},
      {"tiny-k1", 256, 128, 16, 1, true, 16, false, {1, 3, 4, 5, 300}},
      // Many skipped slots at one token (the fused path's held-slot mask); at 2100 tokens (past
      // kSmallPairs: the per-token routing) about 2.5 % of the tokens have no slot at all.
      {"tiny-skip", 128, 96, 8, 4, true, 8, false, {1, 1, 1, 1, 2100}, 118, 10, 1.0f, 0.4},
      {"half-held", 256, 320, 64, 6, false, 40, true, {2, 77, 1031, 1500}},  // 1500: past kSmallPairs
      // Scale bytes up to 135 (weights up to 6 * 2^8) with x scaled by 2^-8: with x ~ N(0, 1)
      // the gate/up pre-activations would be ~1e4, far past the clamp at 7, where the bf16
      // rounding of x (~1e4 * 2^-9 absolute) decides which side of the clamp a value lands.
      {"big-scales", 2880, 2880, 16, 4, true, 16, false, {1, 40, 300}, 112, 24, 1.0f / 256},
      // At most 4 token-slots (the fused one-launch layer) with more than one token: 1-4 tokens at
      // top-1 and -2, many skipped slots, and (pool 2) several tokens on one expert.
      {"fused-k2", 1024, 1024, 16, 2, true, 16, false, {1, 1, 2, 2, 2}, 118, 10, 1.0f, 0.3},
      {"fused-dup", 1024, 1536, 16, 1, true, 2, false, {2, 3, 4, 4}, 118, 10, 1.0f, 0.2},
      {"fused-k1", 2880, 2880, 32, 1, true, 32, false, {1, 2, 3, 4}},
      // The fused layer with part of the experts held: every other one (the held-index table),
      // and experts 8-23 of 32 (one range: held index = id - 8, no table read).
      {"fused-even", 1024, 1024, 32, 4, true, 16, kHeldEven, {1, 1, 1}},
      {"fused-range", 1024, 1024, 32, 4, true, 16, kHeldMiddle, {1, 1, 1}},
      {"gpt-oss-20b", 2880, 2880, 32, 4, true, 32, false, {1, 2, 7, 64, 200, 333, 400, 750, 1024, 1600, 4097}},
      // 176, 256 and 96 tokens: 4 to 7 slots per expert, where kAuto takes the paired 8-row launch
      // over a two-height mix (AutoTile::paired_ps).
      {"gpt-oss-120b", 2880, 2880, 128, 4, true, 100, false, {1, 16, 176, 256, 2049, 16384}},
      {"kimi-k2-like", 7168, 2048, 384, 8, false, 384, false, {1, 64, 256, 1000, 16384}},
      {"k3-latent", 3584, 3072, 256, 16, false, 256, false, {1, 5, 96, 300, 16384}},
  };
  // The one kernel override, as the bench's (kernels/cuda/lab/README.md).
  const char* plan_env = std::getenv("MXSERVE_PLAN");
  if (absl::Status ps = kc::lab::ApplyPlanOption(plan_env == nullptr ? "" : plan_env); !ps.ok()) {
    std::printf("FAIL  %s\n", std::string(ps.message()).c_str());
    return 1;
  }
  auto runner_or = kc::CudaMoeRunner::Create(0);
  if (!runner_or.ok()) {
    std::printf("FAIL  no CUDA device: %s\n", std::string(runner_or.status().message()).c_str());
    return 1;
  }
  auto& runner = **runner_or;
  uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("seed %llu\n", (unsigned long long)seed);
  for (const Shape& sh : shapes) {
    if (!only.empty() && only != sh.name) continue;
    std::vector<bool> held;
    if (sh.held != kHeldAll) for (int e = 0; e < sh.E; ++e) held.push_back(Holds(sh, e));
    const auto t0 = std::chrono::steady_clock::now();
    auto hl = gpu_test::MakeLayer(sh.H, sh.I, sh.E, sh.bias, seed++, held, sh.scale_lo, sh.scale_span);
    auto dl_or = kc::CudaMoeLayer::Upload(hl->layer, runner.stream());
    if (!dl_or.ok()) {
      std::printf("FAIL  %s upload: %s\n", sh.name.c_str(), std::string(dl_or.status().message()).c_str());
      ++failures;
      continue;
    }
    const double up_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("# %s: H=%d I=%d E=%d (held %d) k=%d bias=%d, %.2f GB on device, made+uploaded in %.1f s\n",
                sh.name.c_str(), sh.H, sh.I, sh.E, (*dl_or)->num_held(), sh.k, sh.bias,
                (*dl_or)->device_bytes() / 1e9, up_s);
    // kAuto's choice follows each batch's slot counts, so which configurations it takes varies
    // from run to run: each of its candidates is also checked pinned, on two shapes.
    if (sh.name == "tiny-pad" || sh.name == "gpt-oss-20b") {
      const int T = sh.name == "tiny-pad" ? 105 : 400;
      for (const kc::internal::AutoTile& t : kc::internal::kAutoTiles) {
        CheckCase(sh, *hl, **dl_or, runner, T, kc::CudaMoePath::kAuto, seed++, t.path);
      }
    }
    // Two tile heights (moe_cuda_tile_choice.h: SplitTiles), pinned: both families, remainders
    // cut small or taken by one more big tile; at 35-50 slots per expert the 256-row mix has no
    // big tile at all, and at one token (tiny-k1) none of them has.
    if (sh.name == "tiny-pad" || sh.name == "gpt-oss-20b" || sh.name == "tiny-k1") {
      const int T = sh.name == "tiny-pad" ? 105 : sh.name == "tiny-k1" ? 1 : 400;
      for (const char* mix : {"decode16+decode", "decode24+decode16", "decode24+decode", "wgmma48+wgmma32",
                              "wgmma+wgmma32", "wgmma192+wgmma96", "wgmma256+wgmma32"}) {
        CheckCase(sh, *hl, **dl_or, runner, T, kc::CudaMoePath::kAuto, seed++, mix);
      }
    }
    for (int T : sh.tokens) {
      CheckCase(sh, *hl, **dl_or, runner, T, kc::CudaMoePath::kAuto, seed++);
      CheckCase(sh, *hl, **dl_or, runner, T, kc::CudaMoePath::kWgmma, seed++);  // every count
      if (T <= 1031) {  // every kernel configuration on the small and mid counts
        CheckCase(sh, *hl, **dl_or, runner, T, kc::CudaMoePath::kDecode, seed++);
        CheckCase(sh, *hl, **dl_or, runner, T, kc::CudaMoePath::kDecode16, seed++);
        CheckCase(sh, *hl, **dl_or, runner, T, kc::CudaMoePath::kPrefill, seed++);
        CheckCase(sh, *hl, **dl_or, runner, T, kc::CudaMoePath::kMid, seed++);
      }
    }
  }
  std::printf("%s: %d failure(s)\n", failures == 0 ? "ALL PASS" : "FAILURES", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace mxserve

int main(int argc, char** argv) { return mxserve::Main(argc, argv); }

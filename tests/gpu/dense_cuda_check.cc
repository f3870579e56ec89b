// mxserve-gpu-dense-check [small]: the dense step's CUDA kernels (kernels/cuda/dense) against
// their CPU twins (kernels/dense/dense_ref.h) on fresh seeded random inputs, one PASS/FAIL line
// per case (`PASS name shape max_err`); then, without `small`, an informational timing table of
// PagedAttention. Run on a GPU machine (run_all.sh dense); not a ctest (CI has no GPU).
//
// Bounds (err is the largest over the case's outputs):
//   EmbedRows, AddResidual, AddBias, RouterTopK ids: equal bits (err 0).
//   RmsNorm fp32: |gpu - ref| <= 4e-7 |ref| (the row's sum of squares is in double on both sides,
//     summed in another order; it rounds to the same float var nearly always). RmsNorm bf16,
//     QkvRopeStore's K and V: within 1 bf16 ulp of the twin's bf16.
//   QkvRopeStore q: |gpu - ref| <= 1e-6 * (largest |value| of that head) (device double cos/sin
//     against glibc's, each within an ulp or two of the truth before rounding to float).
//   RouterTopK weights: |gpu - ref| <= 2e-6 (expf against std::exp).
//   PagedAttention (bf16 out; the twin run on the GPU's own q and cache): |gpu - ref| <= 1 bf16
//     ulp of max(|gpu|, |ref|) + 1e-5 * max |V| (fp32 sums in another order: online softmax,
//     splits); err is reported in units of that bound.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/dense/dense_cuda.h"
#include "kernels/dense/dense_ref.h"
#include "tests/gpu/dense_layout.h"

namespace mxserve {
namespace {

namespace dc = kernels::cuda::dense;
namespace dr = kernels::dense_ref;
using gpu_test::CudaOk;
using gpu_test::Layout;
using gpu_test::SeqSpec;
using gpu_test::ToDevice;
using gpu_test::ToHost;

int failures = 0;
std::mt19937 rng(20260607);

void Report(bool ok, const std::string& name, const std::string& shape, double err) {
  std::printf("%s %s %s max_err=%.3g\n", ok ? "PASS" : "FAIL", name.c_str(), shape.c_str(), err);
  if (!ok) ++failures;
}

std::vector<float> RandomFloats(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<uint16_t> RandomBf16(size_t n, float lo, float hi) {
  std::vector<uint16_t> v(n);
  std::uniform_real_distribution<float> u(lo, hi);
  for (uint16_t& b : v) b = FloatToBf16(u(rng));
  return v;
}

float Bf16Ulp(float x) {
  x = std::fabs(x);
  if (x < 1e-30f) return 0.0f;
  return std::ldexp(1.0f, std::ilogb(x) - 7);
}

// Largest |gpu - ref| in units of 1 bf16 ulp of the larger (plus `abs_slack`): <= 1 passes.
double Bf16Err(const std::vector<uint16_t>& gpu, const std::vector<uint16_t>& ref, float abs_slack) {
  double worst = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const float g = Bf16ToFloat(gpu[i]), r = Bf16ToFloat(ref[i]);
    if (std::isnan(g) != std::isnan(r)) return INFINITY;
    if (std::isnan(g)) continue;
    const float tol = Bf16Ulp(std::max(std::fabs(g), std::fabs(r))) + abs_slack;
    const double d = std::fabs(g - r);
    worst = std::max(worst, d == 0 ? 0.0 : (tol > 0 ? d / tol : INFINITY));
  }
  return worst;
}

std::string Dims(std::initializer_list<long> v) {
  std::string s;
  for (long x : v) s += (s.empty() ? "" : "x") + std::to_string(x);
  return s;
}

void CheckSync(const char* what) { CudaOk(cudaDeviceSynchronize(), what); CudaOk(cudaGetLastError(), what); }

void CheckEmbed(int V, int H, int T) {
  const auto table = RandomBf16(static_cast<size_t>(V) * H, -3, 3);
  std::vector<int32_t> ids(T);
  for (int32_t& i : ids) i = static_cast<int32_t>(rng() % V);
  std::vector<float> ref(static_cast<size_t>(T) * H);
  dr::EmbedRows(table.data(), ids.data(), T, H, ref.data());
  uint16_t* dt = ToDevice(table);
  int32_t* di = ToDevice(ids);
  float* dout = ToDevice(std::vector<float>(ref.size()));
  dc::EmbedRows(dt, di, T, H, dout, nullptr);
  CheckSync("EmbedRows");
  const auto got = ToHost(dout, ref.size());
  Report(std::memcmp(got.data(), ref.data(), 4 * ref.size()) == 0, "embed_rows", Dims({V, H, T}), 0);
  cudaFree(dt); cudaFree(di); cudaFree(dout);
}

void CheckRmsNorm(int rows_in, int H, int R, bool gather, bool want32, bool want16) {
  const auto x = RandomFloats(static_cast<size_t>(rows_in) * H, -4, 4);
  const auto w = RandomFloats(H, 0.5f, 1.5f);
  std::vector<int32_t> rows(R);
  for (int r = 0; r < R; ++r) rows[r] = gather ? static_cast<int32_t>(rng() % rows_in) : r;
  const float eps = 1e-5f;
  std::vector<float> ref32(static_cast<size_t>(R) * H);
  std::vector<uint16_t> ref16(ref32.size());
  dr::RmsNorm(x.data(), gather ? rows.data() : nullptr, R, H, w.data(), eps, ref32.data(), ref16.data());
  float* dx = ToDevice(x);
  float* dw = ToDevice(w);
  int32_t* drows = ToDevice(rows);
  float* d32 = ToDevice(std::vector<float>(ref32.size(), NAN));
  uint16_t* d16 = ToDevice(std::vector<uint16_t>(ref16.size(), 0x7fc0));
  dc::RmsNorm(dx, gather ? drows : nullptr, R, H, dw, eps, want32 ? d32 : nullptr,
              want16 ? d16 : nullptr, nullptr);
  CheckSync("RmsNorm");
  double err32 = 0, err16 = 0;
  if (want32) {
    const auto g = ToHost(d32, ref32.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const double e = std::fabs(g[i] - ref32[i]) / (4e-7 * std::fabs(ref32[i]) + 1e-30);
      err32 = std::max(err32, std::isnan(g[i]) ? INFINITY : e);
    }
  }
  if (want16) err16 = Bf16Err(ToHost(d16, ref16.size()), ref16, 0);
  const std::string shape = Dims({R, H}) + (gather ? " gather" : "") + (want32 ? " f32" : "") +
                            (want16 ? " bf16" : "");
  Report(err32 <= 1 && err16 <= 1, "rms_norm", shape, std::max(err32, err16));
  cudaFree(dx); cudaFree(dw); cudaFree(drows); cudaFree(d32); cudaFree(d16);
}

void CheckAdds(int T, int N, bool bias) {
  auto h = RandomFloats(static_cast<size_t>(T) * N, -2, 2);
  const auto a = RandomFloats(h.size(), -2, 2), b = RandomFloats(N, -1, 1);
  float* dh = ToDevice(h);
  float* da = ToDevice(a);
  float* db = ToDevice(b);
  dc::AddResidual(dh, da, bias ? db : nullptr, T, N, nullptr);
  dr::AddResidual(h.data(), a.data(), bias ? b.data() : nullptr, T, N);
  CheckSync("AddResidual");
  auto g = ToHost(dh, h.size());
  Report(g == h, "add_residual", Dims({T, N}) + (bias ? " bias" : ""), 0);
  dc::AddBias(dh, db, T, N, nullptr);
  dr::AddBias(h.data(), b.data(), T, N);
  CheckSync("AddBias");
  g = ToHost(dh, h.size());
  Report(g == h, "add_bias", Dims({T, N}), 0);
  cudaFree(dh); cudaFree(da); cudaFree(db);
}

void CheckRouter(int T, int E, int K) {
  std::vector<float> z(static_cast<size_t>(T) * E);
  for (float& v : z) v = static_cast<float>(static_cast<int>(rng() % 17) - 8) / 4;  // many ties
  std::vector<int32_t> ref_ids(static_cast<size_t>(T) * K);
  std::vector<float> ref_w(ref_ids.size());
  dr::RouterTopK(z.data(), T, E, K, ref_ids.data(), ref_w.data());
  float* dz = ToDevice(z);
  int32_t* dids = ToDevice(std::vector<int32_t>(ref_ids.size(), -7));
  float* dw = ToDevice(std::vector<float>(ref_w.size(), NAN));
  dc::RouterTopK(dz, T, E, K, dids, dw, nullptr);
  CheckSync("RouterTopK");
  const auto ids = ToHost(dids, ref_ids.size());
  const auto w = ToHost(dw, ref_w.size());
  double err = 0;
  for (size_t i = 0; i < w.size(); ++i) err = std::max<double>(err, std::isnan(w[i]) ? INFINITY : std::fabs(w[i] - ref_w[i]));
  Report(ids == ref_ids && err <= 2e-6, "router_topk", Dims({T, E, K}), err);
  cudaFree(dz); cudaFree(dids); cudaFree(dw);
}

struct AttnShape {
  int nq = 64, nkv = 8, d = 64, block_size = 16;
};

// One step through QkvRopeStore and PagedAttention on both sides: the prefix of every sequence
// is random bf16 in the cache; the twin's attention runs on the GPU's q and cache after the
// store (so each kernel is judged on its own inputs).
void CheckAttention(const std::string& name, const AttnShape& sh, const std::vector<SeqSpec>& seqs,
                    int window, bool sinks, int table_slack = 3) {
  Layout L = gpu_test::MakeLayout(seqs, sh.block_size, rng, table_slack);
  const int T = L.tokens(), nq = sh.nq, nkv = sh.nkv, d = sh.d;
  const int width = (nq + 2 * nkv) * d;
  const size_t cache_elems = static_cast<size_t>(L.num_blocks) * sh.block_size * nkv * d;
  auto k = RandomBf16(cache_elems, -2, 2), v = RandomBf16(cache_elems, -2, 2);
  const auto qkv = RandomFloats(static_cast<size_t>(T) * width, -2, 2);
  const auto bias = RandomFloats(width, -0.5f, 0.5f);
  const auto sink = RandomFloats(nq, -1, 3);
  std::vector<float> inv_freq(d / 2);
  for (int i = 0; i < d / 2; ++i) inv_freq[i] = static_cast<float>(std::pow(150000.0, -2.0 * i / d));
  const float conc = 1.3466f, scale = 1.0f / std::sqrt(static_cast<float>(d));

  uint16_t* dk = ToDevice(k);
  uint16_t* dv = ToDevice(v);
  float* dqkv = ToDevice(qkv);
  float* dbias = ToDevice(bias);
  float* dsink = ToDevice(sink);
  float* dfreq = ToDevice(inv_freq);
  float* dq = ToDevice(std::vector<float>(static_cast<size_t>(T) * nq * d, NAN));
  uint16_t* dout = ToDevice(std::vector<uint16_t>(static_cast<size_t>(T) * nq * d, 0x7fc0));
  dc::TokenLayout dtl{T, L.d_positions, L.d_token_seq, L.d_block_tables, L.max_blocks, L.block_size};
  dr::TokenLayout htl{T, L.positions.data(), L.token_seq.data(), L.block_tables.data(), L.max_blocks,
                      L.block_size};
  dc::QkvRopeStore(dqkv, dbias, nq, dc::Rope{dfreq, conc}, dtl, dc::KvLayer{dk, dv, nkv, d}, dq, nullptr);
  std::vector<float> ref_q(static_cast<size_t>(T) * nq * d);
  dr::QkvRopeStore(qkv.data(), bias.data(), nq, dr::Rope{inv_freq.data(), conc}, htl,
                   dr::KvLayer{k.data(), v.data(), nkv, d}, ref_q.data());
  CheckSync("QkvRopeStore");
  const auto q = ToHost(dq, ref_q.size());
  auto gk = ToHost(dk, cache_elems), gv = ToHost(dv, cache_elems);
  double qerr = 0;
  for (size_t h = 0; h < ref_q.size() / d; ++h) {
    float mx = 0;
    for (int e = 0; e < d; ++e) mx = std::max(mx, std::fabs(ref_q[h * d + e]));
    for (int e = 0; e < d; ++e) {
      const float g = q[h * d + e];
      qerr = std::max<double>(qerr, std::isnan(g) ? INFINITY : std::fabs(g - ref_q[h * d + e]) / (1e-6f * mx + 1e-30f));
    }
  }
  const double kverr = std::max(Bf16Err(gk, k, 0), Bf16Err(gv, v, 0));
  const std::string shape = Dims({T, nq, nkv, d}) + " bs" + std::to_string(sh.block_size) +
                            " seqs" + std::to_string(seqs.size()) + " win" + std::to_string(window) +
                            (sinks ? " sinks" : "");
  Report(qerr <= 1 && kverr <= 1, "qkv_rope_store " + name, shape, std::max(qerr, kverr));

  dc::PagedAttention(dq, nq, dtl, dc::KvLayer{dk, dv, nkv, d}, sinks ? dsink : nullptr, window, scale,
                     dout, nullptr);
  std::vector<uint16_t> ref(static_cast<size_t>(T) * nq * d);
  dr::PagedAttention(q.data(), nq, htl, dr::KvLayer{gk.data(), gv.data(), nkv, d},
                     sinks ? sink.data() : nullptr, window, scale, ref.data());
  CheckSync("PagedAttention");
  float vmax = 0;
  for (uint16_t b : gv) vmax = std::max(vmax, std::fabs(Bf16ToFloat(b)));
  const double err = Bf16Err(ToHost(dout, ref.size()), ref, 1e-5f * vmax);
  Report(err <= 1, "attention " + name, shape, err);
  for (void* p : {static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(dqkv),
                  static_cast<void*>(dbias), static_cast<void*>(dsink), static_cast<void*>(dfreq),
                  static_cast<void*>(dq), static_cast<void*>(dout)}) {
    cudaFree(p);
  }
  L.Free();
}

// A long decode through stream capture: on a fresh stream the first capture cannot allocate the
// split workspace (no split), an eager call then allocates it, and a second capture splits.
void CheckGraphCapture() {
  const AttnShape sh;
  Layout L = gpu_test::MakeLayout({{8191, 1}}, sh.block_size, rng);
  const int T = L.tokens();
  const size_t cache_elems = static_cast<size_t>(L.num_blocks) * sh.block_size * sh.nkv * sh.d;
  const auto k = RandomBf16(cache_elems, -2, 2), v = RandomBf16(cache_elems, -2, 2);
  const auto q = RandomFloats(static_cast<size_t>(T) * sh.nq * sh.d, -2, 2);
  const auto sink = RandomFloats(sh.nq, -1, 3);
  std::vector<uint16_t> ref(q.size());
  dr::TokenLayout htl{T, L.positions.data(), L.token_seq.data(), L.block_tables.data(), L.max_blocks,
                      L.block_size};
  const float scale = 0.125f;
  dr::PagedAttention(q.data(), sh.nq, htl, dr::KvLayer{const_cast<uint16_t*>(k.data()),
                     const_cast<uint16_t*>(v.data()), sh.nkv, sh.d}, sink.data(), 0, scale, ref.data());
  uint16_t* dk = ToDevice(k);
  uint16_t* dv = ToDevice(v);
  float* dq = ToDevice(q);
  float* dsink = ToDevice(sink);
  uint16_t* dout = ToDevice(std::vector<uint16_t>(ref.size()));
  dc::TokenLayout dtl{T, L.d_positions, L.d_token_seq, L.d_block_tables, L.max_blocks, L.block_size};
  cudaStream_t s;
  CudaOk(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  auto run = [&] { dc::PagedAttention(dq, sh.nq, dtl, dc::KvLayer{dk, dv, sh.nkv, sh.d}, dsink, 0, scale, dout, s); };
  auto captured = [&](const char* name) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CudaOk(cudaMemsetAsync(dout, 0xff, ref.size() * 2, s), "memset");
    CudaOk(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture");
    run();
    CudaOk(cudaStreamEndCapture(s, &g), name);
    CudaOk(cudaGraphInstantiate(&ge, g, 0), "instantiate");
    CudaOk(cudaGraphLaunch(ge, s), "graph launch");
    CudaOk(cudaStreamSynchronize(s), name);
    const double err = Bf16Err(ToHost(dout, ref.size()), ref, 2e-5f);
    Report(err <= 1, std::string("attention ") + name, "1x64x8x64 ctx8192 sinks", err);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
  };
  captured("graph-before-workspace");
  CudaOk(cudaMemsetAsync(dout, 0xff, ref.size() * 2, s), "memset");
  run();
  CudaOk(cudaStreamSynchronize(s), "eager");
  CudaOk(cudaGetLastError(), "eager");
  const double err = Bf16Err(ToHost(dout, ref.size()), ref, 2e-5f);
  Report(err <= 1, "attention eager-side-stream", "1x64x8x64 ctx8192 sinks", err);
  captured("graph-split");
  cudaStreamDestroy(s);
  for (void* p : {static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(dq),
                  static_cast<void*>(dsink), static_cast<void*>(dout)}) {
    cudaFree(p);
  }
  L.Free();
}

// Wrong arguments leave cudaErrorInvalidConfiguration for cudaGetLastError and write nothing.
void CheckBadArguments() {
  cudaGetLastError();
  dc::RouterTopK(nullptr, 4, 2000, 4, nullptr, nullptr, nullptr);  // more than 1024 experts
  const cudaError_t e1 = cudaGetLastError();
  dc::PagedAttention(nullptr, 6, dc::TokenLayout{1, nullptr, nullptr, nullptr, 1, 16},
                     dc::KvLayer{nullptr, nullptr, 4, 64}, nullptr, 0, 1.0f, nullptr, nullptr);  // 6 % 4
  const cudaError_t e2 = cudaGetLastError();
  Report(e1 == cudaErrorInvalidConfiguration && e2 == cudaErrorInvalidConfiguration,
         "bad_arguments", "E2000 nq6/nkv4", 0);
}

// PagedAttention's time per call (cudaEvents, mean of 20 after 3 warm-ups), gpt-oss shape with
// sinks; the cache is a constant pattern (timing only). KV GB/s: the K and V bytes each token's
// visible keys span, over the time (prefill reads them once per token from L2 or DRAM).
void TimeAttention(const char* label, const std::vector<SeqSpec>& seqs, int window) {
  const AttnShape sh;
  Layout L = gpu_test::MakeLayout(seqs, sh.block_size, rng);
  const int T = L.tokens();
  const size_t cache_elems = static_cast<size_t>(L.num_blocks) * sh.block_size * sh.nkv * sh.d;
  uint16_t *dk, *dv, *dout;
  float *dq, *dsink;
  CudaOk(cudaMalloc(&dk, cache_elems * 2), "malloc k");
  CudaOk(cudaMalloc(&dv, cache_elems * 2), "malloc v");
  CudaOk(cudaMemset(dk, 0x3c, cache_elems * 2), "memset");
  CudaOk(cudaMemset(dv, 0x3c, cache_elems * 2), "memset");
  dq = ToDevice(RandomFloats(static_cast<size_t>(T) * sh.nq * sh.d, -1, 1));
  dsink = ToDevice(RandomFloats(sh.nq, -1, 1));
  CudaOk(cudaMalloc(&dout, static_cast<size_t>(T) * sh.nq * sh.d * 2), "malloc out");
  dc::TokenLayout dtl{T, L.d_positions, L.d_token_seq, L.d_block_tables, L.max_blocks, L.block_size};
  auto run = [&] { dc::PagedAttention(dq, sh.nq, dtl, dc::KvLayer{dk, dv, sh.nkv, sh.d}, dsink, window, 0.125f, dout, nullptr); };
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int i = 0; i < 20; ++i) run();
  cudaEventRecord(b);
  CheckSync("timing");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  const double us = 1000.0 * ms / 20;
  double keys = 0;
  for (int p : L.positions) keys += window > 0 ? std::min(p + 1, window) : p + 1;
  const double bytes = keys * sh.nkv * sh.d * 2 * 2;
  std::printf("| %-22s | %6d | %8.0f | %10.1f | %8.0f |\n", label, T, keys / T, us, bytes / us / 1e3);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  for (void* p : {static_cast<void*>(dk), static_cast<void*>(dv), static_cast<void*>(dq),
                  static_cast<void*>(dsink), static_cast<void*>(dout)}) {
    cudaFree(p);
  }
  L.Free();
}

void RunAll(bool small) {
  CheckEmbed(17, 64, 5);
  CheckRmsNorm(5, 64, 5, false, true, false);
  CheckRmsNorm(50, 2880, 37, true, true, true);
  CheckAdds(3, 70, true);
  CheckRouter(9, 128, 4);
  CheckRouter(3, 7, 7);
  const AttnShape oss;
  CheckAttention("mixed", oss, {{0, 20}, {300, 1}, {20, 9}, {130, 3}}, 0, true);
  CheckAttention("decode-1024", oss, {{1023, 1}}, 0, true);
  CheckAttention("decode-1024", oss, {{1023, 1}}, 128, false);
  CheckBadArguments();
  if (small) return;
  CheckEmbed(1000, 2880, 50);
  CheckRmsNorm(9, 2880, 9, false, false, true);
  CheckRmsNorm(3, 8192, 3, false, true, true);
  CheckAdds(33, 2880, true);
  CheckAdds(33, 2880, false);
  CheckRouter(300, 128, 4);
  CheckRouter(64, 32, 4);
  CheckRouter(40, 1024, 32);
  CheckRouter(5, 1, 1);
  for (bool sinks : {false, true}) {
    for (int window : {0, 128}) {
      CheckAttention("prefill-prefix", oss, {{100, 37}}, window, sinks);
      CheckAttention("mixed", oss, {{0, 50}, {300, 1}, {1000, 1}, {20, 64}, {130, 17}}, window, sinks);
      CheckAttention("decode-4096", oss, {{4095, 1}}, window, sinks);
      CheckAttention("decode-8192", oss, {{8191, 1}}, window, sinks);
      CheckAttention("decode-batch", oss, {{4000, 1}, {8191, 1}, {17, 1}, {600, 1}}, window, sinks);
    }
  }
  CheckAttention("prefill-300", oss, {{0, 300}}, 0, true);
  CheckAttention("prefill-300", oss, {{0, 300}}, 128, true);
  CheckAttention("short-wide-table", oss, {{17, 1}}, 0, true, 500);
  CheckAttention("block-size-1", AttnShape{64, 8, 64, 1}, {{40, 3}, {0, 5}}, 0, true);
  for (int window : {0, 64}) {
    CheckAttention("group1-d128", AttnShape{8, 8, 128, 16}, {{0, 40}, {500, 1}, {70, 9}}, window, true);
    CheckAttention("group16-d256", AttnShape{16, 1, 256, 32}, {{0, 40}, {4095, 1}, {70, 9}}, window, true);
    CheckAttention("group3-d32", AttnShape{12, 4, 32, 8}, {{0, 40}, {2000, 1}, {70, 9}}, window, true);
    CheckAttention("group10-d128", AttnShape{40, 4, 128, 16}, {{0, 33}, {3000, 1}}, window, false);
  }
  CheckGraphCapture();

  std::printf("\nPagedAttention, 64 q heads / 8 kv heads of 64, sinks (informational)\n");
  std::printf("| %-22s | %6s | %8s | %10s | %8s |\n", "case", "tokens", "keys/tok", "us/call", "KV GB/s");
  TimeAttention("decode b1 ctx1k", {{1023, 1}}, 0);
  TimeAttention("decode b1 ctx8k", {{8191, 1}}, 0);
  TimeAttention("decode b64 ctx1k", std::vector<SeqSpec>(64, {1023, 1}), 0);
  TimeAttention("decode b64 ctx8k", std::vector<SeqSpec>(64, {8191, 1}), 0);
  TimeAttention("prefill 2k", {{0, 2048}}, 0);
  TimeAttention("prefill 2k window128", {{0, 2048}}, 128);
}

}  // namespace
}  // namespace mxserve

int main(int argc, char** argv) {
  const bool small = argc > 1 && std::strcmp(argv[1], "small") == 0;
  cudaDeviceProp prop{};
  mxserve::gpu_test::CudaOk(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("# %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  mxserve::RunAll(small);
  std::printf("%d FAIL\n", mxserve::failures);
  return mxserve::failures == 0 ? 0 : 1;
}

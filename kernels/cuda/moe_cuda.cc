// Host side of the CUDA MoE path: upload (layout conversion on the device), workspace,
// MoeForwardCuda's launch sequence, and the host-memory runner the worker uses.
#include "kernels/cuda/moe_cuda.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/moe_cuda_gemm_args.h"
#include "kernels/cuda/moe_cuda_launch.h"

namespace mxserve::kernels::cuda {

namespace {

bool IsSticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorUnknown:
      return true;
    default:
      return false;
  }
}

int RoundUp(int v, int m) { return (v + m - 1) / m * m; }

template <typename T>
void FreeDev(T*& p) {
  if (p != nullptr) cudaFree(p);
  p = nullptr;
}

template <typename T>
absl::Status Alloc(T** p, size_t count, const char* what) {
  return CudaCheck(cudaMalloc(reinterpret_cast<void**>(p), std::max<size_t>(1, count) * sizeof(T)), what);
}

}  // namespace

absl::Status CudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  if (IsSticky(e)) {
    std::fprintf(stderr, "mxserve: fatal CUDA error in %s: %s (%s); the context is unusable, exiting\n",
                 what, cudaGetErrorName(e), cudaGetErrorString(e));
    std::fflush(stderr);
    std::_Exit(70);
  }
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// ---- CudaMoeLayer ---------------------------------------------------------------------------

CudaMoeLayer::~CudaMoeLayer() {
  FreeDev(d_local_);
  FreeDev(d_gu_q_);
  FreeDev(d_gu_s_);
  FreeDev(d_gu_b_);
  FreeDev(d_dn_q_);
  FreeDev(d_dn_s_);
  FreeDev(d_dn_b_);
}

size_t CudaMoeLayer::expert_weight_bytes() const {
  const size_t h = hidden_, i = intermediate_;
  return 2 * i * (h / 2 + h / 32) + h * (i / 2 + i / 32);
}

absl::StatusOr<std::unique_ptr<CudaMoeLayer>> CudaMoeLayer::Upload(const MoeLayer& host,
                                                                   cudaStream_t stream) {
  const int H = host.hidden, I = host.intermediate, E = static_cast<int>(host.experts.size());
  if (H <= 0 || I <= 0 || H % 32 != 0 || I % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("CudaMoeLayer: hidden ", H, " / intermediate ", I,
                                                   " must be positive multiples of 32"));
  }
  if (host.activation != MoeActivation::kClampedSwiGlu) {
    return absl::UnimplementedError(absl::StrCat(
        "CudaMoeLayer: expert activation '", MoeActivationName(host.activation),
        "' is not implemented by the CUDA kernels (only swiglu_clamped, gpt-oss's); run these "
        "experts on CPU workers"));
  }
  std::unique_ptr<CudaMoeLayer> L(new CudaMoeLayer());
  L->hidden_ = H;
  L->intermediate_ = I;
  L->num_experts_ = E;
  L->alpha_ = host.swiglu_alpha;
  L->limit_ = host.swiglu_limit;
  L->kp_h_ = RoundUp(H, 64);
  L->kp_i_ = RoundUp(I, 64);
  std::vector<int32_t> local(E, -1);
  std::vector<int> held;
  for (int e = 0; e < E; ++e) {
    if (host.experts[e] == nullptr) continue;
    const ExpertWeights& w = *host.experts[e];
    if (w.gate_up.rows != 2 * I || w.gate_up.cols != H || w.down.rows != H || w.down.cols != I) {
      return absl::InvalidArgumentError(absl::StrCat("CudaMoeLayer: expert ", e, " has shapes gate_up [",
                                                     w.gate_up.rows, ", ", w.gate_up.cols, "], down [",
                                                     w.down.rows, ", ", w.down.cols, "]"));
    }
    local[e] = static_cast<int32_t>(held.size());
    held.push_back(e);
  }
  const int nh = static_cast<int>(held.size());
  L->num_held_ = nh;
  L->held_range_ = nh > 0 && held.back() - held.front() + 1 == nh;
  L->held_lo_ = nh > 0 ? held.front() : 0;
  L->local_ = local;
  const int ch_h = (L->kp_h_ + 127) / 128, ch_i = (L->kp_i_ + 127) / 128;
  const size_t gu_q = size_t(2 * I) * (L->kp_h_ / 2), gu_s = size_t(2 * I / 8) * ch_h * 32;
  const size_t dn_q = size_t(H) * (L->kp_i_ / 2), dn_s = size_t(H / 8) * ch_i * 32;
  absl::Status s;
  auto ok = [&](absl::Status st) { if (s.ok()) s = std::move(st); return s.ok(); };
  ok(Alloc(&L->d_local_, E, "cudaMalloc(local)"));
  ok(Alloc(&L->d_gu_q_, nh * gu_q, "cudaMalloc(gate_up)"));
  ok(Alloc(&L->d_gu_s_, nh * gu_s, "cudaMalloc(gate_up scales)"));
  ok(Alloc(&L->d_gu_b_, size_t(nh) * 2 * I, "cudaMalloc(gate_up bias)"));
  ok(Alloc(&L->d_dn_q_, nh * dn_q, "cudaMalloc(down)"));
  ok(Alloc(&L->d_dn_s_, nh * dn_s, "cudaMalloc(down scales)"));
  ok(Alloc(&L->d_dn_b_, size_t(nh) * H, "cudaMalloc(down bias)"));
  if (!s.ok()) return s;
  L->device_bytes_ = nh * (gu_q + gu_s + dn_q + dn_s) + sizeof(float) * nh * (2 * I + H) + 4 * E;
  ok(CudaCheck(cudaMemcpyAsync(L->d_local_, local.data(), 4 * E, cudaMemcpyHostToDevice, stream), "upload ids"));
  // Staging for one expert's checkpoint bytes (the larger of the two matrices).
  const size_t st_q = std::max(size_t(2 * I) * (H / 2), size_t(H) * (I / 2));
  const size_t st_s = std::max(size_t(2 * I) * (H / 32), size_t(H) * (I / 32));
  uint8_t* d_stage = nullptr;
  ok(Alloc(&d_stage, 2 * (st_q + st_s), "cudaMalloc(staging)"));
  if (!s.ok()) return s;
  uint8_t* sq[2] = {d_stage, d_stage + st_q};
  uint8_t* ss[2] = {d_stage + 2 * st_q, d_stage + 2 * st_q + st_s};
  for (int h = 0; h < nh && s.ok(); ++h) {
    const ExpertWeights& w = *host.experts[held[h]];
    for (const Mxfp4Matrix* m : {&w.gate_up, &w.down}) {
      const size_t n = size_t(m->rows) * (m->cols / 32);
      for (size_t i = 0; i < n && L->small_scales_; ++i) L->small_scales_ = m->scales[i] <= 128;
    }
    const size_t gq = size_t(2 * I) * (H / 2), gs = size_t(2 * I) * (H / 32);
    const size_t dq = size_t(H) * (I / 2), ds = size_t(H) * (I / 32);
    ok(CudaCheck(cudaMemcpyAsync(sq[0], w.gate_up.blocks, gq, cudaMemcpyHostToDevice, stream), "upload gate_up"));
    ok(CudaCheck(cudaMemcpyAsync(ss[0], w.gate_up.scales, gs, cudaMemcpyHostToDevice, stream), "upload gate_up scales"));
    ok(CudaCheck(cudaMemcpyAsync(sq[1], w.down.blocks, dq, cudaMemcpyHostToDevice, stream), "upload down"));
    ok(CudaCheck(cudaMemcpyAsync(ss[1], w.down.scales, ds, cudaMemcpyHostToDevice, stream), "upload down scales"));
    internal::LaunchSwizzle(sq[0], ss[0], L->d_gu_q_ + h * gu_q, L->d_gu_s_ + h * gu_s, 2 * I, H, L->kp_h_, stream);
    internal::LaunchSwizzle(sq[1], ss[1], L->d_dn_q_ + h * dn_q, L->d_dn_s_ + h * dn_s, H, I, L->kp_i_, stream);
    float* gb = L->d_gu_b_ + size_t(h) * 2 * I;
    float* db = L->d_dn_b_ + size_t(h) * H;
    if (w.gate_up_bias) {
      ok(CudaCheck(cudaMemcpyAsync(gb, w.gate_up_bias, 4 * 2 * I, cudaMemcpyHostToDevice, stream), "upload bias"));
      L->has_gu_bias_ = true;
    } else {
      ok(CudaCheck(cudaMemsetAsync(gb, 0, 4 * 2 * I, stream), "zero bias"));
    }
    if (w.down_bias) {
      ok(CudaCheck(cudaMemcpyAsync(db, w.down_bias, 4 * H, cudaMemcpyHostToDevice, stream), "upload bias"));
      L->has_down_bias_ = true;
    } else {
      ok(CudaCheck(cudaMemsetAsync(db, 0, 4 * H, stream), "zero bias"));
    }
    // The staging buffers are reused by the next expert: wait for the swizzle to finish.
    ok(CudaCheck(cudaStreamSynchronize(stream), "upload sync"));
  }
  ok(CudaCheck(cudaGetLastError(), "swizzle launch"));
  cudaFree(d_stage);
  if (!s.ok()) return s;
  return L;
}

// ---- workspace ------------------------------------------------------------------------------

CudaMoeWorkspace::~CudaMoeWorkspace() {
  Free();
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (side_) cudaStreamDestroy(side_);
}

void CudaMoeWorkspace::Free() {
  FreeDev(d_counts_);
  FreeDev(d_tiles_);
  FreeDev(d_sorted_);
  FreeDev(d_a_);
  FreeDev(d_act_);
  FreeDev(d_y_);
  FreeDev(d_sync_);
  FreeDev(d_pair_done_);
  pairs_cap_ = experts_cap_ = kp_h_cap_ = kp_i_cap_ = h_cap_ = tiles_cap_ = 0;
}

absl::Status CudaMoeWorkspace::Reserve(const CudaMoeLayer& layer, int num_tokens, int top_k) {
  const size_t pairs = size_t(std::max(1, num_tokens)) * std::max(1, top_k);
  const size_t nh = std::max(1, layer.num_held());
  const size_t kph = RoundUp(layer.hidden(), 64), kpi = RoundUp(layer.intermediate(), 64);
  const size_t h = layer.hidden();
  // Smallest tile: 8 rows; twice that for two heights (two lists, the second at a host-known
  // offset: LayerAccess::Forward).
  const size_t tiles = 2 * (pairs / 8 + std::min(nh, pairs) + 1);
  if (pairs <= pairs_cap_ && nh <= experts_cap_ && kph <= kp_h_cap_ && kpi <= kp_i_cap_ &&
      h <= h_cap_ && tiles <= tiles_cap_) {
    return absl::OkStatus();
  }
  Free();
  absl::Status s;
  auto ok = [&](absl::Status st) { if (s.ok()) s = std::move(st); };
  ok(Alloc(&d_counts_, 3 * nh + 3, "cudaMalloc(ws meta)"));
  ok(Alloc(&d_tiles_, 3 * tiles, "cudaMalloc(ws tiles)"));
  ok(Alloc(&d_sorted_, pairs, "cudaMalloc(ws sorted)"));
  ok(Alloc(&d_a_, pairs * kph, "cudaMalloc(ws a)"));
  ok(Alloc(&d_act_, pairs * kpi, "cudaMalloc(ws act)"));
  ok(Alloc(&d_y_, pairs * h, "cudaMalloc(ws y)"));
  ok(Alloc(&d_sync_, 1, "cudaMalloc(ws sync)"));
  ok(Alloc(&d_pair_done_, 3 + tiles, "cudaMalloc(ws pair counts)"));
  if (side_ == nullptr) ok(CudaCheck(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreate(ws side)"));
  if (fork_ == nullptr) ok(CudaCheck(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreate(ws fork)"));
  if (join_ == nullptr) ok(CudaCheck(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreate(ws join)"));
  if (s.ok()) ok(CudaCheck(cudaMemset(d_sync_, 0, sizeof(uint32_t)), "cudaMemset(ws sync)"));
  if (s.ok()) ok(CudaCheck(cudaMemset(d_pair_done_, 0, sizeof(int32_t) * (3 + tiles)), "cudaMemset(ws pair counts)"));
  if (!s.ok()) {
    Free();
    return s;
  }
  pairs_cap_ = pairs;
  experts_cap_ = nh;
  kp_h_cap_ = kph;
  kp_i_cap_ = kpi;
  h_cap_ = h;
  tiles_cap_ = tiles;
  return absl::OkStatus();
}

}  // namespace mxserve::kernels::cuda

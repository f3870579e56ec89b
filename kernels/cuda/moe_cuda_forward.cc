// MoeForwardCuda (the launch sequence) and CudaMoeRunner (host memory in and out through pinned
// buffers on the runner's own stream).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/moe_cuda_gemm_args.h"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_plan.h"
#include "kernels/cuda/moe_cuda_tiny_route.h"
#include "kernels/cuda/moe_cuda_variant.h"

namespace mxserve::kernels::cuda {

namespace internal {
namespace {
std::atomic<int> last_auto_path{-1};  // LastAutoPath
}  // namespace

int LastAutoPath() { return last_auto_path.load(std::memory_order_relaxed); }

}  // namespace internal

struct LayerAccess {
  // The call's plan: kAuto's from the batch's shape and the card (each held expert's slot count
  // when the ids are on the host), or the pinned path's.
  static internal::CudaMoePlan Plan(const CudaMoeLayer& L, const CudaMoeBatch& b, int64_t pairs, int nh,
                                    CudaMoePath path) {
    const internal::Variant& v = internal::CurrentVariant();
    internal::CardInfo card;
    card.peak_gbps = internal::Device().peak_gbps;
    card.tensor_maps = internal::WgmmaAvailable();
    card.cc = internal::Device().cc;
    internal::PlanOptions opt;
    opt.mix = v.mix;
    opt.alone_wgmma = v.decode_wgmma;
    opt.paired_cost = v.paired_cost;
    opt.pairing = v.kst_pair != 0 && internal::KstDefault();
    if (path != CudaMoePath::kAuto) {
      const int spec = path == CudaMoePath::kDecode     ? internal::kPathDecode
                       : path == CudaMoePath::kDecode16 ? internal::kPathDecode16
                       : path == CudaMoePath::kMid      ? internal::kPathMid
                       : path == CudaMoePath::kWgmma    ? internal::kPathWgmma
                                                        : internal::kPathPrefill;
      return internal::PlanForSpec(spec, pairs, card, opt, /*may_fuse=*/false);
    }
    if (v.forced_spec >= 0) return internal::PlanForSpec(v.forced_spec, pairs, card, opt, /*may_fuse=*/true);
    internal::MoeShape shape;
    shape.pairs = pairs;
    shape.held = nh;
    shape.expert_bytes = double(L.expert_weight_bytes());
    thread_local std::vector<int32_t> counts;
    if (b.host_expert_ids != nullptr) {
      counts.assign(nh, 0);
      for (int64_t i = 0; i < pairs; ++i) {
        const int32_t id = b.host_expert_ids[i];
        if (id >= 0 && id < L.num_experts_ && L.local_[id] >= 0) ++counts[L.local_[id]];
      }
      shape.counts = counts.data();
    }
    const internal::CudaMoePlan plan = internal::PlanMoeForward(shape, card, opt);
    internal::last_auto_path.store(plan.spec(), std::memory_order_relaxed);
    return plan;
  }

  static absl::Status Forward(const CudaMoeLayer& L, const CudaMoeBatch& b, float* out,
                              CudaMoeWorkspace& ws, cudaStream_t stream, CudaMoePath path) {
    if (b.num_tokens < 0 || b.top_k < 1 || b.top_k > 32) {
      return absl::InvalidArgumentError(absl::StrCat("MoeForwardCuda: num_tokens ", b.num_tokens,
                                                     ", top_k ", b.top_k));
    }
    if (b.num_tokens == 0) return absl::OkStatus();
    if (auto s = ws.Reserve(L, b.num_tokens, b.top_k); !s.ok()) return s;
    const int H = L.hidden_, I = L.intermediate_, nh = std::max(1, L.num_held_);
    const int64_t pairs = int64_t(b.num_tokens) * b.top_k;
    const internal::CudaMoePlan plan = Plan(L, b, pairs, nh, path);
    const int p = plan.big, p2 = plan.small;
    const int bm = internal::PathBm(p);
    const int64_t max_tiles = (pairs + bm - 1) / bm + std::min<int64_t>(nh, pairs);
    // The second height's tiles: at most ceil(rmax / bm2) per held expert, listed after the
    // first height's max_tiles (the workspace holds both: Reserve).
    const int bm2 = p2 < 0 ? 0 : internal::PathBm(p2);
    const int rmax = p2 < 0 ? 0 : internal::MixRmaxOfPaths(p, p2);
    const int64_t max_tiles2 =
        p2 < 0 ? 0
               : std::min<int64_t>((pairs + bm2 - 1) / bm2 + std::min<int64_t>(nh, pairs),
                                   std::min<int64_t>(nh, pairs) * ((rmax + bm2 - 1) / bm2));
    if (max_tiles > 65535 || max_tiles2 > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("MoeForwardCuda: ", pairs,
                                                     " token-slots is more than one launch takes"));
    }
    internal::RoutingArgs r{};
    r.ids = b.expert_ids;
    r.local = L.d_local_;
    r.x = b.x;
    r.tokens = b.num_tokens;
    r.top_k = b.top_k;
    r.num_experts = L.num_experts_;
    r.nh = nh;
    r.bm = bm;
    r.hidden = H;
    r.kp_h = L.kp_h_;
    r.meta = ws.d_counts_;
    r.tiles = ws.d_tiles_;
    r.sorted = ws.d_sorted_;
    r.a = ws.d_a_;
    r.plain_k = p >= internal::kPathWgmma;  // the wgmma paths read plain K order
    r.bm2 = bm2;
    r.rmax = rmax;
    r.tiles2 = ws.d_tiles_ + 3 * max_tiles;
    internal::GemmArgs g{};  // gate_up
    g.q = L.d_gu_q_;
    g.sc = L.d_gu_s_;
    g.bias = L.d_gu_b_;
    g.n = 2 * I;
    g.kp = L.kp_h_;
    g.nfull = L.kp_h_ / 128;
    g.chunks = (L.kp_h_ + 127) / 128;
    g.a = ws.d_a_;
    g.tiles = ws.d_tiles_;
    g.ntiles = ws.d_counts_ + 3 * nh + 1;
    g.rows = static_cast<int>(pairs);
    g.held = nh;
    g.act = ws.d_act_;
    g.kp_out = L.kp_i_;
    g.nfull_out = L.kp_i_ / 128;
    g.alpha = L.alpha_;
    g.limit = L.limit_;
    internal::GemmArgs d = g;  // down
    d.q = L.d_dn_q_;
    d.sc = L.d_dn_s_;
    d.bias = L.d_dn_b_;
    d.n = H;
    d.kp = L.kp_i_;
    d.nfull = L.kp_i_ / 128;
    d.chunks = (L.kp_i_ + 127) / 128;
    d.a = ws.d_act_;
    d.y = ws.d_y_;
    d.sorted = ws.d_sorted_;
    d.route_w = b.weights;
    internal::GemmArgs g2 = g, d2 = d;  // the second height's: its tile list and count
    g2.tiles = d2.tiles = r.tiles2;
    g2.ntiles = d2.ntiles = ws.d_counts_ + 3 * nh + 2;
    if (L.kp_i_ != I) {
      cudaMemsetAsync(ws.d_act_, 0, sizeof(uint16_t) * pairs * L.kp_i_, stream);
    }
    const internal::Variant& v = internal::CurrentVariant();
    // The whole layer in one launch (moe_cuda_fused.cu), unless it does not fit the device or
    // cannot be launched (then the kernels below).
    if (plan.fused) {
      internal::SelfRoute sr;
      sr.ids = b.expert_ids;
      sr.local = L.d_local_;
      sr.pairs = static_cast<int>(pairs);
      sr.experts = L.num_experts_;
      sr.x = b.x;
      sr.hidden = H;
      sr.top_k = b.top_k;
      // Held experts that are one range: the kernel reads no held-index table.
      if (L.held_range_ && !v.fused_held_table) {
        sr.held_lo = L.held_lo_;
        sr.held_n = L.num_held_;
      }
      // With the ids on the host (the worker's path) the route is made here and goes with the
      // launch: the kernel then reads no ids and lists its pieces while it gathers x.
      internal::TinyRoute route;
      const bool host_route = v.fused_host_route && b.host_expert_ids != nullptr;
      if (host_route) {
        route = internal::MakeTinyRoute(b.host_expert_ids, sr.pairs, L.local_.data(), sr.experts, sr.held_lo,
                                        sr.held_n);
      }
      if (internal::LaunchFusedDecode(g, d, sr, host_route ? &route : nullptr, out, ws.d_sync_, b.num_tokens,
                                      L.small_scales_, stream)) {
        return CudaCheck(cudaGetLastError(), "MoeForwardCuda launch");
      }
    }
    internal::LaunchRouting(r, stream);
    // The kst decode GEMMs stream their first weights before the kernel just before them ends
    // (GemmArgs::early_weights).
    g.early_weights = g2.early_weights = d.early_weights = d2.early_weights = v.early_weights;
    auto launch_failed = [](int code, const char* which) {
      return absl::InternalError(absl::StrCat("MoeForwardCuda: the ", which,
                                              " GEMM could not describe its operands to the copy "
                                              "engine (cuTensorMapEncodeTiled: ", code, ")"));
    };
    // Two heights: the tiles of each are rows of their own, so the second height's gate_up and
    // down run on the side stream beside the first's (forked after the routing, joined before
    // the combine): neither waits for the other's drain.
    const bool side = p2 >= 0 && !v.mix_serial;
    cudaStream_t s2 = side ? ws.side_ : stream;
    // `after` waits for what `before` has enqueued so far.
    auto order = [](cudaEvent_t ev, cudaStream_t before, cudaStream_t after) {
      if (auto e = CudaCheck(cudaEventRecord(ev, before), "cudaEventRecord"); !e.ok()) return e;
      return CudaCheck(cudaStreamWaitEvent(after, ev, 0), "cudaStreamWaitEvent");
    };
    if (side) {
      if (auto e = order(ws.fork_, stream, ws.side_); !e.ok()) return e;
    }
    struct Gemm {
      const internal::GemmArgs* args;
      bool gate_up;
      int path;
      int64_t max_tiles;
      cudaStream_t stream;
      const char* which;
    };
    // One height of 8-row kst tiles: both GEMMs in one launch where it applies
    // (moe_cuda_decode_kst_pair.cu; it declines where the grid cannot be resident).
    const internal::CombineArgs comb{b.expert_ids, L.d_local_, L.num_experts_, b.num_tokens, b.top_k, out};
    bool paired = false, combined = false;
    if (plan.paired) {
      const int r = internal::LaunchDecodeKstPair(g, d, L.small_scales_, static_cast<int>(max_tiles), comb,
                                                  ws.d_pair_done_, &combined, stream);
      if (r > 0) return launch_failed(r, "paired");
      paired = r == 0;
    }
    const Gemm gemms[] = {{&g, true, p, max_tiles, stream, "gate_up"},
                          {&g2, true, p2, max_tiles2, s2, "second gate_up"},
                          {&d, false, p, max_tiles, stream, "down"},
                          {&d2, false, p2, max_tiles2, s2, "second down"}};
    for (const Gemm& m : gemms) {
      if (m.path < 0 || paired) continue;  // one height; or both GEMMs ran paired
      if (int r = internal::LaunchGemm(*m.args, m.gate_up, m.path, L.small_scales_, static_cast<int>(m.max_tiles),
                                       m.stream);
          r != 0) {
        return launch_failed(r, m.which);
      }
    }
    if (side) {
      if (auto e = order(ws.join_, ws.side_, stream); !e.ok()) return e;
    }
    if (!combined) internal::LaunchCombine(ws.d_y_, H, comb, stream);
    return CudaCheck(cudaGetLastError(), "MoeForwardCuda launch");
  }
};

absl::Status MoeForwardCuda(const CudaMoeLayer& layer, const CudaMoeBatch& batch, float* out,
                            CudaMoeWorkspace& ws, cudaStream_t stream, CudaMoePath path) {
  return LayerAccess::Forward(layer, batch, out, ws, stream, path);
}

// ---- CudaMoeRunner --------------------------------------------------------------------------

namespace {
// Host memory the device can copy from or to directly (cudaHostRegister'ed or cudaMallocHost'ed).
// Plain pageable memory answers cudaMemoryTypeUnregistered (CUDA 11 and later), not an error.
bool PageLocked(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}
}  // namespace

absl::StatusOr<std::unique_ptr<CudaMoeRunner>> CudaMoeRunner::Create(int device) {
  int n = 0;
  if (auto s = CudaCheck(cudaGetDeviceCount(&n), "cudaGetDeviceCount"); !s.ok()) return s;
  if (device < 0 || device >= n) {
    return absl::InvalidArgumentError(absl::StrCat("cuda:", device, ": this host has ", n, " CUDA devices"));
  }
  std::unique_ptr<CudaMoeRunner> r(new CudaMoeRunner());
  r->device_ = device;
  if (auto s = CudaCheck(cudaSetDevice(device), "cudaSetDevice"); !s.ok()) return s;
  if (auto s = CudaCheck(cudaStreamCreateWithFlags(&r->stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      !s.ok()) {
    return s;
  }
  return r;
}

CudaMoeRunner::~CudaMoeRunner() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (h_x_) cudaFreeHost(h_x_);
  if (h_ids_) cudaFreeHost(h_ids_);
  if (h_w_) cudaFreeHost(h_w_);
  if (d_x_) cudaFree(d_x_);
  if (d_out_) cudaFree(d_out_);
  if (d_ids_) cudaFree(d_ids_);
  if (d_w_) cudaFree(d_w_);
  if (stream_) cudaStreamDestroy(stream_);
}

absl::Status CudaMoeRunner::Grow(size_t tokens, int k, int hidden) {
  const size_t nx = std::max<size_t>(1, tokens) * hidden, nids = std::max<size_t>(1, tokens) * k;
  if (nx > cap_x_) {
    if (h_x_) cudaFreeHost(h_x_);
    if (d_x_) cudaFree(d_x_);
    if (d_out_) cudaFree(d_out_);
    h_x_ = nullptr;
    d_x_ = d_out_ = nullptr;
    cap_x_ = 0;
    if (auto s = CudaCheck(cudaMallocHost(reinterpret_cast<void**>(&h_x_), nx * 4), "cudaMallocHost(x)"); !s.ok()) return s;
    if (auto s = CudaCheck(cudaMalloc(reinterpret_cast<void**>(&d_x_), nx * 4), "cudaMalloc(x)"); !s.ok()) return s;
    if (auto s = CudaCheck(cudaMalloc(reinterpret_cast<void**>(&d_out_), nx * 4), "cudaMalloc(out)"); !s.ok()) return s;
    cap_x_ = nx;
  }
  if (nids > cap_ids_) {
    if (h_ids_) cudaFreeHost(h_ids_);
    if (h_w_) cudaFreeHost(h_w_);
    if (d_ids_) cudaFree(d_ids_);
    if (d_w_) cudaFree(d_w_);
    h_ids_ = nullptr;
    h_w_ = nullptr;
    d_ids_ = nullptr;
    d_w_ = nullptr;
    cap_ids_ = 0;
    if (auto s = CudaCheck(cudaMallocHost(reinterpret_cast<void**>(&h_ids_), nids * 4), "cudaMallocHost(ids)"); !s.ok()) return s;
    if (auto s = CudaCheck(cudaMallocHost(reinterpret_cast<void**>(&h_w_), nids * 4), "cudaMallocHost(w)"); !s.ok()) return s;
    if (auto s = CudaCheck(cudaMalloc(reinterpret_cast<void**>(&d_ids_), nids * 4), "cudaMalloc(ids)"); !s.ok()) return s;
    if (auto s = CudaCheck(cudaMalloc(reinterpret_cast<void**>(&d_w_), nids * 4), "cudaMalloc(w)"); !s.ok()) return s;
    cap_ids_ = nids;
  }
  return absl::OkStatus();
}

absl::Status CudaMoeRunner::Run(const CudaMoeLayer& layer, const MoeLayer& host_layer,
                                const MoeBatch& batch, float* out) {
  return RunWire(layer, host_layer, batch, batch.x, out, sizeof(float));
}

absl::Status CudaMoeRunner::RunBf16(const CudaMoeLayer& layer, const MoeLayer& host_layer,
                                    const MoeBatch& batch, const void* x, void* out) {
  MoeBatch b = batch;
  b.x = static_cast<const float*>(x);  // for ValidateMoeBatch, which checks only that it is set
  return RunWire(layer, host_layer, b, x, out, sizeof(uint16_t));
}

absl::Status CudaMoeRunner::RunWire(const CudaMoeLayer& layer, const MoeLayer& host_layer,
                                    const MoeBatch& batch, const void* x, void* out, size_t esize) {
  if (auto s = ValidateMoeBatch(host_layer, batch); !s.ok()) return s;
  const int H = layer.hidden();
  const size_t T = batch.num_tokens, k = batch.top_k;
  if (T == 0) return absl::OkStatus();
  if (auto s = CudaCheck(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
  if (auto s = Grow(T, batch.top_k, H); !s.ok()) return s;
  const size_t n = T * H, bytes = n * esize;
  const bool bf16 = esize == sizeof(uint16_t);
  const bool x_locked = PageLocked(x), out_locked = PageLocked(out);
  if (!x_locked) std::memcpy(h_x_, x, bytes);
  std::memcpy(h_ids_, batch.expert_ids, T * k * 4);
  std::memcpy(h_w_, batch.weights, T * k * 4);
  // bf16 x lands in d_out_ (unused until the layer writes it) and is widened into d_x_.
  cudaMemcpyAsync(bf16 ? static_cast<void*>(d_out_) : d_x_, x_locked ? x : h_x_, bytes, cudaMemcpyHostToDevice,
                  stream_);
  cudaMemcpyAsync(d_ids_, h_ids_, T * k * 4, cudaMemcpyHostToDevice, stream_);
  cudaMemcpyAsync(d_w_, h_w_, T * k * 4, cudaMemcpyHostToDevice, stream_);
  if (bf16) internal::LaunchBf16ToF32(reinterpret_cast<const uint16_t*>(d_out_), d_x_, n, stream_);
  CudaMoeBatch db;
  db.num_tokens = batch.num_tokens;
  db.top_k = batch.top_k;
  db.x = d_x_;
  db.expert_ids = d_ids_;
  db.weights = d_w_;
  db.host_expert_ids = h_ids_;
  if (auto s = MoeForwardCuda(layer, db, d_out_, ws_, stream_); !s.ok()) return s;
  // bf16 out is narrowed into d_x_ (the layer has read it by then: same stream).
  if (bf16) internal::LaunchF32ToBf16(d_out_, reinterpret_cast<uint16_t*>(d_x_), n, stream_);
  cudaMemcpyAsync(out_locked ? out : h_x_, bf16 ? static_cast<const void*>(d_x_) : d_out_, bytes,
                  cudaMemcpyDeviceToHost, stream_);
  if (auto s = CudaCheck(cudaStreamSynchronize(stream_), "MoeForwardCuda"); !s.ok()) return s;
  if (!out_locked) std::memcpy(out, h_x_, bytes);
  return absl::OkStatus();
}

absl::Status CudaMoeRunner::PinHost(void* p, size_t n) {
  if (auto s = CudaCheck(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
  const cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterDefault);
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // not sticky: clear it so that the next launch check does not see it
  return absl::InternalError(absl::StrCat("cudaHostRegister of ", n, " bytes: ", cudaGetErrorString(e)));
}

void CudaMoeRunner::UnpinHost(void* p) {
  cudaSetDevice(device_);
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();  // it was not registered
}

}  // namespace mxserve::kernels::cuda

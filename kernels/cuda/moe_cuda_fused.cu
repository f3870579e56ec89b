// The whole layer in one launch for the smallest batches (at most kTinyPairs token-slots: one
// token at top-4): routing, gate_up, SwiGLU, down and the per-token sum, on a persistent grid of
// one CTA per SM. See FusedDecodeKernel (moe_cuda_fused.cuh). Built here in kAuto's configuration
// (kFusedWarps, kFusedParts); the others MXSERVE_PLAN's fused= names are kernels/cuda/lab's.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/moe_cuda_fused.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "kernels/cuda/moe_cuda_tiny_route.h"

namespace mxserve::kernels::cuda::internal {


namespace {

// The down units' default weight in the grid's split (FusedWorkOf): 0, every CTA as many gate_up
// units (10 or 11 of gpt-oss-120b's 1440 over 132 CTAs, where equal bytes gave 9 to the CTAs with
// two down groups and 12 to the rest). One token, three alternations (`envab`,
// ms): gpt-oss-120b 0.0375 / 0.0375 / 0.0377 against 0.0378 / 0.0380 / 0.0380 at 100,
// gpt-oss-20b 0.0375-0.0376 against 0.0380-0.0381; 25 and 50 in between.
constexpr int kFusedDownPct = 0;

// Whether a warp asks for its first down pieces only once its gate_up pieces are computed, by
// default (FusedArgs::defer). One token, three alternations (`envab`, ms):
// gpt-oss-120b 0.0370 / 0.0370 / 0.0371 against 0.0373-0.0375 as soon as a slot is free;
// gpt-oss-20b 0.0371-0.0372 against 0.0372-0.0374. At the grid barrier instead (once the whole
// CTA's are; built, measured, removed) it was slower, 0.0384: the barrier then passed 5.6 us
// after the last CTA's gate_up instead of ~3, its polls queued behind every CTA's down pieces
// asked for at once.
constexpr bool kFusedDefer = true;

// The configuration (Variant::fused; the lab checks that it is a built one).
const FusedPinned& FusedPin() { return CurrentVariant().fused; }

// The largest piece (weights + scales of chunks [c0, c1) of one 16-row unit) of a GEMM.
int MaxPieceBytes(const GemmArgs& a, int parts) {
  int most = 0;
  for (int q = 0; q < parts; ++q) {
    int c0, c1;
    PieceChunks(q, parts, a.chunks, c0, c1);
    most = std::max(most, 2 * (PieceWeightBytes(c0, c1, a.nfull) + 32 * (c1 - c0)));  // two 8-row groups
  }
  return most;
}

// The configuration for these layer shapes, or warps == 0 when it does not fit one CTA per SM.
FusedPlan Plan(const GemmArgs& g, const GemmArgs& d, int tokens) {
  FusedPlan pl;
  const FusedPinned& pin = FusedPin();
  if (pin.off) return pl;
  const DeviceLimits& lim = Device();
  if (lim.cc < 90) return pl;  // mbarriers with transaction counts, bulk copies: sm_90a only
  pl.parts = pin.parts;
  pl.f.slot_bytes = std::max(MaxPieceBytes(g, pl.parts), MaxPieceBytes(d, pl.parts));
  pl.f.a_stride = 2 * std::max(g.kp, d.kp) + 16;
  pl.f.tokens = tokens;
  const Variant& v = CurrentVariant();
  pl.f.probe = v.fused_probe;
  pl.f.defer = v.fused_defer == 0 ? kFusedDefer : v.fused_defer == 2;
  pl.f.evict_first = EvictFirst();
  // The down units' weight in the grid's split, percent (Variant::fused_down_pct).
  const int down_pct = v.fused_down_pct < 0 ? kFusedDownPct : v.fused_down_pct;
  pl.f.down_pct = down_pct;
  pl.f.stride = v.fused_stride;  // the gate_up units strided over the grid
  FusedWork w = FusedWorkOf(g, d, kTinyPairs, down_pct);
  if (!FusedFits32(w, lim.sms)) return pl;  // the in-kernel range arithmetic is 32-bit
  if (lim.sms >= 4096) return pl;            // GridBarrier's count wraps at G * 2^20 < 2^32
  // The most units any CTA gets, over every tile count: ~500 range computations, so kept per
  // layer shape (every decode call asks; one thread's calls are one layer's shapes at a time).
  thread_local int64_t cached_key[6] = {-1, -1, -1, -1, -1, -1};
  thread_local int cached_units = 0;
  const int64_t key[6] = {w.ca, w.cd, w.ng_gu, w.ngd, lim.sms, pl.f.stride};  // (w.ntiles varies below)
  if (!std::equal(key, key + 6, cached_key)) {
    int units = 0;
    for (int nt = 1; nt <= kTinyPairs; ++nt) {
      w = FusedWorkOf(g, d, nt, down_pct);
      for (int b = 0; b < lim.sms; ++b) {
        const FusedRange r = FusedCtaRange(w, b, lim.sms);
        const int na = pl.f.stride ? FusedStridedUnits(w, b, lim.sms) : r.a1 - r.a0;
        units = std::max(units, na + FusedDownUnits(r.r1 - r.r0, nt));
      }
    }
    std::copy(key, key + 6, cached_key);
    cached_units = units;
  }
  pl.f.max_units = cached_units;
  const int groups = (w.ngd + lim.sms - 1) / lim.sms;
  pl.f.groups = groups;
  const size_t fixed = size_t(kTinyPairs) * pl.f.a_stride + size_t(pl.f.max_units) * pl.parts * 16 * 16 +
                       size_t(pl.f.max_units) * 4 + size_t(groups) * kTinyPairs * 8 * 4 +
                       size_t(pl.f.max_units) * 16 * 4 +  // biases
                       size_t(pl.f.max_units) * pl.parts * sizeof(FusedPiece);
  const size_t budget = size_t(lim.smem_optin) - 1024;  // static: barriers and the route
  if (fixed >= budget || !FusedSlots(budget - fixed, pl.f.slot_bytes, pin.warps, pin.depth, pl.f)) return pl;
  pl.smem = fixed + size_t(pl.f.slot_bytes) * FusedSlotCount(pl.f, pin.warps);
  pl.warps = pin.warps;
  return pl;
}

}  // namespace

namespace {
// The last launch's configuration (warps, parts, slots, shared memory), for FusedStampsReport.
std::atomic<int> g_last_plan[4];
}  // namespace

std::string FusedStampsReport() {
  const int plan[4] = {g_last_plan[0].load(), g_last_plan[1].load(), g_last_plan[2].load(), g_last_plan[3].load()};
  if (plan[0] == kFusedWarps && plan[1] == kFusedParts) return FusedStampsTable(plan);
  const LabFusedStampsFn lab = CurrentVariant().lab_fused_stamps;
  return lab != nullptr ? lab(plan) : "no stamps";
}

namespace {
std::atomic<uint64_t> g_fused_launches{0};
}  // namespace

uint64_t FusedLaunches() { return g_fused_launches.load(std::memory_order_relaxed); }

bool LaunchFusedDecode(const GemmArgs& g, const GemmArgs& d, const SelfRoute& sr, const TinyRoute* host_route,
                       float* out, uint32_t* sync, int tokens, bool one_mul, cudaStream_t stream) {
  FusedPlan pl = Plan(g, d, tokens);
  if (pl.warps == 0 || sr.pairs > kTinyPairs || tokens > kTinyPairs) return false;
  pl.f.out = out;
  pl.f.sync = sync;
  if (host_route != nullptr) {
    pl.f.host_route = true;
    pl.f.route = *host_route;
  }

  // kAuto's configuration here; the others FusedBuilt names are the lab's (Plan only returns those).
  const LabFusedFn lab = CurrentVariant().lab_fused;
  const cudaError_t e = pl.warps == kFusedWarps && pl.parts == kFusedParts
                            ? LaunchFusedWP<kFusedWarps, kFusedParts>(g, d, sr, pl, one_mul, stream)
                        : lab != nullptr ? cudaError_t(lab(g, d, sr, pl, one_mul, stream))
                                         : cudaErrorNotSupported;
  if (e == cudaSuccess) {
    g_fused_launches.fetch_add(1, std::memory_order_relaxed);
    g_last_plan[0] = pl.warps, g_last_plan[1] = pl.parts, g_last_plan[2] = FusedSlotCount(pl.f, pl.warps);
    g_last_plan[3] = int(pl.smem);
    return true;
  }
  (void)CudaCheck(e, "fused MoE launch");  // exits on a sticky error
  cudaGetLastError();  // a refused launch (e.g. the SMs are shared): clear it; the caller runs the kernels
  return false;
}

}  // namespace mxserve::kernels::cuda::internal

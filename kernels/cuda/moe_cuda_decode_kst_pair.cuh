// The paired decode kernel (moe_cuda_decode_kst_pair.cu says what it does and why): a layer's
// gate_up and down GEMMs at 8-row kst tiles in one launch, and its launcher. Templates that
// moe_cuda_decode_kst_pair.cu instantiates in kAuto's form (items from a queue, no stamps) and
// kernels/cuda/lab in the others (the fixed order, the phase stamps).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/moe_cuda_decode_kst.cuh"
#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"

namespace mxserve::kernels::cuda::internal {
namespace {

// MXSERVE_PLAN pair_probe=stamps (benchmarks; kStamps, the queue form only): %globaltimer
// (ns) of each CTA at its phase ends in the last paired launch, and the items each took, read back
// by PairStampsReport; g_pair_end: when the grid's last consumer warp finished.
constexpr int kPairStampCtas = 1024, kPairStamps = 7;
__device__ uint64_t g_pair_stamps[kPairStampCtas][kPairStamps];
__device__ int g_pair_items[kPairStampCtas];
__device__ uint64_t g_pair_end;
// The kW consumer warps of the CTA meet (named barrier 1; the producer warp has left).
template <int kW>
__device__ __forceinline__ void ConsumerBarrier() {
  asm volatile("bar.sync 1, %0;" ::"n"(32 * kW) : "memory");
}

template <bool kOn>
__device__ __forceinline__ void PairStamp(int i) {
  if constexpr (kOn) {
    if (blockIdx.x < kPairStampCtas) g_pair_stamps[blockIdx.x][i] = GlobalTimer();
  }
}

// gw/gs, dw/ds: the gate_up and down weights' and scales' tensor maps (as DecodeKstKernel's).
// kQueue: after its first item (b) each CTA takes the next from a queue, G + done[1]++ (the
// producer, after griddepcontrol.wait), and tells its consumer warps which through item_of[stage]
// (-1: none left), so that CTAs that run faster take more.
template <bool kOneMul, int kCs, int kNb, int kMt, int kW, int kCb, bool kQueue, bool kStamps>
__global__ void __launch_bounds__(32 * kW + 32, kCb)
    DecodeKstPairKernel(const __grid_constant__ CUtensorMap gw, const __grid_constant__ CUtensorMap gs,
                        const __grid_constant__ CUtensorMap dw, const __grid_constant__ CUtensorMap ds,
                        const GemmArgs pg, const GemmArgs pd, int S, const CombineArgs cb, int32_t* done) {
  constexpr int kRows = 8 * kNb, kGroups = 2 * kMt * kW;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxS], empty[kMaxS];
  __shared__ int item_of[kMaxS];  // kQueue: the item whose first slice a stage holds
  if (threadIdx.x == 0) PairStamp<kStamps>(0);  // start
  if (!pg.early_weights) PdlWait();
  if (threadIdx.x == 0 && !pg.early_weights) PairStamp<kStamps>(2);  // the kernel before done
  const int nvalid = __ldg(pg.ntiles);
  PdlLaunchDependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int ntg = pg.n >> 3, ntd = pd.n >> 3;
  const int per_g = (ntg + kGroups - 1) / kGroups, per_d = (ntd + kGroups - 1) / kGroups;
  const int n_g = nvalid * per_g, total = n_g + nvalid * per_d;
  const int slices_g = (pg.chunks + kCs - 1) / kCs, slices_d = (pd.chunks + kCs - 1) / kCs;
  const KsGeom geo = MakeKsGeom<kCs, kMt, kW>(min(kRows, max(1, pg.rows)));
  const int b = blockIdx.x, G = gridDim.x;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      MbarInit(&full[i], 1);
      MbarInit(&empty[i], 32 * kW);  // every consumer lane
    }
    FenceMbarInit();
  }
  __syncthreads();  // the only CTA-wide barrier

  if (warp == kW) {  // the producer (one thread)
    if (lane != 0) return;
    const int target = per_g * kW;  // consumer warps' gate_up items per tile
    int ready = -1;                 // the last tile seen complete
    auto rows_of = [&](int stage, bool down, int tile, int s) {
      uint8_t* base = smem + stage * geo.stage_bytes;
      if (!down) {
        KstLoadRows<kCs, kRows>(pg, geo, base, &full[stage], tile, s);
        return;
      }
      if (tile != ready) {
        const uint32_t* count = reinterpret_cast<const uint32_t*>(done + 3 + tile);
        while (int(LdAcquire(count)) < target) __nanosleep(64);
        asm volatile("fence.proxy.async.global;" ::: "memory");
        ready = tile;
      }
      KstLoadRows<kCs, kRows>(pd, geo, base, &full[stage], tile, s);
    };
    // Item i of the list: a down item past n_g; its tile and its index within the tile.
    auto locate = [&](int i, bool& down, int& tile, int& it) {
      down = i >= n_g;
      const int j = down ? i - n_g : i, per = down ? per_d : per_g;
      tile = j / per;
      it = j - tile * per;
    };
    // early_weights: as DecodeKstKernel's, over this CTA's first uses (kQueue: its first item's,
    // so that the queue is read after the wait).
    const int mine = b < total ? (total - 1 - b) / G + 1 : 0, mine_g = b < n_g ? (n_g - 1 - b) / G + 1 : 0;
    const int uses = kQueue ? (b < total ? (b < n_g ? slices_g : slices_d) : 0)
                            : mine_g * slices_g + (mine - mine_g) * slices_d;
    const int early = pg.early_weights ? min(S, uses) : 0;
    bool pending = early > 0;  // rows_of_early not yet run
    auto rows_of_early = [&] {
      PdlWait();
      PairStamp<kStamps>(2);
      int u = 0;
      for (int i = b; u < early; i += G) {
        bool down;
        int tile, it;
        locate(i, down, tile, it);
        const int sl = down ? slices_d : slices_g;
        for (int s = 0; s < sl && u < early; ++s, ++u) rows_of(u, down, tile, s);
      }
    };
    int q = 0, stage = 0;
    uint32_t phase = 0;
    for (int i = b; i < total;) {
      bool down;
      int tile, it;
      locate(i, down, tile, it);
      const int e = __ldg(pg.tiles + 3 * tile);
      const int n_rows = min(__ldg(pg.tiles + 3 * tile + 2), kRows);
      const int grow = e * (down ? ntd : ntg) + it * kGroups;  // the item's first group row
      const int sl = down ? slices_d : slices_g;
      const int chunks = down ? pd.chunks : pg.chunks, nfull = down ? pd.nfull : pg.nfull;
      const CUtensorMap* wmap = down ? &dw : &gw;
      const CUtensorMap* smap = down ? &ds : &gs;
      for (int s = 0; s < sl; ++s, ++q) {
        if (pending && q == early) rows_of_early(), pending = false;
        if (q >= S) MbarWait(&empty[stage], phase ^ 1u);
        uint8_t* base = smem + stage * geo.stage_bytes;
        if (kQueue && s == 0) item_of[stage] = i;  // published by the arrival below
        MbarExpectTx(&full[stage], geo.w_bytes + geo.s_bytes + n_rows * KstRowBytes<kCs>(s, chunks, nfull));
        KstLoadWeights<kCs>(geo, base, wmap, smap, &full[stage], s, grow);
        if (q == 0) PairStamp<kStamps>(1);  // first copies asked for
        if (q >= early) rows_of(stage, down, tile, s);
        if (++stage == S) stage = 0, phase ^= 1u;
      }
      if (pending && q == early) rows_of_early(), pending = false;  // fewer uses than stages
      i = kQueue ? int(G) + atomicAdd(done + 1, 1) : i + G;
    }
    if (pending) rows_of_early();  // no item at all
    PairStamp<kStamps>(6);          // every copy asked for
    if constexpr (kQueue) {  // none left: an arrival without bytes
      if (q >= S) MbarWait(&empty[stage], phase ^ 1u);
      item_of[stage] = -1;
      MbarArrive(&full[stage]);
    }
    return;
  }

  int stage = 0;
  uint32_t phase = 0;
  int taken = 0;  // kStamps: this CTA's items
  for (int i = b; kQueue || i < total; i += G) {
    if constexpr (kQueue) {  // the item of the next stage use
      MbarWait(&full[stage], phase);
      i = item_of[stage];
      if (i < 0) break;
    }
    if (i < n_g) {
      const int tile = i / per_g;
      KstConsumeItem<true, kOneMul, kCs, kNb, kMt, kW, false>(pg, geo, smem, full, empty, S, tile, i - tile * per_g,
                                                             slices_g, warp, lane, stage, phase);
      // This warp's share of the tile's down operand is stored: every lane's stores, then the count.
      __threadfence();
      __syncwarp();
      if (lane == 0) atomicAdd(done + 3 + tile, 1);
      if (threadIdx.x == 0) PairStamp<kStamps>(4);  // (the last) gate_up item done
    } else {
      const int j = i - n_g, tile = j / per_d;
      KstConsumeItem<false, kOneMul, kCs, kNb, kMt, kW, false>(pd, geo, smem, full, empty, S, tile, j - tile * per_d,
                                                              slices_d, warp, lane, stage, phase);
    }
    if (kStamps && threadIdx.x == 0 && ++taken == 1) PairStamp<kStamps>(3);  // first item done
  }
  if (threadIdx.x == 0) {
    PairStamp<kStamps>(5);  // last item done
    if (kStamps && b < kPairStampCtas) g_pair_items[b] = taken;
  }
  auto last_zeroes = [&](int32_t* count, int of) {  // one thread: the last of `of` zeroes the counts
    if (atomicAdd(count, 1) == of - 1) {
      if constexpr (kStamps) g_pair_end = GlobalTimer();
      for (int t = 0; t < nvalid + 3; ++t) done[t] = 0;
    }
  };
  // The CTA's consumer warps' y stores (every lane's, fenced), then the CTA's count in done[0].
  __threadfence();
  ConsumerBarrier<kW>();
  if (cb.out == nullptr) {  // the caller combines
    if (warp == 0 && lane == 0) last_zeroes(done, int(G));
    return;
  }
  // One poller per CTA (every warp polling the one line slowed the grid's last items by more than
  // the combine launch costs, on an H200), the others at a barrier; then each lane acquires
  // the count itself, before its loads of y.
  const uint32_t* finished = reinterpret_cast<const uint32_t*>(done);
  if (warp == 0 && lane == 0) {
    atomicAdd(done, 1);
    while (int(LdAcquire(finished)) < int(G)) __nanosleep(256);
  }
  ConsumerBarrier<kW>();
  (void)LdAcquire(finished);
  const int h4 = pd.n / 4, nw = int(G) * kW;
  const int units = cb.tokens * h4;  // (token, float4 column)
  for (int u = (b * kW + warp) * 32 + lane; u < units; u += nw * 32) {
    const int t = u / h4, c = u - t * h4;
    const uint32_t valid = HeldSlots(cb.ids, cb.local, cb.num_experts, cb.top_k, t);
    reinterpret_cast<float4*>(cb.out + int64_t(t) * pd.n)[c] = SumSlots(pd.y, valid, cb.top_k, pd.n, t, c);
  }
  ConsumerBarrier<kW>();
  if (warp == 0 && lane == 0) last_zeroes(done + 2, int(G));
}

std::atomic<int> g_pair_last_grid{0};  // the last paired launch's CTAs (PairStampsReport)

template <bool kOneMul, int kCs, int kNb, int kMt, int kW, int kCb, bool kQueue, bool kStamps = false>
int LaunchPairT(const GemmArgs& g, const GemmArgs& d, int max_tiles, const CombineArgs& c, int32_t* done,
                cudaStream_t stream) {
  constexpr int kGroups = 2 * kMt * kW;
  const KsGeom geo = MakeKsGeom<kCs, kMt, kW>(std::min(8 * kNb, std::max(1, g.rows)));
  const int stages = Stages<kCs, kMt, kW, kCb>(8 * kNb, g.rows);
  if (stages < 2 || TensorMapEncoder() == nullptr) return -1;
  auto kernel = DecodeKstPairKernel<kOneMul, kCs, kNb, kMt, kW, kCb, kQueue, kStamps>;
  RaiseSmemOnce<DecodeKstPairKernel<kOneMul, kCs, kNb, kMt, kW, kCb, kQueue, kStamps>>(KsSmemLimit<kCb>());
  // The waits need every CTA resident at once: kCb per SM at the most shared memory a launch asks.
  static const bool resident = [&] {
    int n = 0;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 32 * kW + 32, KsSmemLimit<kCb>()) ==
               cudaSuccess &&
           n >= kCb;
  }();
  if (!resident) return -1;
  CUtensorMap maps[4];
  if (CUresult r = EncodeWeightMaps(g, kCs, kGroups, &maps[0], &maps[1]); r != CUDA_SUCCESS) return int(r);
  if (CUresult r = EncodeWeightMaps(d, kCs, kGroups, &maps[2], &maps[3]); r != CUDA_SUCCESS) return int(r);
  const int64_t items =
      int64_t(max_tiles) * ((g.n / 8 + kGroups - 1) / kGroups + (d.n / 8 + kGroups - 1) / kGroups);
  const unsigned grid = unsigned(std::min<int64_t>(items, int64_t(PersistentGrid(items)) * kCb));
  LaunchPdl(kernel, dim3(grid), dim3(32 * kW + 32), size_t(stages) * geo.stage_bytes, stream, maps[0], maps[1],
            maps[2], maps[3], g, d, stages, c, done);
  g_pair_last_grid.store(int(grid), std::memory_order_relaxed);
  return 0;
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal

// A layer's two decode GEMMs in one launch ("kst pair"): the K-streamed kernel's CTAs
// (moe_cuda_decode_kst.cu, the 8-row default: two CTAs of 12 consumer warps per SM, 3-chunk
// slices) walk one list of items, every gate_up item of the call then every down item, so that
// neither GEMM ends on its own tail.
//
// Why: at 16 tokens of gpt-oss-120b the CTAs of the two launches get 5.77 and 2.89 whole items
// on average (bench/gpu/item_rounding.py), and the CTAs with one more item set each launch's
// time; under ncu the down launch streamed at 2.3 TB/s against gate_up's 2.6 (H100). One list of 8.7 items per CTA rounds up once, by less.
//
// Order: CTA b takes item b first, then (the default, kQueue) the next item of the list not yet
// taken, from a counter, or (MXSERVE_PLAN kst_pair=fixed) items b + G, b + 2G, ... (G CTAs).
// Either way every gate_up item comes before every down item in each CTA's sequence. A down item
// of tile t reads the activation rows the tile's gate_up items wrote: each consumer warp, after
// storing its rows of a gate_up item, fences and counts itself in done[2 + t]; the producer,
// before it copies a down item's rows, waits until done[2 + t] holds all per_tile * kW of them
// (acquire), then a proxy fence so that its bulk copies (the async proxy) see those generic-proxy
// stores. Gate_up items never wait. From the queue a down item is taken only after every gate_up
// item has been, by a running CTA; the first items, the fixed order and the combine need every CTA
// of the grid resident at once: LaunchDecodeKstPair launches only a grid that fits the device
// (occupancy), one call per workspace at a time (stream order). An item's arithmetic is the
// unpaired kernels' (KstConsumeItem): the results are bit-identical to theirs (the GPU check
// compares them).
//
// The combine (CombineArgs; unless MXSERVE_PLAN pair_combine=off): each CTA, its consumer
// warps' last items stored, counts itself in done[0] and waits until all of the grid's CTAs have;
// then the warps sum the output's float4 columns between them, in CombineKernel's order (SumSlots: the same
// bits), in place of a combine launch after this one (which waits for the whole grid to end and
// its writes to be flushed before it starts: 4.8 us under ncu at 16 tokens of gpt-oss-120b).
//
// done[0] counts the CTAs whose consumer warps have finished their items (done[1]: the queue;
// done[2]: the CTAs that have finished the combine; done[3 + t]: tile t's gate_up warps); the
// last of the grid (of done[2] with the combine, else of done[0]) zeroes done[0 .. ntiles + 2] for the
// next launch (every wait and queue read of this launch is over by then: a producer's precede its
// own consumers' last item, and the combine's wait precedes each warp's count in done[2]). The
// workspace zeroes it once at allocation. The previous call's paired launch has finished before any of this launch's
// accesses: the routing's first kernel is an ordinary launch (it starts once all earlier work on
// the stream is done), and every kernel between it and this one waits for its predecessor before
// letting its dependents start, or is an ordinary launch too.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/moe_cuda_decode_kst.cuh"
#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "kernels/cuda/moe_cuda_tile_choice.h"
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

std::atomic<int> g_pair_set{-1};
std::atomic<int64_t> g_pair_launches{0};

// Paired where the 8-row kst default would run both GEMMs, items from the queue: 1.04-1.10x the
// two launches' speed at every count timed (gpt-oss-120b 16-128 tokens, gpt-oss-20b 16,
// Kimi-K2-like 16), where the fixed order gave 1.00-1.05x (H100). MXSERVE_PLAN kst_pair=fixed
// takes the fixed order, =off two launches; SetKstPair overrides. 0 off, 1 the fixed order, 2 the
// queue.
int PairModeEnv() { return CurrentVariant().kst_pair; }
int PairMode() {
  const int set = g_pair_set.load(std::memory_order_relaxed);
  return set < 0 ? PairModeEnv() : set;
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
  g_pair_launches.fetch_add(1, std::memory_order_relaxed);
  g_pair_last_grid.store(int(grid), std::memory_order_relaxed);
  return 0;
}

// The combine folded into the paired launch: as fast as its own launch after it (PDL hides that
// launch: 1.000-1.005x at gpt-oss-120b 16-128 tokens, gpt-oss-20b and Kimi-K2-like 16, H100),
// one launch fewer per layer for the host to make.
// MXSERVE_PLAN pair_combine=off (benchmarks): the combine in a launch of its own after it.
bool PairCombineOn() { return CurrentVariant().pair_combine; }

bool PairStamps() { return CurrentVariant().pair_stamps; }

}  // namespace

void SetKstPair(int v) { g_pair_set.store(v, std::memory_order_relaxed); }

std::string PairStampsReport() {
  static const char* kPhase[kPairStamps] = {"start",          "first copies asked for", "kernel before done (wait)",
                                            "first item done", "last gate_up item done", "last item done",
                                            "every copy asked for"};
  static uint64_t st[kPairStampCtas][kPairStamps];
  static int items[kPairStampCtas];
  uint64_t end = 0;
  if (cudaMemcpyFromSymbol(st, g_pair_stamps, sizeof(st)) != cudaSuccess ||
      cudaMemcpyFromSymbol(items, g_pair_items, sizeof(items)) != cudaSuccess ||
      cudaMemcpyFromSymbol(&end, g_pair_end, sizeof(end)) != cudaSuccess) {
    return "no pair stamps\n";
  }
  const int n = std::min(g_pair_last_grid.load(std::memory_order_relaxed), kPairStampCtas);
  if (n <= 0) return "no pair stamps\n";
  uint64_t t0 = st[0][0];
  for (int b = 0; b < n; ++b) t0 = std::min(t0, st[b][0]);
  std::string r = "# pair: " + std::to_string(n) + " CTAs; us from the first CTA's start\n";
  r += "| phase | min us | median us | max us |\n|---|---|---|---|\n";
  for (int i = 0; i < kPairStamps; ++i) {
    std::vector<double> v;
    for (int b = 0; b < n; ++b) v.push_back((double(st[b][i]) - double(t0)) * 1e-3);
    r += PhaseRow(kPhase[i], std::move(v));
  }
  r += PhaseRow("items taken (count)", std::vector<double>(items, items + n));
  char last[120];
  std::snprintf(last, sizeof(last), "# last consumer warp of the grid done at %.2f us\n", (double(end) - double(t0)) * 1e-3);
  return r + last;
}
int64_t KstPairLaunches() { return g_pair_launches.load(std::memory_order_relaxed); }

int LaunchDecodeKstPair(const GemmArgs& g, const GemmArgs& d, bool one_mul, int max_tiles, const CombineArgs& c,
                        int32_t* done, bool* combined, cudaStream_t stream) {
  *combined = false;
  // Only where both GEMMs would run the 8-row kst default (moe_cuda_decode.cu, LaunchDecodeGemm;
  // moe_cuda_decode_kst.cu, LaunchKstNb): more than 4 token-slots, nothing pinned, and the
  // activation rows of gate_up and down sliced alike (3-chunk slices: two stages of 8 rows).
  const int mode = PairMode();
  if (mode == 0 || max_tiles <= 0 || g.rows <= 4 || !KstDefault()) return -1;
  // The combine folded in (PairCombineOn).
  CombineArgs cc = c;
  if (!PairCombineOn() || c.tokens <= 0 || d.n % 4 != 0) cc.out = nullptr;
  const int r = [&] {
    if (mode == 2 && PairStamps()) {
      return one_mul ? LaunchPairT<true, 3, 1, 1, 12, 2, true, true>(g, d, max_tiles, cc, done, stream)
                     : LaunchPairT<false, 3, 1, 1, 12, 2, true, true>(g, d, max_tiles, cc, done, stream);
    }
    if (mode == 2) {
      return one_mul ? LaunchPairT<true, 3, 1, 1, 12, 2, true>(g, d, max_tiles, cc, done, stream)
                     : LaunchPairT<false, 3, 1, 1, 12, 2, true>(g, d, max_tiles, cc, done, stream);
    }
    return one_mul ? LaunchPairT<true, 3, 1, 1, 12, 2, false>(g, d, max_tiles, cc, done, stream)
                   : LaunchPairT<false, 3, 1, 1, 12, 2, false>(g, d, max_tiles, cc, done, stream);
  }();
  *combined = r == 0 && cc.out != nullptr;
  return r;
}

}  // namespace mxserve::kernels::cuda::internal

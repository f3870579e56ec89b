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
// taken, from a counter, or (MXSERVE_PLAN kst_pair=fixed, built by kernels/cuda/lab) items b + G,
// b + 2G, ... (G CTAs).
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

#include "kernels/cuda/moe_cuda_decode_kst_pair.cuh"
#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "kernels/cuda/moe_cuda_tile_choice.h"
#include "kernels/cuda/moe_cuda_tma.h"

namespace mxserve::kernels::cuda::internal {
namespace {

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

// The combine folded into the paired launch: as fast as its own launch after it (PDL hides that
// launch: 1.000-1.005x at gpt-oss-120b 16-128 tokens, gpt-oss-20b and Kimi-K2-like 16, H100),
// one launch fewer per layer for the host to make.
// MXSERVE_PLAN pair_combine=off (benchmarks): the combine in a launch of its own after it.
bool PairCombineOn() { return CurrentVariant().pair_combine; }

}  // namespace

void SetKstPair(int v) { g_pair_set.store(v, std::memory_order_relaxed); }

int64_t KstPairLaunches() { return g_pair_launches.load(std::memory_order_relaxed); }

int LaunchDecodeKstPair(const GemmArgs& g, const GemmArgs& d, bool one_mul, int max_tiles, const CombineArgs& c,
                        int32_t* done, bool* combined, cudaStream_t stream) {
  *combined = false;
  // Only where both GEMMs would run the 8-row kst default (moe_cuda_decode.cu, LaunchDecodeGemm;
  // moe_cuda_decode_kst.cu, LaunchKst8): more than 4 token-slots, nothing pinned, and the
  // activation rows of gate_up and down sliced alike (3-chunk slices: two stages of 8 rows).
  const int mode = PairMode();
  if (mode == 0 || max_tiles <= 0 || g.rows <= 4 || !KstDefault()) return -1;
  // The combine folded in (PairCombineOn).
  CombineArgs cc = c;
  if (!PairCombineOn() || c.tokens <= 0 || d.n % 4 != 0) cc.out = nullptr;
  // The queue form without stamps is kAuto's; the fixed order and the stamps are the lab's.
  const Variant& v = CurrentVariant();
  int r = -1;
  if (mode == 2 && !v.pair_stamps) {
    r = one_mul ? LaunchPairT<true, 3, 1, 1, 12, 2, true>(g, d, max_tiles, cc, done, stream)
                : LaunchPairT<false, 3, 1, 1, 12, 2, true>(g, d, max_tiles, cc, done, stream);
  } else if (v.lab_pair != nullptr) {
    r = v.lab_pair(g, d, one_mul, max_tiles, cc, done, mode == 2, v.pair_stamps, stream);
  }
  if (r == 0) g_pair_launches.fetch_add(1, std::memory_order_relaxed);
  *combined = r == 0 && cc.out != nullptr;
  return r;
}

}  // namespace mxserve::kernels::cuda::internal

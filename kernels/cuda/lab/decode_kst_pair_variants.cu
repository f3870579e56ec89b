// The paired decode launch (../moe_cuda_decode_kst_pair.cuh) in the forms kAuto never runs:
// MXSERVE_PLAN kst_pair=fixed (items b, b + G, ... per CTA instead of from a queue) and
// pair_probe=stamps (each CTA's phase ends, PairStampsReport), launched through
// Variant::lab_pair.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/lab/lab_kernels.h"
#include "kernels/cuda/moe_cuda_decode_kst_pair.cuh"

namespace mxserve::kernels::cuda::internal {

int LaunchDecodeKstPairLab(const GemmArgs& g, const GemmArgs& d, bool one_mul, int max_tiles, const CombineArgs& c,
                           int32_t* done, bool queue, bool stamps, cudaStream_t stream) {
  if (queue && stamps) {
    return one_mul ? LaunchPairT<true, 3, 1, 1, 12, 2, true, true>(g, d, max_tiles, c, done, stream)
                   : LaunchPairT<false, 3, 1, 1, 12, 2, true, true>(g, d, max_tiles, c, done, stream);
  }
  if (queue) return -1;  // kAuto's form: moe_cuda_decode_kst_pair.cu launches it
  // The fixed order (stamps are recorded by the queue form only).
  return one_mul ? LaunchPairT<true, 3, 1, 1, 12, 2, false>(g, d, max_tiles, c, done, stream)
                 : LaunchPairT<false, 3, 1, 1, 12, 2, false>(g, d, max_tiles, c, done, stream);
}

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

}  // namespace mxserve::kernels::cuda::internal

// kAuto's choice of kernel configuration (token rows per routing tile) from a cost model, not a
// table of limits: host-only, no CUDA, so the CPU tests check it. With the batch's expert ids on
// the host (the worker's path: CudaMoeBatch::host_expert_ids) the tiles are counted exactly
// (ChooseAutoTileForCounts); without them they are expected under uniform routing.
//
// The model. A tile of `rows` token rows streams one expert's weights once, so a call costs about
//   (expected tiles per expert) x (the expert's weight bytes) x (the configuration's time per
//   weight byte and tile),
// and the bytes cancel when configurations are compared. Tiles per expert: E[ceil(X / rows)]
// with X, an expert's token-slots, Poisson with the call's mean (uniform routing; the binomial
// X ~ B(tokens, top_k / experts) has variance a little below its mean, 6 % below for K3's 16 of
// 256). Time per weight byte and tile: fitted on H200 to 246 forced-path runs of the K3-like,
// Kimi-K2-like and gpt-oss-120b layers (2026-11-30 23:36 call; the mean over each configuration's
// runs; docs/PERFORMANCE.md, tenth session: ms / (tiles x bytes) stays within -10 % / +12 % of it
// across shapes and token counts), decode24's below. On the runs in tests/data/tile_paths the
// chosen configuration is at most 4.5 % slower than the fastest one timed (tile_choice_test
// checks 5 %), and it picks the older gpt-oss-120b tile-height table's best tile (not fitted to)
// at 17 of its 18 token counts (the miss: 3 % slower, at 768 tokens).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mxserve::kernels::cuda::internal {

struct AutoTile {
  const char* path;     // the configuration's name in kPaths (moe_cuda_launch.h)
  int rows;             // its token rows per tile
  double ps_per_byte;   // its time per weight byte and tile, picoseconds (H200)
};

// The configurations kAuto chooses among: the K-streamed decode kernel at 8, 16 and 24 rows and
// the register-A wgmma kernel at 32 ... 256 (the prefill and weights-through-shared-memory paths
// lose everywhere measured; mid, the decode kernel at 32 rows, is within a few % of wgmma32 either
// way and stays out). decode24's cost: the mean of its 17 runs in the 23:51 and 23:55 calls
// (tests/data/tile_paths/paths_decode24_2026-11-30_2351.csv; 0.389-0.488 by shape: its
// cheapest on Kimi-K2-like, dearest on gpt-oss-120b). decode16's: the mean of its 22 runs at 15
// consumer warps (2026-12-01 01:18 call, paths_decode16_2026-12-01_0118.csv; 0.312-0.365; at 12
// warps, until then, 0.379); the same call's decode and wgmma32 runs give 0.303 and 0.516.
inline constexpr AutoTile kAutoTiles[] = {
    {"decode", 8, 0.327},    {"decode16", 16, 0.340}, {"decode24", 24, 0.439}, {"wgmma32", 32, 0.515},
    {"wgmma40", 40, 0.547},  {"wgmma48", 48, 0.580},  {"wgmma64", 64, 0.667},  {"wgmma96", 96, 0.795},
    {"wgmma", 128, 0.919},   {"wgmma192", 192, 1.214}, {"wgmma256", 256, 1.624}};
inline constexpr int kNumAutoTiles = sizeof(kAutoTiles) / sizeof(kAutoTiles[0]);
static_assert(kNumAutoTiles <= 32, "ChooseAutoTile's mask has 32 bits");

// E[ceil(X / rows[i])] for X ~ Poisson(mean), for each of n tile heights (out[i]); 0 when
// mean <= 0. The pmf by its ratio recurrence from the mode (no lgamma), over mode +- 12 sd + 10,
// normalized over that window (the mass outside is below 1e-30).
inline void ExpectedTilesPerExpert(double mean, const int* rows, int n, double* out) {
  for (int i = 0; i < n; ++i) out[i] = 0;
  if (!(mean > 0)) return;
  const double sd = std::sqrt(mean);
  const int64_t mode = static_cast<int64_t>(mean);
  const int64_t lo = std::max<int64_t>(0, mode - static_cast<int64_t>(12 * sd) - 10);
  const int64_t hi = mode + static_cast<int64_t>(12 * sd) + 10;
  double total = 0;
  auto add = [&](int64_t x, double w) {
    total += w;
    for (int i = 0; i < n; ++i) out[i] += w * static_cast<double>((x + rows[i] - 1) / rows[i]);
  };
  double w = 1;  // unnormalized pmf at the mode
  add(mode, w);
  for (int64_t x = mode; x > lo; --x) {  // pmf(x - 1) = pmf(x) x / mean
    w *= static_cast<double>(x) / mean;
    add(x - 1, w);
  }
  w = 1;
  for (int64_t x = mode; x < hi; ++x) {  // pmf(x + 1) = pmf(x) mean / (x + 1)
    w *= mean / static_cast<double>(x + 1);
    add(x + 1, w);
  }
  for (int i = 0; i < n; ++i) out[i] /= total;
}

// The index of the cheapest configuration, tiles[i] x kAutoTiles[i].ps_per_byte (the first of
// equals), among those whose bit is set in `allowed` (bit i: kAutoTiles[i]; tests compare with
// tables that timed only some); -1 if none is.
inline int CheapestAutoTile(const double (&tiles)[kNumAutoTiles], uint32_t allowed) {
  int best = -1;
  for (int i = 0; i < kNumAutoTiles; ++i) {
    if ((allowed >> i & 1u) == 0) continue;
    if (best < 0 || tiles[i] * kAutoTiles[i].ps_per_byte < tiles[best] * kAutoTiles[best].ps_per_byte) best = i;
  }
  return best;
}

// The index in kAutoTiles of the cheapest configuration when the experts hold `mean`
// token-slots each on average, among those allowed (CheapestAutoTile).
inline int ChooseAutoTile(double mean, uint32_t allowed = ~0u) {
  int rows[kNumAutoTiles];
  double tiles[kNumAutoTiles];
  for (int i = 0; i < kNumAutoTiles; ++i) rows[i] = kAutoTiles[i].rows;
  ExpectedTilesPerExpert(mean, rows, kNumAutoTiles, tiles);
  return CheapestAutoTile(tiles, allowed);
}

// The index in kAutoTiles of the cheapest configuration for these per-expert slot counts
// (counts[e]: the slots routed to held expert e), its tiles counted exactly: the sum over
// experts of ceil(count / rows), as the routing cuts them. Among those allowed (as above); -1
// when no slot is counted or none is allowed.
inline int ChooseAutoTileForCounts(const int32_t* counts, int n, uint32_t allowed = ~0u) {
  double tiles[kNumAutoTiles] = {};  // whole numbers, exact in a double
  bool any = false;
  for (int e = 0; e < n; ++e) {
    if (counts[e] <= 0) continue;
    any = true;
    for (int i = 0; i < kNumAutoTiles; ++i) tiles[i] += (counts[e] + kAutoTiles[i].rows - 1) / kAutoTiles[i].rows;
  }
  return any ? CheapestAutoTile(tiles, allowed) : -1;
}

}  // namespace mxserve::kernels::cuda::internal

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
// 256). Time per weight byte and tile: the mean over each configuration's forced-path runs of the
// K3-like, Kimi-K2-like and gpt-oss-120b layers on an H200 (tests/data/tile_paths; ms / (tiles x
// bytes) stays within -10 % / +12 % of it across shapes and token counts). On those runs the
// chosen configuration is at most 5 % slower than the fastest one timed (tile_choice_test).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

// SplitTiles is also the routing kernels' (moe_cuda_kernels.cu): one rule on both sides.
#if defined(__CUDACC__)
#define MXSERVE_TILE_HD __host__ __device__
#else
#define MXSERVE_TILE_HD
#endif

namespace mxserve::kernels::cuda::internal {

struct AutoTile {
  const char* path;     // the configuration's name in kPaths (moe_cuda_launch.h)
  int rows;             // its token rows per tile
  double ps_per_byte;   // its time per weight byte and tile, picoseconds (H200)
  int family;           // 0: the K-streamed decode kernel (permuted K), 1: wgmma (plain K); the
                        // two heights of one call share one (the gathered operand's order)
  // The path that runs when it is the call's only height (nullptr: itself): the decode heights at
  // 16 and 24 rows run as the TMA-fed wgmma kernel at their height (moe_cuda_forward.cc, unless
  // MXSERVE_PLAN decode_wgmma=off); in a mix they stay the decode kernel.
  const char* alone_path = nullptr;
  // That path's time per weight byte and tile, where it was fitted (0: ps_per_byte): wgmma16's.
  // Only the choice between one height and a mix uses it (AloneCost): among single heights it
  // chose no better on the runs it was fitted to.
  double alone_ps = 0;
  // Its time per weight byte and tile as the call's only height run paired (0: none): decode's,
  // whose gate_up and down then run in one launch (moe_cuda_decode_kst_pair.cu). Fitted on an
  // H100 where kAuto took the decode16 + decode mix (4 to 6 slots per expert), where the paired
  // launch ran 1.12-1.16x faster; it keeps wgmma16 at 7 slots per expert (tile_choice_test). A
  // candidate beside the single height and the mixes (CheapestMix).
  double paired_ps = 0;
};

// Where the paired candidate's cost (AutoTile::paired_ps, fitted on an H100: 3,352 GB/s peak by
// its memory clock and bus) is weighed: cards whose peak memory bandwidth is below this. On an
// H200 (4,097 GB/s by the same count) the two-launch choice ran faster at three of the four
// counts where the candidate changed it (tests/data/tile_paths/paired_ab_h200.csv),
// so there decode alone is costed as two launches.
inline constexpr double kPairedMaxPeakGBps = 3700;
inline bool PairedCostHolds(double peak_gbps) { return peak_gbps > 0 && peak_gbps < kPairedMaxPeakGBps; }

// The configurations kAuto chooses among: the K-streamed decode kernel at 8, 16 and 24 rows and
// the TMA-fed wgmma kernel at 32 ... 256 (the mma.sync prefill and weights-through-shared-memory
// paths lose everywhere measured; mid, the decode kernel at 32 rows, is within a few % of wgmma32
// either way and stays out). decode's, decode16's and wgmma16's costs: the means of their runs on
// the three shapes at 1 to 20 slots per expert (tests/data/tile_paths/paths_1_to_20_slots.csv);
// decode24's: paths_decode24_11_warps.csv (a higher fit had kAuto take decode24 + decode16
// mixes where decode24 alone ran 23-25 % slower than wgmma32); the wgmma heights': the TMA-fed
// kernel's runs (paths_wgmma_tma_fit.csv), fitted before the persistent form became the
// default at 64, 96, 192 and 256 rows (2-5 % faster there, so those heights' costs are a little
// high).
inline constexpr AutoTile kAutoTiles[] = {
    {"decode", 8, 0.294, 0, nullptr, 0, 0.255},   {"decode16", 16, 0.337, 0, "wgmma16", 0.306},  {"decode24", 24, 0.439, 0, "wgmma24"},
    {"wgmma32", 32, 0.390, 1}, {"wgmma40", 40, 0.417, 1},   {"wgmma48", 48, 0.444, 1},
    {"wgmma64", 64, 0.510, 1}, {"wgmma96", 96, 0.633, 1},   {"wgmma", 128, 0.756, 1},
    {"wgmma192", 192, 1.112, 1}, {"wgmma256", 256, 1.518, 1}};
inline constexpr int kNumAutoTiles = sizeof(kAutoTiles) / sizeof(kAutoTiles[0]);

// Configuration i's cost per weight byte and tile as the call's only height: its alone_ps where
// `alone` (its alone_path runs: MXSERVE_PLAN's decode_wgmma not off) and it has one.
inline double AloneCost(int i, bool alone) {
  return alone && kAutoTiles[i].alone_ps > 0 ? kAutoTiles[i].alone_ps : kAutoTiles[i].ps_per_byte;
}
static_assert(kNumAutoTiles <= 32, "ChooseAutoTile's mask has 32 bits");

// Calls add(x, w) for X ~ Poisson(mean) over mode +- 12 sd + 10 with w the pmf at x up to one
// factor, and returns the sum of the w (divide by it; the mass outside is below 1e-30). The pmf by
// its ratio recurrence from the mode (no lgamma). mean > 0.
template <typename Add>
inline double PoissonEach(double mean, Add&& add) {
  const double sd = std::sqrt(mean);
  const int64_t mode = static_cast<int64_t>(mean);
  const int64_t lo = std::max<int64_t>(0, mode - static_cast<int64_t>(12 * sd) - 10);
  const int64_t hi = mode + static_cast<int64_t>(12 * sd) + 10;
  double total = 0;
  auto each = [&](int64_t x, double wx) {
    total += wx;
    add(x, wx);
  };
  double w = 1;  // unnormalized pmf at the mode
  each(mode, w);
  for (int64_t x = mode; x > lo; --x) {  // pmf(x - 1) = pmf(x) x / mean
    w *= static_cast<double>(x) / mean;
    each(x - 1, w);
  }
  w = 1;
  for (int64_t x = mode; x < hi; ++x) {  // pmf(x + 1) = pmf(x) mean / (x + 1)
    w *= mean / static_cast<double>(x + 1);
    each(x + 1, w);
  }
  return total;
}

// E[ceil(X / rows[i])] for X ~ Poisson(mean), for each of n tile heights (out[i]); 0 when
// mean <= 0.
inline void ExpectedTilesPerExpert(double mean, const int* rows, int n, double* out) {
  for (int i = 0; i < n; ++i) out[i] = 0;
  if (!(mean > 0)) return;
  const double total = PoissonEach(mean, [&](int64_t x, double w) {
    for (int i = 0; i < n; ++i) out[i] += w * static_cast<double>((x + rows[i] - 1) / rows[i]);
  });
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

// ---- Two tile heights in one call ------------------------------------------------------------
// An expert of X slots costs, in tiles of H rows alone, ceil(X / H) tiles; when X is a little
// past a multiple of H the last, mostly empty tile costs as much as a full one. With a second,
// smaller height h of the same kernel family the routing cuts floor(X / H) tiles of H and the
// remainder r = X mod H into ceil(r / h) tiles of h, where those cost less than one more of H
// (r <= MixRmax), else one more of H. The GEMMs then run once per height, the second height's
// beside the first's on a side stream. A mix is taken where kMixRealized of the time the model
// says it saves is more than kMixFixedUs. Measured on an H200: with the second height after the
// first on one stream, A/B runs saved 0.68x the model's figure less 27 us (least squares); on the
// side stream the fixed part goes, and with 0.65 and 10 us kAuto's mixes ran faster than one
// height at all 21 counts where it took them (tests/data/tile_paths/mix_ab_ldg_wgmma.csv,
// tile_choice_test).
inline constexpr double kMixRealized = 0.65;
inline constexpr double kMixFixedUs = 10.0;

// kAuto's choice: kAutoTiles indices of the big height and of the small one (-1: one height), and
// the largest remainder the small tiles take (0 without them).
struct AutoChoice {
  int big = -1, small = -1, rmax = 0;
};

// The largest remainder (< big's rows) whose tiles of small's rows cost less than one of big's:
// n small tiles with n * c_small < c_big, n * rows_small rows; 0 when not even one does.
constexpr int MixRmax(int big, int small) {
  int n = 0;
  while ((n + 1) * kAutoTiles[small].ps_per_byte < kAutoTiles[big].ps_per_byte) ++n;
  return std::min(kAutoTiles[big].rows - 1, n * kAutoTiles[small].rows);
}

// Tiles of an expert of `count` slots under a choice: *nb of the big height, *ns of the small
// (small_rows 0: one height). The big tiles take the expert's first nb * big_rows slots (the last
// one partial when ns is 0), the small ones the rest.
MXSERVE_TILE_HD inline void SplitTiles(int count, int big_rows, int small_rows, int rmax, int* nb, int* ns) {
  *nb = count / big_rows;
  const int r = count - *nb * big_rows;
  *ns = 0;
  if (r == 0) return;
  if (small_rows > 0 && r <= rmax) {
    *ns = (r + small_rows - 1) / small_rows;
  } else {
    ++*nb;
  }
}

// Writes the tiles of rows [from, to) of held expert h, whose first row is `row`, `rows` rows
// each (the last one partial), as (h, first row, rows) at list[3 * first] on; returns the next
// index. The routing kernels write every tile list with it (SplitTiles gives from and to).
MXSERVE_TILE_HD inline int WriteTiles(int32_t* list, int first, int h, int row, int from, int to, int rows) {
  for (int i = from; i < to; i += rows, ++first) {
    list[3 * first] = h;
    list[3 * first + 1] = row + i;
    list[3 * first + 2] = rows < to - i ? rows : to - i;
  }
  return first;
}

// The model's cost (ps per weight byte of one expert) of an expert of `count` slots under c.
inline double ChoiceCost(const AutoChoice& c, int count) {
  int nb = 0, ns = 0;
  SplitTiles(count, kAutoTiles[c.big].rows, c.small < 0 ? 0 : kAutoTiles[c.small].rows, c.rmax, &nb, &ns);
  return nb * kAutoTiles[c.big].ps_per_byte + (ns > 0 ? ns * kAutoTiles[c.small].ps_per_byte : 0.0);
}

// Below this mean the experts' slots rarely pass one tile and a second height cannot pay: the
// mix is not searched (decode calls stay as cheap to plan as before).
inline constexpr double kMixMinMean = 3.0;

// Whether a mix the model says saves `saved` ps per byte of `bytes` is taken (kMixRealized).
inline bool MixPays(double saved, double bytes) { return kMixRealized * saved * bytes * 1e-6 > kMixFixedUs; }

// The one-height choice `single`, or a height alone that runs paired (paired_ps; where `paired`)
// and costs less, or the two-height choice of one family among the allowed that saves the most
// against the better of those where that pays (MixPays). `cost` maps an AutoChoice to its cost in
// ps per byte of `bytes`; the single height's is scaled to its AloneCost (`alone`).
template <typename Cost>
inline AutoChoice CheapestMix(int single, double bytes, uint32_t allowed, bool alone, bool paired, Cost&& cost) {
  AutoChoice best{single, -1, 0};
  double single_cost = AloneCost(single, alone) / kAutoTiles[single].ps_per_byte * cost(best);
  for (int i = 0; paired && i < kNumAutoTiles; ++i) {
    if ((allowed >> i & 1u) == 0 || !(kAutoTiles[i].paired_ps > 0)) continue;
    const AutoChoice c{i, -1, 0};
    const double v = kAutoTiles[i].paired_ps / kAutoTiles[i].ps_per_byte * cost(c);
    if (v < single_cost) {
      best = c;
      single_cost = v;
    }
  }
  double best_cost = single_cost;
  for (int i = 0; i < kNumAutoTiles; ++i) {
    if ((allowed >> i & 1u) == 0) continue;
    for (int j = 0; j < kNumAutoTiles; ++j) {
      if ((allowed >> j & 1u) == 0 || kAutoTiles[j].rows >= kAutoTiles[i].rows ||
          kAutoTiles[j].family != kAutoTiles[i].family) {
        continue;
      }
      const AutoChoice c{i, j, MixRmax(i, j)};
      if (c.rmax == 0) continue;
      const double v = cost(c);
      if (v < best_cost && MixPays(single_cost - v, bytes)) {
        best = c;
        best_cost = v;
      }
    }
  }
  return best;
}

// kAuto's choice, one height or two, when the experts hold `mean` slots each on average
// (uniform routing: Poisson), among the allowed configurations; layer_bytes: the weight bytes of
// the experts the mean is over; alone: a single height costs its AloneCost; paired: decode alone
// runs paired (its paired_ps). big -1 when none is allowed.
inline AutoChoice ChooseAutoMix(double mean, double layer_bytes, uint32_t allowed = ~0u, bool alone = true,
                                bool paired = true) {
  const int single = ChooseAutoTile(mean, allowed);
  if (single < 0 || !(mean >= kMixMinMean)) return AutoChoice{single, -1, 0};
  auto expect = [mean](const AutoChoice& c) {
    double v = 0;
    const double total = PoissonEach(mean, [&](int64_t x, double w) { v += w * ChoiceCost(c, int(x)); });
    return v / total;
  };
  return CheapestMix(single, layer_bytes, allowed, alone, paired, expect);
}

// The same for these per-expert slot counts (exactly as the routing cuts them), each expert of
// expert_bytes; big -1 when no slot is counted or none is allowed. On the worker's path per call:
// the costs are sums over experts of a function of the count, so each distinct count is costed
// once (a few dozen distinct counts for hundreds of experts).
inline AutoChoice ChooseAutoMixForCounts(const int32_t* counts, int n, double expert_bytes, uint32_t allowed = ~0u,
                                         bool alone = true, bool paired = true) {
  const int single = ChooseAutoTileForCounts(counts, n, allowed);
  if (single < 0) return AutoChoice{};
  thread_local std::vector<int32_t> sorted;
  thread_local std::vector<std::pair<int32_t, int>> runs;  // (count > 0, experts with it)
  sorted.assign(counts, counts + n);
  std::sort(sorted.begin(), sorted.end());
  runs.clear();
  int64_t slots = 0, hit = 0;
  for (const int32_t c : sorted) {
    if (c <= 0) continue;
    slots += c;
    ++hit;
    if (!runs.empty() && runs.back().first == c) {
      ++runs.back().second;
    } else {
      runs.emplace_back(c, 1);
    }
  }
  if (double(slots) < kMixMinMean * double(hit)) return AutoChoice{single, -1, 0};
  auto sum = [](const AutoChoice& c) {
    double v = 0;
    for (const auto& [count, experts] : runs) v += experts * ChoiceCost(c, count);
    return v;
  };
  return CheapestMix(single, expert_bytes, allowed, alone, paired, sum);
}

}  // namespace mxserve::kernels::cuda::internal

// Routing for the smallest batches (at most kTinyPairs token-slots), worked out by each CTA of
// the fused one-launch layer (moe_cuda_fused.cu) instead of by a routing kernel. Plain C++ so
// that the CPU tests check it against a sort (tiny_route_test.cc).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "kernels/cuda/moe_cuda_gemm_args.h"

#ifdef __CUDACC__
#define MXSERVE_HD __host__ __device__
#else
#define MXSERVE_HD
#endif

namespace mxserve::kernels::cuda::internal {

constexpr int kTinyPairs = 4;

// What the fused kernel reads instead of the routing kernel's output (a separate kernel
// argument: growing GemmArgs changes the code of every GEMM kernel).
struct SelfRoute {
  const int32_t* ids = nullptr;    // [pairs] expert ids
  const int32_t* local = nullptr;  // [experts] expert id -> held index, or -1
  int pairs = 0, experts = 0;
  const float* x = nullptr;        // [T][hidden] fp32 (gate_up gathers its rows from it)
  int hidden = 0, top_k = 1;
  // held_n >= 0: the held experts are exactly [held_lo, held_lo + held_n), in order (HeldIndex),
  // and `local` is not read.
  int held_lo = 0, held_n = -1;
};

// How the fused kernel's grid shares a layer's weights: gate_up units (tile x 16-row group of
// the 2I rows, numbered tile * ng_gu + group) and down row groups (8 rows of H, for every tile).
struct FusedWork {
  // 16-byte units of one gate_up unit (16 rows x K, and scales), and what one down group of one
  // tile counts for in the split: its 16-byte units (8 rows) x down_pct / 100 (FusedWorkOf).
  uint32_t ca = 0, cd = 0;
  int ng_gu = 0, ngd = 0;   // row groups of gate_up (2I / 16) and down (H / 8)
  int ntiles = 0;           // held experts hit
};
// A gate_up unit is two 8-row groups of the upload layout (4 kp bytes and 32 bytes of scales per
// chunk each; kp is even); a down unit is two (8-row group, tile) items of the CTA's (FusedDownItem),
// so the down work, the CTA's work after the grid barrier, comes in 8-row steps: gpt-oss-120b's
// 360 groups give every CTA of 132 two or three (24 rows at most), where 16-row groups gave 48 of
// them two (32 rows) and the rest one. down_pct weighs the down items' bytes in the split (100:
// every CTA reads about as many weight bytes; 0: every CTA gets as many gate_up units).
MXSERVE_HD inline FusedWork FusedWorkOf(const GemmArgs& g, const GemmArgs& d, int ntiles, int down_pct) {
  FusedWork w;
  w.ca = uint32_t(g.kp / 2 + 4 * g.chunks);
  w.cd = uint32_t(d.kp / 4 + 2 * d.chunks) * uint32_t(down_pct) / 100u;
  w.ng_gu = g.n >> 4;
  w.ngd = d.n >> 3;
  w.ntiles = ntiles;
  return w;
}
// One piece of the fused kernel's work: unit (gate_up when gu), K chunks [c0, c1) of its two
// 8-row halves A (mma rows 0-7) and B (rows 8-15). gate_up: tile `tile`, 16-row group `grp`
// (halves 8-row groups 2 grp and 2 grp + 1). down: half A is 8-row group grp of tile `tile`,
// half B grp_b of tile_b (FusedDownItem), or (dup) a copy of A whose outputs are dropped. Each CTA
// lists its pieces once in shared memory (the kernel reads them twice: to request a piece and to
// compute it), with what the request needs worked out there, off the requesting lane's path:
// qa / sa, qb / sb the halves' weights / scales at chunk c0, wb weight bytes per half; part: its
// K part of the unit.
struct alignas(16) FusedPiece {
  const uint8_t *qa, *sa, *qb, *sb;
  int wb, part, gu, unit, tile, grp, tile_b, grp_b, dup, c0, c1;
};
// Down item i of a CTA whose down groups are [r0, r1) with nt tiles: group r0 + i / nt, tile
// i % nt (items 2u and 2u + 1 make down unit u; an odd last item is paired with itself).
MXSERVE_HD inline void FusedDownItem(int i, int r0, int nt, int& grp, int& tile) {
  grp = r0 + i / nt;
  tile = i - (i / nt) * nt;
}
// The down units of a CTA with `groups` down groups and nt tiles.
MXSERVE_HD inline int FusedDownUnits(int groups, int nt) { return (groups * nt + 1) / 2; }
// K part q of `parts` of a unit: chunks [c0, c1), and the bytes of one 8-row group's weights
// there (the 64-K tail chunk, index nfull, is 256 bytes).
MXSERVE_HD inline void PieceChunks(int q, int parts, int chunks, int& c0, int& c1) {
  c0 = q * chunks / parts;
  c1 = (q + 1) * chunks / parts;
}
MXSERVE_HD inline int PieceWeightBytes(int c0, int c1, int nfull) {
  return (c1 > nfull ? nfull * 512 + 256 : c1 * 512) - c0 * 512;
}
// CTA b of G: gate_up units [a0, a1) and down groups [r0, r1) (all tiles), cut so that every CTA
// gets about as much work (ca per gate_up unit, cd per down group and tile). The same
// arithmetic on every CTA makes the ranges chain (a1 of b is a0 of b + 1, unless a range came
// out empty: then it only repeats units of its neighbour), so every unit is computed, and none
// is skipped.
struct FusedRange {
  int a0 = 0, a1 = 0, r0 = 0, r1 = 0;
};
// All in 32 bits (64-bit divisions are slow subroutines on the GPU, ~2 us of the kernel's
// critical path): needs FusedFits32 (the plan checks it, for the most tiles).
MXSERVE_HD inline uint32_t FusedTotal(const FusedWork& w) {
  return uint32_t(w.ntiles) * (uint32_t(w.ng_gu) * w.ca + uint32_t(w.ngd) * w.cd);
}
inline bool FusedFits32(const FusedWork& w, int G) {
  const uint64_t nt = uint64_t(w.ntiles);
  return nt * (uint64_t(w.ng_gu) * w.ca + uint64_t(w.ngd) * w.cd) * uint64_t(G + 1) < (uint64_t(1) << 32) &&
         uint64_t(w.ngd) * uint64_t(G + 1) < (uint64_t(1) << 31);
}
MXSERVE_HD inline int FusedAStart(const FusedWork& w, int b, int G) {
  const uint32_t na = uint32_t(w.ntiles) * uint32_t(w.ng_gu);
  // (b * ngd / G) * ntiles * cd <= b * total / G, so v >= 0.
  const uint32_t v = uint32_t(b) * FusedTotal(w) / uint32_t(G) -
                     (uint32_t(b) * uint32_t(w.ngd) / uint32_t(G)) * uint32_t(w.ntiles) * w.cd;
  const uint32_t a = v / w.ca;
  return int(a < na ? a : na);
}
MXSERVE_HD inline FusedRange FusedCtaRange(const FusedWork& w, int b, int G) {
  FusedRange r;
  r.a0 = FusedAStart(w, b, G);
  const int next = FusedAStart(w, b + 1, G);
  r.a1 = next > r.a0 ? next : r.a0;
  r.r0 = int(uint32_t(b) * uint32_t(w.ngd) / uint32_t(G));
  r.r1 = int(uint32_t(b + 1) * uint32_t(w.ngd) / uint32_t(G));
  return r;
}

// FusedArgs::stride: CTA b of G takes gate_up units b, b + G, b + 2G, ... (of the
// ntiles * ng_gu), this many, instead of its range [a0, a1): each CTA's weights spread over the
// whole layer's instead of one stretch of it.
MXSERVE_HD inline int FusedStridedUnits(const FusedWork& w, int b, int G) {
  const uint32_t n = uint32_t(w.ntiles) * uint32_t(w.ng_gu);
  return uint32_t(b) < n ? int((n - uint32_t(b) + uint32_t(G) - 1) / uint32_t(G)) : 0;
}

// MXSERVE_PLAN's fused= pins the fused kernel's configuration (benchmarks): "off" (or "0"), or
// <parts>x<depth>[w<warps>] (K parts per unit, shared-memory slots per warp (1-3), warps per CTA)
// of a built one; empty or "default": the default, 4x2 with 16 warps. The plan gives each warp
// `depth` slots where they fit, else as many slots as fit, spread over the warps (FusedArgs::deep):
// at gpt-oss-120b's shapes 16 warps fit two each (200,652 bytes), 24 warps 39 slots. At one token
// 6x2w16 ran 3 % faster than 6x2w24 with one slot per warp, and filling the rest of the shared
// memory with slots (6x3w16, 6x2w20, 6x2w24 at 39 slots) did not pay. Since the down work comes
// in 8-row items and the fused kernel scales after the mma, 4x2w16 (28 slots: 4 K parts make
// larger pieces) is 3-4 % faster than 6x2w16 at one token of gpt-oss-120b, and 8 K parts for the
// down units alone slower (more pieces, each with its own overhead, after the grid barrier).
// Built (FusedBuilt): 16 warps with 3, 4, 6 or 8 parts, 20 with 6, 24 with 4, 6 or 8, 32 with 6
// (111, 93, 79 and 64 registers; a few spilled at 32). Anything else comes back valid = false.
// kAuto's configuration, the one kernels/cuda builds (the others are kernels/cuda/lab's).
inline constexpr int kFusedWarps = 16, kFusedParts = 4;
struct FusedPinned {
  bool off = false, valid = true;
  int parts = kFusedParts, depth = 2, warps = kFusedWarps;
};
inline bool FusedBuilt(int warps, int parts) {
  return (warps == 16 && (parts == 3 || parts == 4 || parts == 6 || parts == 8)) || (warps == 20 && parts == 6) ||
         (warps == 24 && (parts == 4 || parts == 6 || parts == 8)) ||
         (warps == 32 && parts == 6);
}
inline FusedPinned ParseFusedPin(const std::string& s) {
  FusedPinned p;
  if (s.empty() || s == "default") return p;  // "default": what tests/gpu/run_all.sh envab passes
  if (s == "off" || s == "0") {
    p.off = true;
    return p;
  }
  int parts = 0, depth = 0, warps = 16, used = 0;
  char x = 0;
  const int n = std::sscanf(s.c_str(), "%d%c%d%n", &parts, &x, &depth, &used);
  bool ok = n == 3 && x == 'x' && depth >= 1 && depth <= 3;
  if (ok && used < int(s.size())) {  // "w<warps>" and nothing after it
    int more = 0;
    ok = std::sscanf(s.c_str() + used, "w%d%n", &warps, &more) == 1 && used + more == int(s.size());
  }
  if (!ok || !FusedBuilt(warps, parts)) {
    p.valid = false;
    return p;
  }
  p.parts = parts;
  p.depth = depth;
  p.warps = warps;
  return p;
}

// What the routing kernel writes for such a batch with 8-row tiles: one tile per held expert
// hit, in ascending held index, its rows in slot order (the routing kernel's order within an
// expert is arbitrary; every row is computed independently, so nothing depends on it).
struct TinyRoute {
  int ntiles = 0;
  int e[kTinyPairs] = {}, row0[kTinyPairs] = {}, rows[kTinyPairs] = {};  // per tile
  int sorted[kTinyPairs] = {};  // row -> slot
};

// The fused kernel's other arguments (moe_cuda_fused.cu sets them).
struct FusedArgs {
  float* out = nullptr;      // [T][hidden] fp32
  uint32_t* sync = nullptr;  // [1] grid barrier: arrivals of every launch (GridBarrier; zeroed once)
  int tokens = 0;
  int depth = 1;             // shared-memory slots per warp
  int deep = 0;              // warps 0 .. deep - 1 have one more (the plan fills what fits)
  int slot_bytes = 0;        // the largest piece (a K part of one unit) of either GEMM, with scales
  int a_stride = 0;          // bytes per activation row in shared memory
  int max_units = 0;         // most units of one CTA (partial sums, counters, biases sized by it)
  int groups = 0;            // most down row groups (8 rows) of one CTA
  int down_pct = 100;        // the down units' weight in the grid's split (FusedWorkOf)
  bool stride = false;       // gate_up units strided over the grid (FusedStridedUnits)
  // A warp asks for its first down pieces once its gate_up pieces are computed, not as soon as a
  // slot is free (MXSERVE_PLAN fused_defer=warp|off): the grid barrier waits for the last
  // CTA's gate_up, and down pieces asked for earlier compete with its pieces for DRAM.
  bool defer = false;
  // Benchmarks only, wrong results (MXSERVE_PLAN's fused_probe): 1 loads without the math,
  // 2 the math without loads, 3 neither, 4 neither and no grid barrier, 5 exit after the
  // routing, 6 exit at once, 8 no per-token sums (out not written), 9 loads and math without the
  // grid barrier (the down pieces read whatever the operand holds: what a layer whose down GEMM
  // did not wait for the whole grid's gate_up could reach at most); 7 (right results)
  // timestamps of the phases (FusedStampsReport)
  // (where a one-token layer's time goes: docs/PERFORMANCE.md).
  int probe = 0;
  // The weight pieces' bulk copies ask L2 to evict their lines first (L2ReadOncePolicy; false,
  // MXSERVE_PLAN evict_first=off for benchmarks: evict_normal).
  bool evict_first = false;
  // host_route: the batch's route, made on the host from its ids (CudaMoeBatch::host_expert_ids,
  // the worker's path), so the kernel reads no ids and lists its pieces while it gathers x.
  bool host_route = false;
  TinyRoute route{};
};

// One fused launch: its configuration (warps, K parts), arguments and dynamic shared memory
// (moe_cuda_fused.cu: Plan; warps 0: it does not fit this device).
struct FusedPlan {
  int warps = 0, parts = 0;
  FusedArgs f{};
  size_t smem = 0;
};

// The slots of a CTA of `warps` warps (f.depth each, one more in the first f.deep).
MXSERVE_HD inline int FusedSlotCount(const FusedArgs& f, int warps) { return warps * f.depth + f.deep; }
// The fused kernel's shared-memory slots: up to `depth` per warp, as many as fit in `room` bytes
// of slot_bytes each, f.depth for every warp and one more for the first f.deep; false (f left as
// it was) when not even one per warp fits.
inline bool FusedSlots(size_t room, int slot_bytes, int warps, int depth, FusedArgs& f) {
  if (slot_bytes <= 0 || warps <= 0 || depth <= 0 || room / size_t(slot_bytes) < size_t(warps)) return false;
  const size_t fit = room / size_t(slot_bytes);
  const int n = fit < size_t(warps) * size_t(depth) ? int(fit) : warps * depth;
  f.depth = n / warps;
  f.deep = n % warps;
  return true;
}

// The held index of global expert id e: -1 when out of range or not held; with held_n >= 0 the
// held experts are exactly [held_lo, held_lo + held_n) (a worker holding one contiguous range, or
// all of them), e - held_lo, without reading local: the fused kernel's routing then waits for one
// dependent global read (the ids) instead of two.
MXSERVE_HD inline int HeldIndex(int e, const int32_t* local, int num_experts, int held_lo, int held_n) {
  if (e < 0 || e >= num_experts) return -1;
  if (held_n >= 0) return e >= held_lo && e - held_lo < held_n ? e - held_lo : -1;
  return local[e];
}

// ids [pairs] (pairs <= kTinyPairs): global expert ids, -1 or out of range = skipped slot;
// local [num_experts]: held index, or -1 for an expert this worker does not hold (HeldIndex).
MXSERVE_HD inline TinyRoute MakeTinyRoute(const int32_t* ids, int pairs, const int32_t* local,
                                          int num_experts, int held_lo = 0, int held_n = -1) {
  TinyRoute r;
  int h[kTinyPairs];
  for (int i = 0; i < kTinyPairs; ++i) {
    h[i] = HeldIndex(i < pairs ? ids[i] : -1, local, num_experts, held_lo, held_n);
  }
  int row = 0, prev = -1;
  for (int n = 0; n < kTinyPairs; ++n) {  // the next held expert above prev, if any
    int next = -1;
    for (int i = 0; i < kTinyPairs; ++i) {
      if (h[i] > prev && (next < 0 || h[i] < next)) next = h[i];
    }
    if (next < 0) break;
    r.e[r.ntiles] = next;
    r.row0[r.ntiles] = row;
    for (int i = 0; i < kTinyPairs; ++i) {
      if (h[i] == next) r.sorted[row++] = i;
    }
    r.rows[r.ntiles] = row - r.row0[r.ntiles];
    ++r.ntiles;
    prev = next;
  }
  return r;
}

}  // namespace mxserve::kernels::cuda::internal

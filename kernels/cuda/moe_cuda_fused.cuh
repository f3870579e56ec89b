// The one-launch layer's kernel (FusedDecodeKernel: moe_cuda_fused.cu says what it does and
// why) and its launcher: templates that moe_cuda_fused.cu instantiates in the configuration kAuto
// runs (16 warps, 4 K parts) and kernels/cuda/lab in the others. The stamps (FusedArgs::probe 7)
// go to this translation unit's g_stamps; FusedStampsTable reads them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "kernels/cuda/moe_cuda_tiny_route.h"

namespace mxserve::kernels::cuda::internal {

namespace {

// old = *p; *p = old >= lim ? 0 : old + 1.
__device__ __forceinline__ uint32_t AtomIncAcqRelGpu(uint32_t* p, uint32_t lim) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(lim) : "memory");
  return old;
}

// MXSERVE_PLAN fused_probe=stamps: %globaltimer (ns) of thread 0 of each CTA at the phase
// boundaries of the last call, read back by FusedStampsReport.
constexpr int kStampCtas = 1024, kStamps = 10;
__device__ uint64_t g_stamps[kStampCtas][kStamps];
__device__ uint32_t g_stamp_sm[kStampCtas];  // each CTA's SM (%smid)
__device__ __forceinline__ void Stamp(const FusedArgs& f, int i) {
  if (f.probe != 7 || threadIdx.x != 0 || blockIdx.x >= kStampCtas) return;
  g_stamps[blockIdx.x][i] = GlobalTimer();
  if (i == 0) {
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    g_stamp_sm[blockIdx.x] = sm;
  }
}

// Every CTA of the grid arrives; returns once all have (co-residency is guaranteed by the
// cooperative launch). sync[0] counts the arrivals of every launch, modulo G * 2^20 (atom.inc
// wraps there, at a multiple of G), so each launch finds it at a multiple of G, base, and is
// through once the count has left [base, base + G): the last arrival's own increment releases
// the others. Launches on one workspace are stream-ordered, never concurrent (no PDL), so no
// launch's arrivals mix with another's. Each step on the critical path is a round trip to L2
// that queues behind the weights in flight (~1 us): a generation word bumped by the last
// arrival, as an earlier form of this barrier had, adds one (one token of gpt-oss-120b
// 0.0362-0.0364 ms against 0.0365-0.0368). Writes of the CTA before the barrier are visible
// to plain or .cg loads of any CTA after it: bar.sync orders them before thread 0's release, and
// every arrival is acq_rel, so the chain of increments carries all of them to each acquire load
// that sees the last (acq_rel atomics and acquire loads, not sequentially consistent fences:
// those waited for every store in flight, about a microsecond each).
__device__ void GridBarrier(uint32_t* sync, const FusedArgs& f) {
  __syncthreads();
  Stamp(f, 4);
  if (threadIdx.x == 0) {
    const uint32_t G = gridDim.x;
    const uint32_t old = AtomIncAcqRelGpu(sync, (G << 20) - 1u);
    Stamp(f, 9);
    const uint32_t base = old - old % G;
    if (old - base != G - 1u) {
      while (LdAcquire(sync) - base < G) __nanosleep(32);
    }
  }
  __syncthreads();
}

}  // namespace

// One 64-K tail or 128-K chunk c of a 16-row unit with the weights as the mma A operand (rows
// 0-7 group A, 8-15 group B; BlockMmaA) and up to 8 token rows as B (activation rows in shared
// memory, permuted K order: arow = this lane's token row at element t*32 of chunk 0). Two
// accumulator sets alternate by block; acc[s][0][j]: set s, k16-step parity j.
template <bool kOneMul, bool kTail>
__device__ __forceinline__ void SmemChunkMmaA(float (&acc)[2][1][2][4], const uint8_t* swa, const uint8_t* swb,
                                              const uint8_t* ssa, const uint8_t* ssb, const uint8_t* arow, int c,
                                              int lane) {
  const int g = lane >> 2, t = lane & 3;
  const uint32_t sa = *reinterpret_cast<const uint32_t*>(ssa + c * 32 + g * 4);
  const uint32_t sb = *reinterpret_cast<const uint32_t*>(ssb + c * 32 + g * 4);
  // kOneMul (fast-path scales): the scales after the mma (x and the down operand are stored times
  // kPostActScale).
  if constexpr (!kTail) {
    const uint4 qa = *reinterpret_cast<const uint4*>(swa + c * 512 + lane * 16);
    const uint4 qb = *reinterpret_cast<const uint4*>(swb + c * 512 + lane * 16);
    uint4 x[4][1];
#pragma unroll
    for (int b = 0; b < 4; ++b) x[b][0] = *reinterpret_cast<const uint4*>(arow + c * 256 + 16 * b);
    BlockMmaA<kOneMul, 1, kOneMul>(acc[0], qa.x, qb.x, sa, sb, 0, x[0]);
    BlockMmaA<kOneMul, 1, kOneMul>(acc[1], qa.y, qb.y, sa, sb, 1, x[1]);
    BlockMmaA<kOneMul, 1, kOneMul>(acc[0], qa.z, qb.z, sa, sb, 2, x[2]);
    BlockMmaA<kOneMul, 1, kOneMul>(acc[1], qa.w, qb.w, sa, sb, 3, x[3]);
  } else {  // 8 bytes per lane, two blocks, 16 elements per lane
    const uint2 qa = *reinterpret_cast<const uint2*>(swa + c * 512 + lane * 8);
    const uint2 qb = *reinterpret_cast<const uint2*>(swb + c * 512 + lane * 8);
    const uint8_t* tr = arow - t * 32 + c * 256;
    uint4 x[2][1];
    x[0][0] = *reinterpret_cast<const uint4*>(tr);
    x[1][0] = *reinterpret_cast<const uint4*>(tr + 16);
    BlockMmaA<kOneMul, 1, kOneMul>(acc[0], qa.x, qb.x, sa, sb, 0, x[0]);
    BlockMmaA<kOneMul, 1, kOneMul>(acc[1], qa.y, qb.y, sa, sb, 1, x[1]);
  }
}

// One CTA per SM, kWarps warps. A unit is 16 weight rows (two 8-row groups of the upload layout)
// of one held expert over all of K; the work comes in pieces: one of kParts K ranges of a unit.
// Each warp has `depth` shared-memory slots (f.depth, or one more: f.deep) that its lane 0 fills
// with one piece's weights and scales (four bulk copies); with f.defer its first down pieces only
// once its gate_up pieces are computed (kFusedDefer).
//
// The CTA's units are a range of gate_up units and then the down row groups [r0, r1) (8 rows of
// H) for every tile, two (group, tile) items per unit (FusedDownItem; FusedCtaRange: by default
// every CTA gets about as many gate_up units, its work before the grid barrier; kFusedDownPct). Warp
// w takes pieces w, w + kWarps, ... (the parts of a unit go to neighbouring warps, which run
// together); as soon as a piece is computed its slot is refilled with the warp's next one, so the
// down weights are already in flight (or landed) while the grid waits for the last gate_up rows.
// The warp that finishes a unit's last part sums the parts' fp32 partials in part order
// (deterministic) and runs the unit's epilogue.
// 1. Thread 0 works the tiles out from the expert ids (MakeTinyRoute) while the CTA converts the
//    tokens' rows of x to bf16 (permuted K order) in shared memory; lane 0 of every warp requests
//    its first pieces, the last warp the CTA's units' biases (shared memory).
// 2. gate_up pieces (SmemChunkMmaA); the unit epilogue adds the bias, applies SwiGLU and writes
//    the down operand to global memory (StoreTileA, as the kst decode kernel).
// 3. Grid barrier; the down operand's rows into shared memory.
// 4. down pieces; the unit epilogue writes bias x routing weight per slot to shared memory; then
//    each CTA sums its rows of every token over the token's slots in slot order (the combine
//    kernel's order) into out.
template <int kWarps, int kParts, bool kOneMul>
__global__ void __launch_bounds__(32 * kWarps, 1)
    FusedDecodeKernel(const GemmArgs g, const GemmArgs d, const SelfRoute sr, const FusedArgs f) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t bars[3 * kWarps + 1];  // the slots', then the biases'
  uint64_t* bias_bar = &bars[3 * kWarps];
  __shared__ TinyRoute s_route[1];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gl = lane >> 2, t = lane & 3;
  // This warp's slots: f.depth, one more in the first f.deep warps (slot i of warp w is
  // w + kWarps * i, so the grid's slots are numbered 0 .. nslots - 1).
  const int depth = f.depth + (warp < f.deep ? 1 : 0), nslots = FusedSlotCount(f, kWarps);
  uint8_t* slots = smem;
  uint8_t* sa = smem + size_t(f.slot_bytes) * nslots;  // kTinyPairs rows of a_stride
  float4* part = reinterpret_cast<float4*>(sa + kTinyPairs * f.a_stride);  // [units][kParts][16]
  float* ys = reinterpret_cast<float*>(part + size_t(f.max_units) * kParts * 16);  // [groups][kTinyPairs][8]
  float* bias = ys + f.groups * kTinyPairs * 8;                                   // [units][16]
  FusedPiece* s_piece = reinterpret_cast<FusedPiece*>(bias + f.max_units * 16);  // [units * kParts]
  int* cnt = reinterpret_cast<int*>(s_piece + f.max_units * kParts);             // [units]

  __shared__ float s_w[kTinyPairs];  // routing weights by slot
  __shared__ int s_tok[kTinyPairs];  // the token of each held row (sorted slot / top_k)
  if (f.probe == 6) return;
  Stamp(f, 0);
  // Thread 0 routes: one dependent global read, the ids, when the held experts are one range
  // (SelfRoute::held_n), else two (then the held-index table; reading the whole table into
  // shared memory in parallel did not shorten the phase); with f.host_route it
  // copies the route from the arguments.
  if (threadIdx.x == 0) {
    s_route[0] = f.host_route ? f.route : MakeTinyRoute(sr.ids, sr.pairs, sr.local, sr.experts, sr.held_lo, sr.held_n);
    for (int i = 0; i < nslots; ++i) MbarInit(&bars[i], 1);
    MbarInit(bias_bar, 32);  // one arrival per lane of the last warp
    FenceMbarInit();
  }
  for (int i = threadIdx.x; i < f.max_units; i += 32 * kWarps) cnt[i] = 0;
  // The routing weights (needed by the down epilogue only), then the tokens' rows of x, bf16 in
  // permuted K order (row = token: at most kTinyPairs), by threads [0, n). (Asking for the first
  // weight pieces before this gather was slower: docs/PERFORMANCE.md.)
  auto gather_x = [&](int n) {
    const int i = threadIdx.x;
    const bool wl = i >= 1 && i <= sr.pairs;
    const float w = wl ? __ldg(d.route_w + i - 1) : 0.f;  // (stored after the gather's loads are sent)
    const int items = g.kp / 8;
    for (int j = i; j < f.tokens * items; j += n) {
      const int r = j / items;
      GatherItem(sr.x + int64_t(r) * sr.hidden, reinterpret_cast<uint16_t*>(sa + r * f.a_stride), j - r * items,
                 g.nfull, sr.hidden, false, kOneMul ? kPostActScale : 1.f);
    }
    if (wl) s_w[i - 1] = w;
  };
  // With a host route warps [0, kGatherWarps) gather x while the rest list the pieces; otherwise
  // all of them gather x first (the list needs thread 0's route).
  constexpr int kGatherWarps = kWarps - kWarps / 4;
  if (!f.host_route) gather_x(32 * kWarps);
  __syncthreads();
  Stamp(f, 1);
  if (f.probe == 5) return;
  const TinyRoute& rt = s_route[0];
  const int nt = rt.ntiles;
  const int prow = nt > 0 ? rt.row0[nt - 1] + rt.rows[nt - 1] : 0;  // rows = held slots

  const FusedWork work = FusedWorkOf(g, d, nt, f.down_pct);
  const FusedRange range = FusedCtaRange(work, blockIdx.x, gridDim.x);
  const int na = f.stride ? FusedStridedUnits(work, blockIdx.x, gridDim.x) : range.a1 - range.a0;
  const int nd_items = (range.r1 - range.r0) * nt;  // down (8-row group, tile) items
  const int nu = na + FusedDownUnits(range.r1 - range.r0, nt);
  const int npa = na * kParts, np = nu * kParts;  // pieces: gate_up, all

  // Piece p: unit p / kParts (gate_up when < na, else down), K part p % kParts, chunks [c0, c1);
  // gate_up: its tile and 16-row group (of 2I); down: its two (8-row group of H, tile) items. The
  // CTA lists its pieces once: issue and compute each looked a piece up, redoing the divisions
  // (1.5 % of the one-token layer).
  using Piece = FusedPiece;
  if (threadIdx.x < prow) s_tok[threadIdx.x] = rt.sorted[threadIdx.x] / sr.top_k;
  auto make_piece = [&](int p) {
    Piece pc;
    pc.unit = p / kParts;
    pc.gu = pc.unit < na;
    pc.part = p % kParts;
    int64_t ga, gb;  // the halves' 8-row groups, numbered over the held experts
    if (pc.gu) {
      const int ua = f.stride ? int(blockIdx.x) + pc.unit * int(gridDim.x) : range.a0 + pc.unit;
      pc.tile = pc.tile_b = ua / work.ng_gu;
      pc.grp = ua % work.ng_gu;
      pc.grp_b = pc.grp;
      pc.dup = 0;
      ga = 2 * (int64_t(rt.e[pc.tile]) * work.ng_gu + pc.grp);
      gb = ga + 1;
    } else {
      const int i = 2 * (pc.unit - na);
      FusedDownItem(i, range.r0, max(nt, 1), pc.grp, pc.tile);
      pc.dup = i + 1 >= nd_items;
      if (pc.dup) {
        pc.grp_b = pc.grp, pc.tile_b = pc.tile;
      } else {
        FusedDownItem(i + 1, range.r0, max(nt, 1), pc.grp_b, pc.tile_b);
      }
      ga = int64_t(rt.e[pc.tile]) * work.ngd + pc.grp;
      gb = int64_t(rt.e[pc.tile_b]) * work.ngd + pc.grp_b;
    }
    // (selects, not a reference to g or d: that would copy both arguments to local memory)
    const int chunks = pc.gu ? g.chunks : d.chunks;
    PieceChunks(pc.part, kParts, chunks, pc.c0, pc.c1);
    pc.wb = PieceWeightBytes(pc.c0, pc.c1, pc.gu ? g.nfull : d.nfull);
    const int64_t gbytes = 4 * int64_t(pc.gu ? g.kp : d.kp), sbytes = 32 * chunks;  // one 8-row group's
    const uint8_t* q = (pc.gu ? g.q : d.q) + pc.c0 * 512;
    const uint8_t* sc = (pc.gu ? g.sc : d.sc) + pc.c0 * 32;
    pc.qa = q + ga * gbytes, pc.qb = q + gb * gbytes;
    pc.sa = sc + ga * sbytes, pc.sb = sc + gb * sbytes;
    return pc;
  };
  // Half B's first mma B column (run, the down epilogue): 0 when both halves are of one tile (its
  // rows feed both), else after half A's tile rows.
  auto col_b0 = [&](const Piece& pc) { return pc.tile_b == pc.tile ? 0 : rt.rows[pc.tile]; };
  // A piece in its slot: group A's and group B's weights of chunks [c0, c1), wb bytes each, then
  // their scales, sb bytes each.
  const uint64_t pol = L2ReadOncePolicy(f.evict_first);
  auto issue_piece = [&](const Piece& pc, int s) {  // lane 0
    const int wb = pc.wb, sb = 32 * (pc.c1 - pc.c0);
    uint8_t* sl = slots + size_t(s) * f.slot_bytes;
    if (f.probe >= 2 && f.probe <= 4) {  // no loads
      MbarExpectTx(&bars[s], 0);
      return;
    }
    MbarExpectTx(&bars[s], 2 * (wb + sb));
    if (wb > 0) {
      BulkCopyG2SHint(sl, pc.qa, wb, &bars[s], pol);
      BulkCopyG2SHint(sl + wb, pc.qb, wb, &bars[s], pol);
    }
    if (sb > 0) {
      BulkCopyG2SHint(sl + 2 * wb, pc.sa, sb, &bars[s], pol);
      BulkCopyG2SHint(sl + 2 * wb + sb, pc.sb, sb, &bars[s], pol);
    }
  };
  auto issue = [&](int p, int s) { issue_piece(s_piece[p], s); };
  // The warp's k-th piece is p = warp + k * kWarps, in slot warp + kWarps * (k % depth), that
  // slot's use k / depth: kept as counters (ks, kphase) by the loops below, not divided (depth
  // is an argument: a division per piece).
  auto slot_of = [&](int i) { return warp + kWarps * i; };  // the warp's slot i < depth
  // (Lane 0 asking for its warp's first pieces before the list is written did not pay.)
  if (f.host_route && warp < kGatherWarps) {
    gather_x(32 * kGatherWarps);
  } else {
    const int first = f.host_route ? 32 * kGatherWarps : 0;  // the listing threads [first, 32 kWarps)
    for (int p = threadIdx.x - first; p < np; p += 32 * kWarps - first) s_piece[p] = make_piece(p);
  }
  __syncthreads();
  Stamp(f, 2);
  // Each unit's 16 biases (8 per half), by the last warp with cp.async (not the copy engine: 64-byte bulk
  // copies queue behind the weight pieces' and held thread 0 ~6 us), completing bias_bar, which a
  // warp waits for before its first epilogue only (not before its first piece: ~5 us).
  if (warp == kWarps - 1) {
    for (int i = lane; i < nu * 4; i += 32) {
      const Piece& pc = s_piece[(i >> 2) * kParts];  // unit i / 4's first piece
      const bool hb = (i & 2) != 0;                  // half B's
      const int e = rt.e[hb ? pc.tile_b : pc.tile];
      const float* b = pc.gu ? g.bias + int64_t(e) * g.n + pc.grp * 16 + (i & 3) * 4
                             : d.bias + int64_t(e) * d.n + (hb ? pc.grp_b : pc.grp) * 8 + (i & 1) * 4;
      CpAsync16(bias + i * 4, b);
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(SmemAddr(bias_bar)) : "memory");
  }
  if (lane == 0) {
    // With f.defer a warp asks for no down piece before its gate_up pieces are computed (ask_down).
    for (int k = 0; k < depth && warp + k * kWarps < (f.defer ? npa : np); ++k) {
      issue(warp + k * kWarps, slot_of(k));
    }
  }
  Stamp(f, 3);
  // Computes the warp's k-th piece (waits for its slot), refills the slot with piece k + depth,
  // stores the partial; returns true (and the unit's sum in v: rows g, g + 8 x tile rows 2t,
  // 2t + 1) in the warp that finished the unit.
  int ks = 0;  // k % depth
  uint32_t kphase = 0;  // (k / depth) & 1
  auto run = [&](int k, const GemmArgs& p, const Piece& pc, float (&v)[4]) {
    const int s = slot_of(ks);
    const uint32_t parity = kphase;
    if (++ks == depth) ks = 0, kphase ^= 1u;  // the next piece's (run is called for k = 0, 1, ...)
    const uint8_t* sl = slots + size_t(s) * f.slot_bytes;
    const int wb = pc.wb, sb = 32 * (pc.c1 - pc.c0);
    // As if the groups' whole runs were there (only chunks [c0, c1) are read).
    const uint8_t *swa = sl - pc.c0 * 512, *swb = sl + wb - pc.c0 * 512;
    const uint8_t *ssa = sl + 2 * wb - pc.c0 * 32, *ssb = sl + 2 * wb + sb - pc.c0 * 32;
    // The mma's B columns (gl): gate_up, x rows by token of the tile's rows; down, the down
    // operand's rows of half A's tile, then (another tile) half B's (at most kTinyPairs in all).
    const int rows = rt.rows[pc.tile], cb = col_b0(pc);
    const int row = gl < rows ? rt.row0[pc.tile] + gl
                    : gl >= cb && gl < cb + rt.rows[pc.tile_b] ? rt.row0[pc.tile_b] + gl - cb
                                                                : rt.row0[pc.tile];
    const uint8_t* arow = sa + (pc.gu ? s_tok[row] : row) * f.a_stride + t * 64;
    float acc[2][1][2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int m = 0; m < 4; ++m) acc[i][0][j][m] = 0.f;
    MbarWait(&bars[s], parity);
    const int cf = (f.probe == 1 || f.probe == 3 || f.probe == 4) ? pc.c0 : min(pc.c1, p.nfull);
#pragma unroll 2
    for (int c = pc.c0; c < cf; ++c) SmemChunkMmaA<kOneMul, false>(acc, swa, swb, ssa, ssb, arow, c, lane);
    if (pc.c1 > p.nfull && cf == min(pc.c1, p.nfull)) SmemChunkMmaA<kOneMul, true>(acc, swa, swb, ssa, ssb, arow, p.nfull, lane);
    __syncwarp();
    const int next = warp + (k + depth) * kWarps;
    if (lane == 0 && next < (f.defer && pc.gu ? npa : np)) issue(next, s);
#pragma unroll
    for (int m = 0; m < 4; ++m) v[m] = (acc[0][0][0][m] + acc[0][0][1][m]) + (acc[1][0][0][m] + acc[1][0][1][m]);
    // Lanes t >= 2 hold tile rows 4-7, never stored (kTinyPairs = 4): 16 lanes' partials kept.
    const int pl = 2 * gl + t;
    if (t < 2) part[(pc.unit * kParts + pc.part) * 16 + pl] = make_float4(v[0], v[1], v[2], v[3]);
    // The partials are ordered before lane 0's acq_rel count by __syncwarp, and the last warp's
    // reads after its count by the second __syncwarp (no sequentially consistent fence: that
    // would wait for the warp's global stores in flight).
    __syncwarp();
    int last = 0;
    if (lane == 0) last = AtomAddAcqRelCta(&cnt[pc.unit], 1) == kParts - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) return false;
    __syncwarp();
    if (t < 2) {
      const float4 p0 = part[pc.unit * kParts * 16 + pl];
      v[0] = p0.x, v[1] = p0.y, v[2] = p0.z, v[3] = p0.w;
#pragma unroll
      for (int q = 1; q < kParts; ++q) {
        const float4 w = part[(pc.unit * kParts + q) * 16 + pl];
        v[0] += w.x, v[1] += w.y, v[2] += w.z, v[3] += w.w;
      }
    }
    return true;
  };

  int k = 0;
  for (; warp + k * kWarps < npa; ++k) {
    const Piece pc = s_piece[warp + k * kWarps];
    float v[4];
    if (!run(k, g, pc, v)) continue;  // (warp-uniform: StoreTileA shuffles across the warp)
    MbarWait(bias_bar, 0);
    const int fa = pc.grp * 16 + gl, fb = fa + 8;
    TileSlotsA ts{rt.row0[pc.tile], rt.rows[pc.tile], 0, 0, 0.f, 0.f};
    StoreTileA<true>(g, v, bias[pc.unit * 16 + gl], bias[pc.unit * 16 + 8 + gl], fa, fb, true, gl, t, ts,
                     kOneMul ? kPostActScale : 1.f);
  }

  // ask_down: the down pieces held back, the warp's next `depth` (k is its first down piece; the
  // slots they go to held gate_up pieces already computed, or none).
  if (lane == 0 && f.defer) {
    for (int i = 0; i < depth && warp + (k + i) * kWarps < np; ++i) {
      issue(warp + (k + i) * kWarps, slot_of(ks + i < depth ? ks + i : ks + i - depth));
    }
  }
  if (f.probe != 4 && f.probe != 9) GridBarrier(f.sync, f);
  Stamp(f, 5);
  {  // the down operand's rows (written by other CTAs: through L2, not L1), four loads in flight
     // per thread before any store (a load then its store per step waited one L2 round trip each)
    const int per_row = d.kp / 8, total = prow * per_row;
    constexpr int kStep = 32 * kWarps, kBatch = 4;
    for (int i0 = threadIdx.x; i0 < total; i0 += kBatch * kStep) {
      uint4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kStep, r = i / per_row;
        if (i < total) v[u] = __ldcg(reinterpret_cast<const uint4*>(d.a + int64_t(r) * d.kp) + (i - r * per_row));
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int i = i0 + u * kStep, r = i / per_row;
        if (i < total) *reinterpret_cast<uint4*>(sa + r * f.a_stride + (i - r * per_row) * 16) = v[u];
      }
    }
  }
  __syncthreads();
  Stamp(f, 6);

  for (; warp + k * kWarps < np; ++k) {
    const Piece pc = s_piece[warp + k * kWarps];
    float v[4];
    if (!run(k, d, pc, v)) continue;
    MbarWait(bias_bar, 0);
    // v: half A's row gl (tile `tile`) and half B's (tile_b) x columns 2t, 2t + 1 (run's B columns).
    const int rows = rt.rows[pc.tile], cb = col_b0(pc), rows_b = rt.rows[pc.tile_b];
    const float ba = bias[pc.unit * 16 + gl], bb = bias[pc.unit * 16 + 8 + gl];
#pragma unroll
    for (int j = 0; j < 2; ++j) {  // columns 2t, 2t + 1
      const int c = 2 * t + j;
      if (c < rows) {
        const int slot = rt.sorted[rt.row0[pc.tile] + c];
        ys[((pc.grp - range.r0) * kTinyPairs + slot) * 8 + gl] = s_w[slot] * (v[j] + ba);
      }
      if (!pc.dup && c >= cb && c < cb + rows_b) {
        const int slot = rt.sorted[rt.row0[pc.tile_b] + c - cb];
        ys[((pc.grp_b - range.r0) * kTinyPairs + slot) * 8 + gl] = s_w[slot] * (v[2 + j] + bb);
      }
    }
  }
  __syncthreads();
  Stamp(f, 7);
  if (f.probe == 8) return;  // (no sums: the out rows are not written)

  // out rows [8 r0, 8 r1) of every token: its held slots in slot order, from 0 (CombineKernel).
  uint32_t held = 0;
  for (int r = 0; r < prow; ++r) held |= 1u << rt.sorted[r];
  const int per_group = f.tokens * 8;
  for (int i = threadIdx.x; i < (range.r1 - range.r0) * per_group; i += 32 * kWarps) {
    const int rr = i / per_group, tok = (i % per_group) >> 3, col = i & 7;
    float acc = 0.f;
    for (int j = 0; j < sr.top_k; ++j) {
      const int slot = tok * sr.top_k + j;
      if (held >> slot & 1u) acc += ys[(rr * kTinyPairs + slot) * 8 + col];
    }
    f.out[int64_t(tok) * d.n + (range.r0 + rr) * 8 + col] = acc;
  }
  Stamp(f, 8);
}

namespace {


template <int kWarps, int kParts, bool kOneMul>
cudaError_t LaunchFusedT(const GemmArgs& g, const GemmArgs& d, const SelfRoute& sr, const FusedPlan& pl,
                         cudaStream_t stream) {
  auto kernel = FusedDecodeKernel<kWarps, kParts, kOneMul>;
  // The most dynamic shared memory next to the kernel's static (the plan keeps 1 KB for it).
  static const cudaError_t raised = [&] {
    cudaFuncAttributes fa{};
    const cudaError_t e = cudaFuncGetAttributes(&fa, kernel);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                Device().smem_optin - int(fa.sharedSizeBytes));
  }();
  if (raised != cudaSuccess) return raised;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(Device().sms);
  cfg.blockDim = dim3(32 * kWarps);
  cfg.dynamicSmemBytes = pl.smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // all CTAs resident: the grid barrier needs it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, g, d, sr, pl.f);
}

template <int kWarps, int kParts>
cudaError_t LaunchFusedWP(const GemmArgs& g, const GemmArgs& d, const SelfRoute& sr, const FusedPlan& pl,
                          bool one_mul, cudaStream_t stream) {
  return one_mul ? LaunchFusedT<kWarps, kParts, true>(g, d, sr, pl, stream)
                 : LaunchFusedT<kWarps, kParts, false>(g, d, sr, pl, stream);
}


// When each phase of the last fused call ended, over the grid (a markdown table), from this
// translation unit's stamps; plan: the launch's warps, parts, slots and shared memory.
inline std::string FusedStampsTable(const int (&plan_of)[4]) {
  static const char* kPhase[kStamps] = {"start",           "routed, x in", "pieces listed", "pieces asked for",
                                        "gate_up done",    "grid barrier", "down operand in", "down done",
                                        "summed",          "arrival counted"};
  uint64_t st[kStampCtas][kStamps];
  if (cudaMemcpyFromSymbol(st, g_stamps, sizeof(st)) != cudaSuccess) return "no stamps";
  const int n = std::min(Device().sms, kStampCtas);
  uint64_t t0 = st[0][0];
  for (int b = 0; b < n; ++b) t0 = std::min(t0, st[b][0]);
  char plan[160];
  std::snprintf(plan, sizeof(plan), "# fused plan: %d warps, %d K parts, %d slots, %d B of shared memory\n",
                plan_of[0], plan_of[1], plan_of[2], plan_of[3]);
  std::string r = std::string(plan) + "| phase | min us | median us | max us |\n|---|---|---|---|\n";
  for (int i = 0; i < kStamps; ++i) {
    std::vector<double> v;
    for (int b = 0; b < n; ++b) v.push_back((st[b][i] - t0) * 1e-3);
    r += PhaseRow(kPhase[i], std::move(v));
  }
  // The last CTA to arrive: its arrival, its increment's return, its barrier's end.
  int last = 0;
  for (int b = 1; b < n; ++b) last = st[b][4] > st[last][4] ? b : last;
  char last_line[160];
  std::snprintf(last_line, sizeof(last_line), "# last arrival: cta %d arrives %.2f, counted %.2f, through %.2f\n", last,
                (st[last][4] - t0) * 1e-3, (st[last][9] - t0) * 1e-3, (st[last][5] - t0) * 1e-3);
  r += last_line;
  // Variant::fused_stamps_ctas: each CTA's SM and its gate_up, barrier and down ends (whether
  // the late CTAs are the same SMs from launch to launch).
  const bool ctas = CurrentVariant().fused_stamps_ctas;
  uint32_t sm[kStampCtas];
  if (ctas && cudaMemcpyFromSymbol(sm, g_stamp_sm, sizeof(sm)) == cudaSuccess) {
    for (int b = 0; b < n; ++b) {
      char line[160];
      std::snprintf(line, sizeof(line), "# cta %d sm %u gate_up %.2f barrier %.2f down %.2f\n", b, sm[b],
                    (st[b][4] - t0) * 1e-3, (st[b][5] - t0) * 1e-3, (st[b][7] - t0) * 1e-3);
      r += line;
    }
  }
  return r;
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
